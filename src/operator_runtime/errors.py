"""The API client's failures, one class per meaning, so that callers ``except NotFound`` instead of comparing codes.

Two families under :class:`KubeError`:

- :class:`ApiFailure`: the API server answered with an error status. The subclass follows the HTTP code (and, for
  409, the ``reason`` of the ``Status`` body) through the one table :data:`FAILURES_BY_CODE`;
- :class:`ApiUnreachable`: no answer at all (connection refused or reset, TLS failure, timeout, a stream cut short).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "FAILURES_BY_CODE",
    "AlreadyExists",
    "ApiFailure",
    "ApiUnreachable",
    "BadRequest",
    "Conflict",
    "Expired",
    "Forbidden",
    "Invalid",
    "KubeError",
    "NotFound",
    "ServerError",
    "TooManyRequests",
    "Unauthorized",
    "failure",
    "failure_from_response",
    "retryable",
]

#: How much of a non-JSON error body goes into a message.
_BODY_EXCERPT = 200


class KubeError(Exception):
    """Any failure of a Kubernetes API call."""


class ApiUnreachable(KubeError):
    """The request got no answer: the connection failed, broke, or timed out."""


class ApiFailure(KubeError):
    """The API server answered with an error status; ``code``/``reason``/``message`` come from the ``Status``
    body (``body`` keeps all of it)."""

    def __init__(self, code: int, reason: str, message: str, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.body = dict(body or {})


class BadRequest(ApiFailure):
    """400: the request itself is malformed; sending it again cannot help."""


class Unauthorized(ApiFailure):
    """401: the credentials were not accepted."""


class Forbidden(ApiFailure):
    """403: authenticated, but RBAC (or an admission rule) does not allow it."""


class NotFound(ApiFailure):
    """404: the object (or its namespace, or the kind) does not exist."""


class Conflict(ApiFailure):
    """409: the write lost a race (stale ``resourceVersion``, failed uid precondition) or the object exists."""


class AlreadyExists(Conflict):
    """409 with reason ``AlreadyExists``: a create found an object of that name."""


class Expired(ApiFailure):
    """410 Gone: the ``resourceVersion`` (of a watch or a ``continue`` token) is older than the server keeps;
    the caller must list again."""


class Invalid(ApiFailure):
    """422: the object fails validation; the same object will fail again."""


class TooManyRequests(ApiFailure):
    """429: throttled (API priority and fairness); retry later."""


class ServerError(ApiFailure):
    """5xx: the server (or something in front of it) failed; retry later."""


#: HTTP status -> failure class; codes not listed map to :class:`ApiFailure` (5xx to :class:`ServerError`).
FAILURES_BY_CODE: Mapping[int, type[ApiFailure]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Expired,
    422: Invalid,
    429: TooManyRequests,
}


def retryable(error: KubeError) -> bool:
    """Whether retrying the same request may succeed: anything but a request the server refused as wrong
    (BadRequest, Invalid) or an answer about existence (NotFound, AlreadyExists)."""
    return not isinstance(error, BadRequest | Invalid | NotFound | AlreadyExists)


def failure(code: int, reason: str, message: str, body: Mapping[str, Any] | None = None) -> ApiFailure:
    """The :class:`ApiFailure` subclass for ``code`` (and ``reason``), constructed."""
    if code == 409 and reason == "AlreadyExists":
        cls: type[ApiFailure] = AlreadyExists
    else:
        cls = FAILURES_BY_CODE.get(code) or (ServerError if code >= 500 else ApiFailure)
    return cls(code, reason, message, body)


def failure_from_response(status_code: int, body: bytes) -> ApiFailure:
    """The failure an error response means, from its ``Status`` body when it has one."""
    try:
        data = json.loads(body) if body else {}
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    code = data.get("code")
    return failure(code if isinstance(code, int) and code >= 400 else status_code,
                   str(data.get("reason") or "Unknown"),
                   str(data.get("message") or body[:_BODY_EXCERPT].decode("utf-8", "replace")), data)
