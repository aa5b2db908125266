"""API errors rendered as `metav1.Status` bodies, the way kube-apiserver does."""


class ApiError(Exception):
    """An error answer: HTTP code, Status reason, message and optional details."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(name, group, kind):
    d = {"kind": kind}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    return d


def _qual(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qual(group, plural)} "{name}" not found',
                    _details(name, group, plural))


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{_qual(group, plural)} "{name}" already exists',
                    _details(name, group, plural))


def conflict(group: str, plural: str, name: str, why: str) -> ApiError:
    return ApiError(
        409, "Conflict",
        f'Operation cannot be fulfilled on {_qual(group, plural)} "{name}": {why}',
        _details(name, group, plural))


def invalid(group: str, kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid. causes: (reason, field, message) triples, e.g.
    ("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")."""
    parts = [f"{field}: {msg}" if field else msg for _, field, msg in causes]
    # apimachinery's aggregate: one error as is, several as "[a, b]"
    text = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    shown = name or ""
    details = _details(name, group, kind)
    details["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
    return ApiError(422, "Invalid", f'{kind}.{group or "core"} "{shown}" is invalid: {text}'
                    if group else f'{kind} "{shown}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                    f"accepted media types include: application/json-patch+json, "
                    f"application/merge-patch+json, application/apply-patch+yaml"
                    if content_type else "missing content type")


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def page_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")
