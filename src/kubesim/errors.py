"""API errors as the Kubernetes apiserver reports them (`kind: Status` bodies).

Every layer (store, admission, HTTP, in-process client) raises `ApiError`; the HTTP layer turns it into the JSON
`Status` body with the same `code`/`reason` a real apiserver uses, so clients' error handling is exercised faithfully.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error with an HTTP status code and a Kubernetes `StatusReason`."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        causes: list[dict[str, Any]] | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        list_meta: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.causes = causes
        self.details = dict(details) if details else {}
        self.headers = dict(headers) if headers else {}
        self.list_meta = dict(list_meta) if list_meta else {}  # Status.metadata (e.g. a fresh `continue`)
        if causes:
            self.details["causes"] = causes

    def status(self) -> dict[str, Any]:
        """The `kind: Status` body the apiserver would return."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.list_meta),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def _details(kind: str | None, name: str | None, group: str | None) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name is not None:
        d["name"] = name
    if group:
        d["group"] = group
    if kind is not None:
        d["kind"] = kind
    return d


def qualified(plural: str, group: str) -> str:
    """`plural.group` as the apiserver names a resource in messages (`pods`, `statefulsets.apps`)."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified(plural, group)} "{name}" not found',
        details=_details(plural, name, group),
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(plural, group)} "{name}" already exists',
        details=_details(plural, name, group),
    )


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
        details=_details(plural, name, group),
    )


def invalid(kind: str, group: str, name: str, causes: list[dict[str, Any]]) -> ApiError:
    """422 with `details.causes`, each `{"reason": "FieldValueInvalid"|..., "message": ..., "field": ...}`."""
    summary = ", ".join(f"{c.get('field', '')}: {c.get('message', '')}".strip(": ") for c in causes)
    return ApiError(
        422,
        "Invalid",
        f'{kind}{"." + group if group else ""} "{name}" is invalid: {summary}',
        causes=causes,
        details=_details(kind, name, group),
    )


def cause(field: str, message: str, reason: str = "FieldValueInvalid") -> dict[str, Any]:
    return {"reason": reason, "message": message, "field": field}


def no_such_resource(what: str | None = None) -> ApiError:
    """404 for a URL or resource the server does not serve (``what``, e.g. ``pods/exec``, is named in brackets)."""
    suffix = f" ({what})" if what else ""
    return ApiError(404, "NotFound", f"the server could not find the requested resource{suffix}")


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def gone(message: str, list_meta: dict[str, Any] | None = None) -> ApiError:
    return ApiError(410, "Expired", message, list_meta=list_meta)


def too_many_requests(retry_after: int = 1) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
        details={"retryAfterSeconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def internal_error(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}"
    )
