"""Errors raised by the `pacific.kube` helpers, mapped from HTTP status codes.

    from pacific.kube import errors, resources
    try:
        resources.create(api, resources.IPS, body)
    except errors.AlreadyExists:
        ...                      # 409, reason AlreadyExists
    except errors.Conflict:
        ...                      # 409, stale resourceVersion: re-read and retry
    except errors.ApiError as e:
        log.error("%s", e)       # any other failure; e.status, e.reason, e.message

`Unavailable` (status 0) covers connection failures (refused, reset, timeout), so a
caller that catches `ApiError` catches every way a request can fail.
"""

from __future__ import annotations

import json


class ApiError(Exception):
    """A Kubernetes API request failed.

    Attributes: status (HTTP status, 0 for connection failures), reason (the
    Status object's reason, e.g. "NotFound"), message (the server's message),
    method and path of the request, body (parsed Status dict or None).
    """

    def __init__(self, status: int, reason: str, message: str, method: str = "",
                 path: str = "", body: dict | None = None):
        self.status = status
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path
        self.body = body
        where = f"{method} {path}: " if method else ""
        super().__init__(f"{where}{status} {reason}: {message}")


class NotFound(ApiError):
    """404: the object (or its namespace, or its resource type) does not exist."""


class AlreadyExists(ApiError):
    """409 with reason AlreadyExists: create of a name that is taken."""


class Conflict(ApiError):
    """409 (any other reason): the resourceVersion was stale; re-read and retry."""


class Gone(ApiError):
    """410: the requested resourceVersion is too old; list again."""


class Invalid(ApiError):
    """422: the object failed validation; the message says which field."""


class Unavailable(ApiError):
    """The API server could not be reached (status 0) or answered 5xx."""


def from_response(status: int, data: bytes | str | None, method: str = "",
                  path: str = "") -> ApiError:
    """Build the right ApiError subclass from an HTTP status and body."""
    body: dict | None = None
    reason = ""
    message = ""
    if data:
        try:
            parsed = json.loads(data)
            if isinstance(parsed, dict):
                body = parsed
                reason = str(parsed.get("reason") or "")
                message = str(parsed.get("message") or "")
        except ValueError:
            message = (data.decode("utf-8", "replace") if isinstance(data, bytes)
                       else data)[:500]
    if status == 404:
        cls: type[ApiError] = NotFound
        reason = reason or "NotFound"
    elif status == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
        reason = reason or "Conflict"
    elif status == 410:
        cls, reason = Gone, reason or "Gone"
    elif status == 422:
        cls, reason = Invalid, reason or "Invalid"
    elif status == 0 or status >= 500:
        cls = Unavailable
        reason = reason or "ServiceUnavailable"
    else:
        cls = ApiError
        reason = reason or f"HTTP{status}"
    return cls(status, reason, message or "(no message)", method, path, body)
