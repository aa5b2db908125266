"""Structural OpenAPI v3 schemas of custom resources, applied as kube-apiserver
(apiextensions-apiserver + kube-openapi) applies them on every write:

1. pruning: fields a structural schema does not declare are dropped (kept under
   `x-kubernetes-preserve-unknown-fields: true`); `metadata` is cut down to
   ObjectMeta's fields for every kind;
2. defaulting: `default` fills missing fields; a `null` in a non-nullable field is
   dropped, or replaced by its default;
3. validation: type, enum, required, properties/additionalProperties, items,
   minimum/maximum (exclusive too), multipleOf, minLength/maxLength, pattern,
   format, minItems/maxItems/uniqueItems, minProperties/maxProperties, nullable,
   x-kubernetes-int-or-string; a subtree equal to the stored one is not
   re-validated (CRD validation ratcheting, on by default since 1.30).

Errors are `(reason, field, message)` causes worded like kube-apiserver's
(`spec.cidrBlock: Required value`, `spec.x: Invalid value: "integer": spec.x in
body must be of type string: "integer"`).
"""
import base64
import copy
import datetime
import ipaddress
import json
import re
import uuid

MISSING = object()

OBJECT_META_FIELDS = frozenset((
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
    "ownerReferences", "finalizers", "managedFields"))
_ROOT_KEPT = ("apiVersion", "kind", "metadata")
_TYPES = ("object", "array", "string", "integer", "number", "boolean")


# ---------------------------------------------------------------- wording
def fmt_value(v) -> str:
    """A value as field.Error.ErrorBody prints it (strings quoted, numbers bare)."""
    if v is None:
        return '"null"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return fmt_number(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    return json.dumps(v, separators=(",", ":"), sort_keys=True)


def fmt_number(n) -> str:
    if isinstance(n, float) and n.is_integer() and abs(n) < 1e21:
        return str(int(n))
    return str(n)


def child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def json_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _is_type(v, t: str) -> bool:
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return True


# ---------------------------------------------------------------- pruning
def prune_metadata(obj: dict, unknown: list[str]) -> None:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for k in [k for k in meta if k not in OBJECT_META_FIELDS]:
            del meta[k]
            unknown.append(f"metadata.{k}")


def prune(v, s: dict, path: str, unknown: list[str], root: bool = False) -> None:
    """Drop, in place, the fields of v that schema s does not declare."""
    if not isinstance(s, dict):
        return
    if isinstance(v, dict):
        props = s.get("properties")
        addl = s.get("additionalProperties")
        preserve = s.get("x-kubernetes-preserve-unknown-fields") is True
        embedded = s.get("x-kubernetes-embedded-resource") is True
        for k in list(v):
            if root and k in _ROOT_KEPT or embedded and k in _ROOT_KEPT:
                continue
            if props and k in props:
                prune(v[k], props[k], child(path, k), unknown)
            elif isinstance(addl, dict):
                prune(v[k], addl, child(path, k), unknown)
            elif not preserve and addl is not True:
                del v[k]
                unknown.append(child(path, k))
    elif isinstance(v, list) and isinstance(s.get("items"), dict):
        for i, item in enumerate(v):
            prune(item, s["items"], f"{path}[{i}]", unknown)


# ---------------------------------------------------------------- defaulting
def apply_defaults(v, s: dict) -> None:
    """Fill defaults in place; drop nulls of non-nullable fields without default."""
    if not isinstance(s, dict):
        return
    if isinstance(v, dict):
        props = s.get("properties") or {}
        for k, ps in props.items():
            if not isinstance(ps, dict):
                continue
            if (k not in v or (v[k] is None and not ps.get("nullable"))) and "default" in ps:
                v[k] = copy.deepcopy(ps["default"])
            elif k in v and v[k] is None and not ps.get("nullable"):
                del v[k]
        addl = s.get("additionalProperties")
        for k in list(v):
            ps = props.get(k, addl if isinstance(addl, dict) else None)
            if isinstance(ps, dict):
                if k not in props and v[k] is None and not ps.get("nullable"):
                    if "default" in ps:
                        v[k] = copy.deepcopy(ps["default"])
                    else:
                        del v[k]
                        continue
                apply_defaults(v[k], ps)
    elif isinstance(v, list) and isinstance(s.get("items"), dict):
        items = s["items"]
        for i, item in enumerate(v):
            if item is None and not items.get("nullable") and "default" in items:
                v[i] = copy.deepcopy(items["default"])
            apply_defaults(v[i], items)


# ---------------------------------------------------------------- formats
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?$")
_MAC = re.compile(r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$")


def _valid_format(fmt: str, v: str) -> bool:
    try:
        if fmt == "date-time":
            if not _DATE_TIME.match(v):
                return False
            datetime.date.fromisoformat(v[:10])
            return True
        if fmt == "date":
            datetime.date.fromisoformat(v)
            return len(v) == 10
        if fmt == "ipv4":
            return isinstance(ipaddress.ip_address(v), ipaddress.IPv4Address)
        if fmt == "ipv6":
            return isinstance(ipaddress.ip_address(v), ipaddress.IPv6Address)
        if fmt == "cidr":
            ipaddress.ip_network(v, strict=False)
            return "/" in v
        if fmt == "mac":
            return bool(_MAC.match(v))
        if fmt == "uuid":
            uuid.UUID(v)
            return len(v) == 36
        if fmt == "byte":
            base64.b64decode(v, validate=True)
            return True
    except ValueError:
        return False
    return True      # formats kube-apiserver does not check (int32, password, ...)


# ---------------------------------------------------------------- validation
def validate(v, s: dict, path: str = "", old=MISSING, root: bool = False) -> list[tuple[str, str, str]]:
    errs: list[tuple[str, str, str]] = []
    _validate(v, s, path, old, errs, root)
    return errs


def _validate(v, s, path, old, errs, root=False):
    if not isinstance(s, dict) or (old is not MISSING and old == v):
        return          # ratcheting: an unchanged subtree stays accepted
    name = path or "body"
    t = "integer,string" if s.get("x-kubernetes-int-or-string") else s.get("type")
    if v is None:
        if t and not s.get("nullable"):
            errs.append(("FieldValueTypeInvalid", path,
                         f'Invalid value: "null": {name} in body must be of type {t}: "null"'))
        return
    if t == "integer,string":
        ok = isinstance(v, str) or _is_type(v, "integer")
    else:
        ok = not t or _is_type(v, t)
    if not ok:
        actual = json_type(v)
        errs.append(("FieldValueTypeInvalid", path,
                     f'Invalid value: "{actual}": {name} in body must be of type {t}: "{actual}"'))
        return
    if "enum" in s and isinstance(s["enum"], list) and not any(_json_eq(v, e) for e in s["enum"]):
        allowed = ", ".join(json.dumps(e if isinstance(e, str) else json.dumps(e)) for e in s["enum"])
        errs.append(("FieldValueNotSupported", path,
                     f"Unsupported value: {fmt_value(v)}: supported values: {allowed}"))
    if isinstance(v, str):
        _validate_string(v, s, path, name, errs)
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        _validate_number(v, s, path, name, errs)
    elif isinstance(v, list):
        _validate_array(v, s, path, name, errs)
    elif isinstance(v, dict):
        _validate_object(v, s, path, name, old, errs, root)


def _json_eq(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b if isinstance(a, bool) and isinstance(b, bool) else False
    return a == b


def _validate_string(v, s, path, name, errs):
    if "maxLength" in s and len(v) > s["maxLength"]:
        errs.append(("FieldValueTooLong", path, f"Too long: may not be longer than {s['maxLength']}"))
    if "minLength" in s and len(v) < s["minLength"]:
        errs.append(("FieldValueInvalid", path, f"Invalid value: {fmt_value(v)}: {name} in body should be "
                     f"at least {s['minLength']} chars long"))
    if s.get("pattern"):
        try:
            matched = re.search(s["pattern"], v) is not None
        except re.error:
            matched = True       # kube-apiserver refuses such a CRD; nothing to check here
        if not matched:
            errs.append(("FieldValueInvalid", path, f"Invalid value: {fmt_value(v)}: {name} in body should "
                         f"match '{s['pattern']}'"))
    fmt = s.get("format")
    if fmt and not _valid_format(fmt, v):
        errs.append(("FieldValueTypeInvalid", path, f"Invalid value: {fmt_value(v)}: {name} in body must be "
                     f"of type {fmt}: {fmt_value(v)}"))


def _validate_number(v, s, path, name, errs):
    def bad(detail):
        errs.append(("FieldValueInvalid", path, f"Invalid value: {fmt_value(v)}: {name} in body {detail}"))
    m = s.get("multipleOf")
    if m and (v / m) != int(v / m):
        bad(f"should be a multiple of {fmt_number(m)}")
    if "maximum" in s:
        if s.get("exclusiveMaximum") and v >= s["maximum"]:
            bad(f"should be less than {fmt_number(s['maximum'])}")
        elif v > s["maximum"]:
            bad(f"should be less than or equal to {fmt_number(s['maximum'])}")
    if "minimum" in s:
        if s.get("exclusiveMinimum") and v <= s["minimum"]:
            bad(f"should be greater than {fmt_number(s['minimum'])}")
        elif v < s["minimum"]:
            bad(f"should be greater than or equal to {fmt_number(s['minimum'])}")


def _validate_array(v, s, path, name, errs):
    items = s.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(v):
            _validate(item, items, f"{path}[{i}]", MISSING, errs)
    if "minItems" in s and len(v) < s["minItems"]:
        errs.append(("FieldValueInvalid", path, f"Invalid value: {len(v)}: {name} in body should have at "
                     f"least {s['minItems']} items"))
    if "maxItems" in s and len(v) > s["maxItems"]:
        errs.append(("FieldValueTooMany", path, f"Too many: {len(v)}: must have at most {s['maxItems']} items"))
    if s.get("uniqueItems") or s.get("x-kubernetes-list-type") == "set":
        seen = []
        for i, item in enumerate(v):
            if any(_json_eq(item, x) for x in seen):
                if s.get("uniqueItems"):
                    errs.append(("FieldValueInvalid", path, f"Invalid value: \"array\": {name} in body "
                                 "shouldn't contain duplicates"))
                else:
                    errs.append(("FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {fmt_value(item)}"))
                break
            seen.append(item)


def _validate_object(v, s, path, name, old, errs, root):
    for k in s.get("required") or []:
        if k not in v:
            errs.append(("FieldValueRequired", child(path, k), "Required value"))
    props = s.get("properties") or {}
    addl = s.get("additionalProperties")
    for k, val in v.items():
        if root and k in _ROOT_KEPT:
            continue
        ps = props.get(k, addl if isinstance(addl, dict) else None)
        if ps is not None:
            o = old.get(k, MISSING) if isinstance(old, dict) else MISSING
            _validate(val, ps, child(path, k), o, errs)
    n = len(v)
    if "maxProperties" in s and n > s["maxProperties"]:
        errs.append(("FieldValueTooMany", path, f"Too many: {n}: must have at most {s['maxProperties']} items"))
    if "minProperties" in s and n < s["minProperties"]:
        errs.append(("FieldValueInvalid", path, f"Invalid value: {n}: {name} in body should have at least "
                     f"{s['minProperties']} properties"))


# ---------------------------------------------------------------- CRD schemas
_INT_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_NUM_KEYWORDS = ("minimum", "maximum", "multipleOf")


def _check_keyword_types(s: dict, path: str) -> list[tuple[str, str, str]]:
    """Keywords whose value has the wrong type would make every later write of
    the resource fail inside validation: refuse the CRD instead."""
    errs = []

    def bad(key: str, what: str) -> None:
        errs.append(("FieldValueInvalid", f"{path}.{key}",
                     f"Invalid value: {fmt_value(s[key])}: must be {what}"))
    for k in _INT_KEYWORDS:
        if k in s and (not isinstance(s[k], int) or isinstance(s[k], bool) or s[k] < 0):
            bad(k, "a non-negative integer")
    for k in _NUM_KEYWORDS:
        if k in s and (not isinstance(s[k], (int, float)) or isinstance(s[k], bool)):
            bad(k, "a number")
    for k in ("properties",):
        if k in s and not isinstance(s[k], dict):
            bad(k, "an object")
    if "required" in s and not (isinstance(s["required"], list)
                                and all(isinstance(x, str) for x in s["required"])):
        bad("required", "a list of strings")
    if "enum" in s and not isinstance(s["enum"], list):
        bad("enum", "a list")
    if "pattern" in s:
        try:
            re.compile(s["pattern"]) if isinstance(s["pattern"], str) else bad("pattern", "a string")
        except re.error as e:
            bad("pattern", f"a valid regular expression ({e})")
    return errs


def check_structural(s, path: str, root: bool = True) -> list[tuple[str, str, str]]:
    """The structural-schema rules kube-apiserver enforces on a CRD's openAPIV3Schema
    (the subset a schema author trips over), plus validity of every `default`."""
    errs: list[tuple[str, str, str]] = []
    if not isinstance(s, dict):
        return [("FieldValueInvalid", path, "Invalid value: must be an object")]
    t = s.get("type")
    untyped_ok = s.get("x-kubernetes-int-or-string") or s.get("x-kubernetes-preserve-unknown-fields")
    if root and t != "object":
        errs.append(("FieldValueInvalid", f"{path}.type", f"Invalid value: {fmt_value(t or '')}: "
                     "must be object at the root"))
    elif not t and not untyped_ok:
        errs.append(("FieldValueRequired", f"{path}.type",
                     "Required value: must not be empty for specified object fields"))
    elif t and t not in _TYPES:
        errs.append(("FieldValueNotSupported", f"{path}.type", f"Unsupported value: {fmt_value(t)}: "
                     'supported values: "array", "boolean", "integer", "number", "object", "string"'))
    errs += _check_keyword_types(s, path)
    if t == "array" and not isinstance(s.get("items"), dict):
        errs.append(("FieldValueRequired", f"{path}.items", "Required value: must be specified"))
    if s.get("properties") and isinstance(s.get("additionalProperties"), dict):
        errs.append(("FieldValueForbidden", f"{path}.additionalProperties",
                     "Forbidden: additionalProperties and properties are mutual exclusive"))
    props = s.get("properties")
    for k, ps in (props if isinstance(props, dict) else {}).items():
        errs += check_structural(ps, f"{path}.properties[{k}]", root=False)
    for key in ("items", "additionalProperties"):
        if isinstance(s.get(key), dict):
            errs += check_structural(s[key], f"{path}.{key}", root=False)
    if "default" in s:
        if root:
            errs.append(("FieldValueForbidden", f"{path}.default", "Forbidden: must not be set at the root"))
        else:
            d = copy.deepcopy(s["default"])
            unknown: list[str] = []
            prune(d, s, "", unknown)
            for _, f, msg in validate(d, s, ""):
                errs.append(("FieldValueInvalid", f"{path}.default" + (f".{f}" if f else ""), msg))
            if unknown:
                errs.append(("FieldValueInvalid", f"{path}.default", f"Invalid value: {fmt_value(s['default'])}: "
                             f"must not have unknown fields: {', '.join(unknown)}"))
    return errs


def admit(obj: dict, schema: dict | None, old: dict | None = None) -> tuple[list[str], list]:
    """Prune, default and validate a whole object in place.
    Returns (unknown field paths dropped, validation causes)."""
    unknown: list[str] = []
    prune_metadata(obj, unknown)
    if not schema:
        return unknown, []
    prune(obj, schema, "", unknown, root=True)
    apply_defaults(obj, schema)
    return unknown, validate(obj, schema, "", MISSING if old is None else old, root=True)
