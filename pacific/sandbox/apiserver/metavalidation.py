"""ObjectMeta validation worded as apimachinery's: names per kind (RFC 1123
subdomain, RFC 1123 label, DNS-1035 label), generateName, label keys and values,
annotation keys and total size, finalizer names, owner references.

Every function returns `(reason, field, message)` causes; nothing raises."""
import json
import re

from pacific.sandbox.apiserver.schema import fmt_value

_SUBDOMAIN_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1035_FMT = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_QNAME_FMT = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_RE = {f: re.compile(f"^{f}$") for f in (_SUBDOMAIN_FMT, _LABEL_FMT, _DNS1035_FMT, _QNAME_FMT,
                                          _LABEL_VALUE_FMT)}
ANNOTATIONS_SIZE_LIMIT = 256 * 1024
GENERATED_NAME_BASE_MAX = 63 - 5      # apiserver's SimpleNameGenerator

# kinds whose names follow another rule than RFC 1123 subdomain
NAME_RULE = {"Namespace": "label", "Service": "dns1035"}


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    eg = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {eg}regex used for validation is '{fmt}')"


def is_dns1123_subdomain(v: str) -> list[str]:
    errs = []
    if len(v) > 253:
        errs.append("must be no more than 253 characters")
    if not _RE[_SUBDOMAIN_FMT].match(v):
        errs.append(regex_error("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                                "characters, '-' or '.', and must start and end with an alphanumeric character",
                                _SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1123_label(v: str) -> list[str]:
    errs = []
    if len(v) > 63:
        errs.append("must be no more than 63 characters")
    if not _RE[_LABEL_FMT].match(v):
        errs.append(regex_error("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                                "or '-', and must start and end with an alphanumeric character",
                                _LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1035_label(v: str) -> list[str]:
    errs = []
    if len(v) > 63:
        errs.append("must be no more than 63 characters")
    if not _RE[_DNS1035_FMT].match(v):
        errs.append(regex_error("a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                                "start with an alphabetic character, and end with an alphanumeric character",
                                _DNS1035_FMT, "my-name", "abc-123"))
    return errs


_RULES = {"subdomain": is_dns1123_subdomain, "label": is_dns1123_label, "dns1035": is_dns1035_label}


def name_errors(kind: str, name: str, prefix: bool = False) -> list[str]:
    """Messages for a name of this kind; prefix=True checks a generateName."""
    if prefix and len(name) > 1 and name.endswith("-"):
        name = name[:-1] + "a"       # apimachinery's maskTrailingDash
    return _RULES[NAME_RULE.get(kind, "subdomain")](name)


def is_qualified_name(v: str) -> list[str]:
    parts = v.split("/")
    qname_msg = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with " \
                "an alphanumeric character"
    if len(parts) == 1:
        name, prefix = parts[0], None
    elif len(parts) == 2:
        prefix, name = parts
    else:
        return ["a qualified name " + regex_error(qname_msg, _QNAME_FMT, "MyName", "my.name", "123-abc") +
                " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    errs = []
    if prefix is not None:
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in is_dns1123_subdomain(prefix)]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not _RE[_QNAME_FMT].match(name):
        errs.append("name part " + regex_error(qname_msg, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_label_value(v: str) -> list[str]:
    errs = []
    if len(v) > 63:
        errs.append("must be no more than 63 characters")
    if not _RE[_LABEL_VALUE_FMT].match(v):
        errs.append(regex_error("a valid label must be an empty string or consist of alphanumeric characters, "
                                "'-', '_' or '.', and must start and end with an alphanumeric character",
                                _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def _invalid(field: str, value, msg: str) -> tuple[str, str, str]:
    return ("FieldValueInvalid", field, f"Invalid value: {fmt_value(value)}: {msg}")


def _string_map(meta: dict, key: str, causes: list) -> dict:
    v = meta.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
        causes.append(("FieldValueInvalid", f"metadata.{key}",
                       "Invalid value: must be a map of string keys to string values"))
        return {}
    return v


def validate_object_meta(kind: str, meta: dict) -> list[tuple[str, str, str]]:
    causes: list[tuple[str, str, str]] = []
    name = meta.get("name") or ""
    gen = meta.get("generateName") or ""
    if gen:
        causes += [_invalid("metadata.generateName", gen, m) for m in name_errors(kind, gen, prefix=True)]
    if not name:
        causes.append(("FieldValueRequired", "metadata.name", "Required value: name or generateName is required"))
    else:
        causes += [_invalid("metadata.name", name, m) for m in name_errors(kind, name)]
    for k, v in sorted(_string_map(meta, "labels", causes).items()):
        causes += [_invalid("metadata.labels", k, m) for m in is_qualified_name(k)]
        causes += [_invalid("metadata.labels", v, m) for m in is_label_value(v)]
    annotations = _string_map(meta, "annotations", causes)
    for k in sorted(annotations):
        causes += [_invalid("metadata.annotations", k, m) for m in is_qualified_name(k.lower())]
    if annotations and sum(len(k) + len(v) for k, v in annotations.items()) > ANNOTATIONS_SIZE_LIMIT:
        causes.append(("FieldValueTooLong", "metadata.annotations",
                       f"Too long: may not be more than {ANNOTATIONS_SIZE_LIMIT} bytes"))
    finalizers = meta.get("finalizers")
    if finalizers is not None:
        if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
            causes.append(("FieldValueInvalid", "metadata.finalizers", "Invalid value: must be a list of strings"))
        else:
            for f in finalizers:
                causes += [_invalid("metadata.finalizers", f, m) for m in is_qualified_name(f)]
    causes += _owner_references(meta.get("ownerReferences"))
    return causes


def _owner_references(refs) -> list[tuple[str, str, str]]:
    if refs is None:
        return []
    if not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs):
        return [("FieldValueInvalid", "metadata.ownerReferences", "Invalid value: must be a list of objects")]
    causes = []
    for r in refs:
        for key, what in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"), ("uid", "uid")):
            if not r.get(key):
                causes.append(_invalid(f"metadata.ownerReferences.{key}", "", f"{what} must not be empty"))
    controllers = [r for r in refs if r.get("controller") is True]
    if len(controllers) > 1:
        causes.append(_invalid("metadata.ownerReferences", json.dumps(controllers),
                               "Only one reference can have Controller set to true"))
    return causes
