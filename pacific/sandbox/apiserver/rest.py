"""Resource operations behind the HTTP handler: decode and check bodies, call the
store, shape answers (objects, lists, tables, Status) the way kube-apiserver does."""
import base64
import json
import time

import yaml

from pacific.sandbox.apiserver import errors, tables
from pacific.sandbox.apiserver.patch import APPLY_PATCH, apply_patch, strategic_merge, merge_patch
from pacific.sandbox.apiserver.resources import ResourceType
from pacific.sandbox.apiserver.selectors import FieldSelector, LabelSelector
from pacific.sandbox.apiserver.store import Entry, Store, encode


def decode_body(raw: bytes, content_type: str):
    ct = (content_type or "application/json").split(";")[0].strip().lower()
    if not raw:
        raise errors.bad_request("the request body is empty")
    try:
        if ct.endswith("yaml"):
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        kind = "yaml" if ct.endswith("yaml") else "json"
        raise errors.bad_request(f"couldn't decode the request body: {kind} parse error: {e}")


def check_object(rt: ResourceType, obj, op: str = "create") -> dict:
    """Body of create/update: an object of the URL's kind (defaults taken from the URL)."""
    if not isinstance(obj, dict):
        raise errors.bad_request(f"the body of the request must be a JSON object, got {type(obj).__name__}")
    kind = obj.get("kind") or rt.kind
    api_version = obj.get("apiVersion") or rt.api_version
    group, _, version = api_version.rpartition("/")
    if group != rt.group or version not in rt.served_versions:
        raise errors.bad_request(f"the API version in the data ({api_version}) does not match the expected "
                                 f"API version ({rt.api_version})")
    if kind != rt.kind:
        raise errors.bad_request(f'{kind} in version "{version}" cannot be handled as a {rt.kind}: '
                                 f'no kind "{kind}" is registered for version "{api_version}" on this URL')
    if not isinstance(obj.get("metadata", {}), dict):
        raise errors.bad_request("metadata must be a JSON object")
    for k in ("name", "generateName", "namespace", "resourceVersion", "uid"):
        v = (obj.get("metadata") or {}).get(k)
        if v is not None and not isinstance(v, str):
            raise errors.bad_request(f"couldn't decode the request body: metadata.{k} must be a "
                                     f"string, got {type(v).__name__}")
    obj["kind"] = kind
    obj["apiVersion"] = rt.group + "/" + rt.storage_version if rt.group else rt.storage_version
    return obj


def out_raw(rt: ResourceType, e: Entry) -> bytes:
    """Object bytes as seen through rt's version (custom resources may be asked in any served version)."""
    if rt.version == rt.storage_version:
        return e.raw
    obj = dict(e.obj, apiVersion=rt.api_version)
    return encode(obj)


def selectors(rt: ResourceType, q: dict) -> tuple[LabelSelector, FieldSelector]:
    return (LabelSelector(q.get("labelSelector")),
            FieldSelector(q.get("fieldSelector"), rt.allowed_fields(), rt.kind))


def _continue_token(rv: int, after: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": list(after)}).encode()).decode()


TOO_LARGE_RV_WAIT = 3.0      # kube-apiserver waits this long for its cache to catch up


def list_options(store: Store, q: dict) -> str:
    """Check resourceVersion / resourceVersionMatch / continue as kube-apiserver does.
    Returns the requested resourceVersion ("" or "0": any, i.e. the current state)."""
    rv, match, cont = q.get("resourceVersion", ""), q.get("resourceVersionMatch", ""), q.get("continue")
    causes = []
    if match and match not in ("Exact", "NotOlderThan"):
        causes.append(("FieldValueNotSupported", "resourceVersionMatch",
                       f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan"'))
    elif match and not rv:
        causes.append(("FieldValueForbidden", "resourceVersionMatch",
                       "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"))
    elif match and cont:
        causes.append(("FieldValueForbidden", "resourceVersionMatch",
                       "Forbidden: resourceVersionMatch is forbidden when continue is provided"))
    elif match == "Exact" and rv == "0":
        causes.append(("FieldValueForbidden", "resourceVersionMatch",
                       'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
    if causes:
        raise errors.invalid("meta.k8s.io", "ListOptions", "", causes)
    if rv in ("", "0"):
        return rv
    if cont:
        raise errors.bad_request("specifying resource version is not allowed when using continue")
    try:
        want = int(rv)
    except ValueError:
        raise errors.bad_request(f"invalid resource version: {rv!r} is not an integer")
    deadline = time.monotonic() + TOO_LARGE_RV_WAIT
    while store.rv < want and time.monotonic() < deadline:
        time.sleep(0.05)
    if store.rv < want:
        raise errors.ApiError(504, "Timeout", f"Too large resource version: {want}, current: {store.rv}",
                              {"causes": [{"reason": "ResourceVersionTooLarge",
                                           "message": "Too large resource version"}],
                               "retryAfterSeconds": 1})
    if match == "Exact" and want != store.rv:
        # no history of object states is kept: an older exact list cannot be served
        raise errors.gone("The resourceVersion for the provided list is too old.")
    return rv


def list_body(store: Store, rt: ResourceType, ns: str | None, q: dict, accept: str) -> bytes:
    ls, fs = selectors(rt, q)
    asked = list_options(store, q)
    meta: dict = {}
    # pagination: limit/continue (kubectl get asks limit=500)
    start = None
    cont = q.get("continue")
    if cont:
        try:
            tok = json.loads(base64.urlsafe_b64decode(cont.encode()))
            start = tuple(tok["start"])
            if len(start) != 2 or not all(isinstance(x, str) for x in start) or \
                    not isinstance(tok["rv"], int):
                raise ValueError("malformed position")
            meta["resourceVersion"] = str(tok["rv"])
        except (ValueError, KeyError, TypeError):
            raise errors.bad_request("invalid continue token")
    # resourceVersion=0 is served from kube-apiserver's watch cache, which ignores limit
    limit = q.get("limit") if asked != "0" else None
    n = None
    if limit:
        try:
            n = int(limit)
        except ValueError:
            raise errors.bad_request(f"invalid limit {limit!r}")
    rv, entries, more = store.list(rt, ns, ls, fs, after=start, limit=n if n and n > 0 else None)
    meta.setdefault("resourceVersion", str(rv))
    if more:
        last = entries[-1].obj["metadata"]
        meta["continue"] = _continue_token(int(meta["resourceVersion"]),
                                           (last.get("namespace", ""), last["name"]))
        if ls is None or ls.empty():       # as kube-apiserver: only without selectors
            if fs is None or fs.empty():
                meta["remainingItemCount"] = more
    if tables.wants_table(accept):
        t = tables.table(rt, [e.obj for e in entries], meta["resourceVersion"], q.get("includeObject", ""))
        t["metadata"] = meta
        return encode(t)
    head = encode({"kind": rt.kind + "List", "apiVersion": rt.api_version, "metadata": meta})
    return head[:-1] + b',"items":[' + b",".join(out_raw(rt, e) for e in entries) + b"]}"


def object_body(rt: ResourceType, e: Entry, accept: str, q: dict) -> bytes:
    if tables.wants_table(accept):
        return encode(tables.table(rt, [e.obj], e.obj["metadata"]["resourceVersion"],
                                   q.get("includeObject", "")))
    return out_raw(rt, e)


def dry_run(q: dict) -> bool:
    v = q.get("dryRun")
    if v is None:
        return False
    if v != "All":
        raise errors.bad_request(f'unsupported dryRun value {v!r}: supported values: "All"')
    return True


def create_body(rt: ResourceType, ns: str, body) -> dict:
    obj = check_object(rt, body)
    meta = obj.setdefault("metadata", {})
    if rt.namespaced and meta.get("namespace") and meta["namespace"] != ns:
        raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                 "sent on the request")
    return obj


def patch(store: Store, rt: ResourceType, ns: str, name: str, content_type: str, raw: bytes,
          subresource: str, dry: bool) -> tuple[Entry, bool]:
    """Returns (entry, created); only server-side apply creates."""
    ct = (content_type or "").split(";")[0].strip().lower()
    body = decode_body(raw, "application/yaml" if ct == APPLY_PATCH else "application/json")
    custom = rt.crd is not None
    if ct == APPLY_PATCH:
        # Server-side apply, approximated: create when missing, otherwise a merge of the
        # applied configuration (no managedFields / conflict detection).
        obj = check_object(rt, body)
        nsk = ns if rt.namespaced else ""
        with store.lock:
            if (nsk, name) not in store.objects[rt.key]:
                if subresource:
                    raise errors.not_found(rt.group, rt.plural, name)
                obj.setdefault("metadata", {})["name"] = name
                return store.create(rt, ns, obj, dry), True
            merge = merge_patch if custom else strategic_merge
            obj["metadata"].pop("resourceVersion", None)
            return store.mutate(rt, ns, name, lambda cur: merge(cur, obj), subresource, dry), False
    return store.mutate(rt, ns, name, lambda cur: apply_patch(ct, cur, body, custom), subresource, dry), False


def delete_options(raw: bytes, q: dict) -> dict:
    opts = {}
    if raw:
        try:
            opts = json.loads(raw)
        except ValueError as e:
            raise errors.bad_request(f"couldn't decode DeleteOptions: {e}")
        if not isinstance(opts, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        if not isinstance(opts.get("preconditions") or {}, dict):
            raise errors.bad_request("DeleteOptions.preconditions must be a JSON object")
    for k in ("propagationPolicy", "gracePeriodSeconds", "dryRun"):
        if k in q and k not in opts:
            opts[k] = q[k]
    dry = opts.get("dryRun")
    if dry not in (None, "All", [], ["All"]):   # never run a real delete for a typo
        raise errors.bad_request(f'unsupported dryRun value {dry!r}: supported values: "All"')
    return opts


def status_success(rt: ResourceType, name: str, uid: str) -> bytes:
    return encode({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                   "details": {"name": name, "group": rt.group, "kind": rt.plural, "uid": uid}})


def out_raw_obj(rt: ResourceType, ev) -> bytes:
    """Watch event object bytes in rt's version."""
    if rt.version == rt.storage_version:
        return ev.raw
    return encode(dict(ev.obj, apiVersion=rt.api_version))
