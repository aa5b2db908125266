"""PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic
merge patch for the fields Pacific and kubectl use.

Strategic merge knows the merge keys of the lists it meets (containers by name,
conditions by type, ownerReferences by uid, service ports by port, ...), the
`$patch: replace|delete` directives, `$retainKeys`, `$deleteFromPrimitiveList/<f>`
and `$setElementOrder/<f>`, and merges `metadata.finalizers` as a set.  Lists it
has no merge key for are replaced, as the real server does.
"""
import copy

from pacific.sandbox.apiserver.errors import ApiError

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def _unprocessable(msg: str) -> ApiError:
    return ApiError(422, "Invalid", msg)


# ---------------------------------------------------------------- merge patch
def merge_patch(target, patch):
    """RFC 7386: returns a new value; target is not modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# ---------------------------------------------------------------- JSON patch
def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _unprocessable(f"invalid JSON pointer {path!r}: must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list, token: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit():
        raise _unprocessable(f"invalid array index {token!r}")
    i = int(token)
    if i > len(container) or (i == len(container) and not allow_end):
        raise _unprocessable(f"array index {i} out of bounds")
    return i


def _walk(doc, tokens: list[str], path: str):
    """The value at `tokens` (JSON pointer tokens of `path`) in `doc`."""
    cur = doc
    for t in tokens:
        if isinstance(cur, dict) and t in cur:
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(cur, t, False)]
        else:
            raise _unprocessable(f"doc is missing path: {path!r}")
    return cur


def _parent(doc, tokens: list[str], path: str):
    return _walk(doc, tokens[:-1], path)


def _get(doc, path: str):
    return _walk(doc, _pointer(path), path)


def _remove(doc, path: str):
    tokens = _pointer(path)
    if not tokens:
        raise _unprocessable("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable(f"unable to remove nonexistent key: {last}: missing value")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, False))
    raise _unprocessable(f"doc is missing path: {path!r}")


def _add(doc, path: str, value, replace: bool = False):
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise _unprocessable(f"replace operation does not apply: doc is missing key: {path}")
        parent[last] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(parent, last, False)] = value
        else:
            parent.insert(_index(parent, last, True), value)
    else:
        raise _unprocessable(f"doc is missing path: {path!r}")
    return doc


def json_patch(target, ops):
    """RFC 6902 on a deep copy of target."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise _unprocessable(f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise _unprocessable(f"{kind} operation on {path!r} has no value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "move":
            val = _remove(doc, op["from"])
            doc = _add(doc, path, val)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise _unprocessable(f"testing value {path} failed: test operation failed")
        else:
            raise _unprocessable(f"Unexpected kind: {kind}")
    return doc


# ---------------------------------------------------------------- strategic merge
# merge key of a list, by (parent field, field); parent "*" = anywhere
_MERGE_KEYS = {
    ("*", "containers"): "name", ("*", "initContainers"): "name",
    ("*", "ephemeralContainers"): "name", ("*", "volumes"): "name",
    ("*", "env"): "name", ("*", "volumeMounts"): "mountPath", ("*", "volumeDevices"): "devicePath",
    ("*", "imagePullSecrets"): "name", ("*", "conditions"): "type",
    ("*", "ownerReferences"): "uid", ("*", "hostAliases"): "ip",
    ("*", "topologySpreadConstraints"): "topologyKey", ("*", "containerStatuses"): "name",
    ("*", "initContainerStatuses"): "name", ("*", "podIPs"): "ip", ("*", "hostIPs"): "ip",
    ("*", "addresses"): "type", ("*", "images"): None, ("*", "taints"): "key",
    ("*", "envFrom"): None, ("*", "readinessGates"): "conditionType",
    ("containers", "ports"): "containerPort", ("initContainers", "ports"): "containerPort",
    ("spec", "ports"): "port",
}
# primitive lists merged as sets
_MERGE_PRIMITIVES = {"finalizers"}


def _merge_key(parent: str, field: str):
    if (parent, field) in _MERGE_KEYS:
        return _MERGE_KEYS[(parent, field)]
    return _MERGE_KEYS.get(("*", field))


def strategic_merge(target, patch, parent: str = ""):
    """Strategic merge of patch into a copy of target (dicts)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    if directive is not None:
        raise ApiError(400, "BadRequest", f"Unknown patch type: {directive}")
    out = copy.copy(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    for k, v in patch.items():
        if k in ("$retainKeys",) or k.startswith("$setElementOrder/"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            if isinstance(out.get(field), list) and isinstance(v, list):
                out[field] = [x for x in out[field] if x not in v]
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            merged = strategic_merge(out.get(k), v, k)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list):
            out[k] = _merge_list(out.get(k), v, parent, k)
        else:
            out[k] = v
    return out


def _merge_list(orig, patch: list, parent: str, field: str):
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [copy.deepcopy(x) for x in patch if not (isinstance(x, dict) and "$patch" in x)]
    orig = list(orig) if isinstance(orig, list) else []
    if field in _MERGE_PRIMITIVES:
        return orig + [x for x in patch if x not in orig]
    key = _merge_key(parent, field)
    if not key or not all(isinstance(x, dict) for x in patch):
        return copy.deepcopy(patch)
    for item in patch:
        kv = item.get(key)
        idx = next((i for i, o in enumerate(orig) if isinstance(o, dict) and o.get(key) == kv), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                orig.pop(idx)
            continue
        if idx is None:
            orig.append(strategic_merge({}, item, field))
        else:
            orig[idx] = strategic_merge(orig[idx], item, field)
    return orig


def apply_patch(content_type: str, target: dict, patch, custom: bool) -> dict:
    """Dispatch on the PATCH Content-Type (parameters ignored)."""
    ct = (content_type or "").split(";")[0].strip().lower()
    if ct == JSON_PATCH:
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise ApiError(400, "BadRequest", "patch body must be a JSON object")
    if ct == MERGE_PATCH:
        return merge_patch(target, patch)
    if ct == STRATEGIC_PATCH:
        if custom:
            raise ApiError(415, "UnsupportedMediaType",
                           "strategic merge patch is not supported for custom resources; "
                           "use application/merge-patch+json")
        return strategic_merge(target, patch)
    raise ApiError(415, "UnsupportedMediaType",
                   f"the body of the request was in an unknown format ({ct or 'no Content-Type'}) - "
                   "accepted media types include: application/json-patch+json, "
                   "application/merge-patch+json, application/strategic-merge-patch+json")
