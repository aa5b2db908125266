"""Label and field selectors, parsed like kube-apiserver parses them.

Label selector grammar: comma-separated requirements, each one of
`key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)`, `key notin (a,b)`,
`key>n`, `key<n`.  Field selectors: `path=v`, `path==v`, `path!=v`, comma-separated.
"""
import re

from pacific.sandbox.apiserver.errors import ApiError, bad_request

_KEY = r"(?:[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?"
_KEY_RE = re.compile(rf"^{_KEY}$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise bad_request(f"unable to parse requirement: unbalanced parentheses in {text!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _check_key(key: str, text: str):
    if not _KEY_RE.match(key) or len(key.split("/")[-1]) > 63:
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in selector {text!r}")


def _check_value(v: str, text: str):
    if len(v) > 63 or not _VALUE_RE.match(v):
        raise bad_request(f"unable to parse requirement: invalid label value {v!r} in selector {text!r}")


class LabelSelector:
    """A parsed label selector; `matches(labels)`."""

    def __init__(self, text: str | None):
        self.text = text or ""
        self.reqs: list[tuple[str, str, object]] = []
        if not self.text.strip():
            return
        for part in _split_top(self.text):
            if not part:
                raise bad_request(f"unable to parse requirement: found '', expected: identifier "
                                  f"in selector {self.text!r}")
            self.reqs.append(self._parse(part))

    def _parse(self, part: str):
        m = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", part)
        if m:
            key, op, vals = m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]
            _check_key(key, self.text)
            for v in vals:
                _check_value(v, self.text)
            return (key, op, frozenset(vals))
        if part.startswith("!"):
            key = part[1:].strip()
            _check_key(key, self.text)
            return (key, "!exists", None)
        for op in ("==", "!=", "=", ">", "<"):
            if op in part:
                key, _, val = part.partition(op)
                key, val = key.strip(), val.strip()
                _check_key(key, self.text)
                if op in (">", "<"):
                    if not re.match(r"^-?\d+$", val):
                        raise bad_request(f"unable to parse requirement: for 'Gt', 'Lt' operators, the "
                                          f"value must be an integer in selector {self.text!r}")
                    return (key, op, int(val))
                _check_value(val, self.text)
                return (key, "=" if op == "==" else op, val)
        _check_key(part, self.text)
        return (part, "exists", None)

    def empty(self) -> bool:
        return not self.reqs

    def matches(self, labels: dict | None) -> bool:
        labels = labels or {}
        for key, op, val in self.reqs:
            have = key in labels
            cur = labels.get(key)
            if op == "=":
                ok = have and cur == val
            elif op == "!=":
                ok = not have or cur != val
            elif op == "in":
                ok = have and cur in val
            elif op == "notin":
                ok = not have or cur not in val
            elif op == "exists":
                ok = have
            elif op == "!exists":
                ok = not have
            else:
                try:
                    n = int(cur) if have else None
                except ValueError:
                    n = None
                ok = n is not None and (n > val if op == ">" else n < val)
            if not ok:
                return False
        return True


def get_path(obj: dict, path: str):
    """Value at a dotted path, or None."""
    cur = obj
    for p in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(p)
    return cur


def _field_str(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class FieldSelector:
    """A parsed field selector restricted to the resource's supported fields."""

    def __init__(self, text: str | None, allowed: set[str], kind: str = ""):
        self.text = text or ""
        self.reqs: list[tuple[str, str, str]] = []
        if not self.text.strip():
            return
        for part in _split_top(self.text):
            m = re.match(r"^([^=!]+)(==|!=|=)(.*)$", part)
            if not m:
                raise bad_request(f"invalid selector: {self.text!r}; can't understand {part!r}")
            path, op, val = m.group(1).strip(), m.group(2), m.group(3).strip()
            if path not in allowed:
                raise bad_request(f'field label not supported: {path}' if not kind else
                                  f'"{path}" is not a known field selector: only '
                                  f'"{", ".join(sorted(allowed))}"')
            self.reqs.append((path, "!=" if op == "!=" else "=", val))

    def empty(self) -> bool:
        return not self.reqs

    def matches(self, obj: dict) -> bool:
        for path, op, val in self.reqs:
            cur = _field_str(get_path(obj, path))
            if (cur == val) != (op == "="):
                return False
        return True

    def exact_name(self) -> str | None:
        for path, op, val in self.reqs:
            if path == "metadata.name" and op == "=":
                return val
        return None


__all__ = ["LabelSelector", "FieldSelector", "get_path", "ApiError"]
