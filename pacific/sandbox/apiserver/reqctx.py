"""Per-request context of the HTTP thread serving it: the `fieldValidation`
directive and the warnings to send back (`Warning: 299 - "..."` headers).

kube-apiserver answers unknown fields according to `?fieldValidation=`:
`Ignore` drops them silently, `Warn` (the default) drops them and warns, `Strict`
refuses the request with 400 BadRequest.  The store runs validation deep inside a
write, so the directive travels in a thread-local rather than through every call.
"""
import threading

from pacific.sandbox.apiserver.errors import bad_request

FIELD_VALIDATION = ("Ignore", "Warn", "Strict")
_local = threading.local()


def begin(field_validation: str | None) -> None:
    """Start a request; raises 400 for an unknown fieldValidation value."""
    fv = field_validation or "Warn"
    if fv not in FIELD_VALIDATION:
        raise bad_request(f'fieldValidation instance value "{field_validation}" is invalid, must be one '
                          'of "Ignore", "Warn", or "Strict"')
    _local.field_validation = fv
    _local.warnings = []


def field_validation() -> str:
    return getattr(_local, "field_validation", "Warn")


def warn(message: str) -> None:
    w = getattr(_local, "warnings", None)
    if w is None:
        w = _local.warnings = []
    if message not in w:
        w.append(message)


def take_warnings() -> list[str]:
    w = getattr(_local, "warnings", None) or []
    _local.warnings = []
    return w


def unknown_fields(kind: str, version: str, paths: list[str]) -> None:
    """Report fields dropped from a request body, as fieldValidation asks."""
    if not paths:
        return
    mode = field_validation()
    if mode == "Strict":
        listed = ", ".join(f'unknown field "{p}"' for p in paths)
        raise bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: '
                          f"strict decoding error: {listed}")
    if mode == "Warn":
        for p in paths:
            warn(f'unknown field "{p}"')
