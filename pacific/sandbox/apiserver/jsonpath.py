"""The JSONPath subset of client-go's util/jsonpath that CRD printer columns use:
`.field`, `['field']`, `[n]`, `[start:end]`, `[*]`, `..field` and filters
`[?(@.type=="Ready")]` (==, !=, <, >, <=, >=, or a bare existence test).

`find(expr, obj)` returns every match in document order; a printer column shows
the first one, as kube-apiserver's table convertor does."""
import re

_OPS = ("==", "!=", "<=", ">=", "<", ">")
_IDENT = re.compile(r"[A-Za-z0-9_\-/$]+")


class JSONPathError(ValueError):
    pass


def parse(expr: str) -> list[tuple]:
    """Steps: ("field", name) | ("index", i) | ("slice", a, b) | ("all",) |
    ("recurse", name) | ("filter", left_steps, op, right)."""
    e = expr.strip()
    if e.startswith("{") and e.endswith("}"):
        e = e[1:-1].strip()
    if e.startswith("$"):
        e = e[1:]
    steps, i = [], 0
    while i < len(e):
        if e.startswith("..", i):
            m = _IDENT.match(e, i + 2)
            if not m:
                raise JSONPathError(f"invalid JSONPath {expr!r}: expected a field name after '..'")
            steps.append(("recurse", m.group()))
            i = m.end()
        elif e[i] == ".":
            m = _IDENT.match(e, i + 1)
            if not m:
                if i + 1 == len(e):          # "." alone: the object itself
                    i += 1
                    continue
                raise JSONPathError(f"invalid JSONPath {expr!r} at {i}")
            steps.append(("field", m.group()))
            i = m.end()
        elif e[i] == "[":
            j = _closing(e, i, expr)
            steps.append(_bracket(e[i + 1:j].strip(), expr))
            i = j + 1
        else:
            raise JSONPathError(f"invalid JSONPath {expr!r}: unexpected {e[i]!r} at {i}")
    return steps


def _closing(e: str, i: int, expr: str) -> int:
    depth, quote = 0, None
    for j in range(i, len(e)):
        c = e[j]
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
            if depth == 0:
                return j
    raise JSONPathError(f"invalid JSONPath {expr!r}: unclosed '['")


def _bracket(inner: str, expr: str) -> tuple:
    if inner == "*":
        return ("all",)
    if inner[:1] in "'\"" and inner[-1:] == inner[:1]:
        return ("field", inner[1:-1])
    if inner.startswith("?(") and inner.endswith(")"):
        return _filter(inner[2:-1].strip(), expr)
    if ":" in inner:
        a, _, b = inner.partition(":")
        try:
            return ("slice", int(a) if a.strip() else None, int(b.split(":")[0]) if b.split(":")[0].strip() else None)
        except ValueError:
            raise JSONPathError(f"invalid JSONPath {expr!r}: bad slice [{inner}]")
    try:
        return ("index", int(inner))
    except ValueError:
        raise JSONPathError(f"invalid JSONPath {expr!r}: bad subscript [{inner}]")


def _filter(text: str, expr: str) -> tuple:
    quote = None
    for k, c in enumerate(text):
        if quote:
            if c == quote:
                quote = None
            continue
        if c in "'\"":
            quote = c
            continue
        for op in _OPS:
            if text.startswith(op, k):
                return ("filter", _operand(text[:k].strip(), expr), op, _operand(text[k + len(op):].strip(), expr))
    return ("filter", _operand(text, expr), None, None)


def _operand(t: str, expr: str):
    if t.startswith("@"):
        return ("path", parse(t[1:]))
    if t[:1] in "'\"" and t[-1:] == t[:1] and len(t) >= 2:
        return ("lit", t[1:-1])
    if t in ("true", "false"):
        return ("lit", t == "true")
    try:
        return ("lit", int(t))
    except ValueError:
        try:
            return ("lit", float(t))
        except ValueError:
            raise JSONPathError(f"invalid JSONPath {expr!r}: bad filter operand {t!r}")


def _recurse(v, name, out):
    if isinstance(v, dict):
        if name in v:
            out.append(v[name])
        for x in v.values():
            _recurse(x, name, out)
    elif isinstance(v, list):
        for x in v:
            _recurse(x, name, out)


def _compare(a, op, b) -> bool:
    if op == "==":
        if isinstance(a, bool) or isinstance(b, bool):
            return a is b
        return a == b
    if op == "!=":
        return not _compare(a, "==", b)
    try:
        return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
    except TypeError:
        return False


def _eval_operand(o, item) -> list:
    return evaluate(o[1], item) if o[0] == "path" else [o[1]]


def evaluate(steps: list[tuple], obj) -> list:
    cur = [obj]
    for st in steps:
        nxt = []
        for v in cur:
            kind = st[0]
            if kind == "field":
                if isinstance(v, dict) and st[1] in v:
                    nxt.append(v[st[1]])
            elif kind == "index":
                if isinstance(v, list) and -len(v) <= st[1] < len(v):
                    nxt.append(v[st[1]])
            elif kind == "slice":
                if isinstance(v, list):
                    nxt.extend(v[st[1]:st[2]])
            elif kind == "all":
                if isinstance(v, list):
                    nxt.extend(v)
                elif isinstance(v, dict):
                    nxt.extend(v.values())
            elif kind == "recurse":
                _recurse(v, st[1], nxt)
            elif kind == "filter":
                items = v if isinstance(v, list) else list(v.values()) if isinstance(v, dict) else []
                for item in items:
                    left = _eval_operand(st[1], item)
                    if st[2] is None:
                        if left:
                            nxt.append(item)
                    elif left and any(_compare(a, st[2], b) for a in left for b in _eval_operand(st[3], item)):
                        nxt.append(item)
        cur = nxt
    return cur


def find(expr: str, obj) -> list:
    return evaluate(parse(expr), obj)
