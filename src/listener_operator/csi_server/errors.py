"""gRPC status for CSI calls: one exception type carrying the code, and the full cause chain as the message.

Upstream reports "the full error chain joined with ': '" (LO §7.7); kubelet and the external-provisioner show that
message verbatim in Events, so it must say what failed and why in one line.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc
import httpx2
from lightkube.core.exceptions import ApiError

from operator_runtime.api import ApiFailure

__all__ = ["KUBE_ERRORS", "CsiError", "api_error_code", "csi_rpc", "error_chain", "get_optional", "get_required"]

#: What a lightkube call raises when the API answers with an error or cannot be reached.
KUBE_ERRORS: tuple[type[Exception], ...] = (ApiFailure, ApiError, httpx2.HTTPError)

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S")


class CsiError(Exception):
    """A failed CSI call: ``code`` is the gRPC status, ``str(self)`` the first link of the message chain.

    ``user_error`` marks problems a person has to fix (bad annotations, a missing class, ...), which deserve a
    Kubernetes Event, as opposed to transient failures that a retry resolves. It defaults to true for
    INVALID_ARGUMENT and FAILED_PRECONDITION.
    """

    def __init__(self, code: grpc.StatusCode, message: str, *, user_error: bool | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.user_error = (code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION)
                           if user_error is None else user_error)


def error_chain(error: BaseException) -> str:
    """``error`` and its causes (``raise ... from ...``), joined with ': ', skipping repeated text."""
    parts: list[str] = []
    current: BaseException | None = error
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = _describe(current)
        if text and (not parts or text not in parts[-1]):
            parts.append(text)
        current = current.__cause__
    return ": ".join(parts)


def _describe(error: BaseException) -> str:
    if isinstance(error, ApiFailure):
        return f"{error.message or error.reason} (HTTP {error.code})"
    if isinstance(error, ApiError):
        status = error.status
        return f"{status.message or status.reason} (HTTP {status.code})"
    if isinstance(error, httpx2.HTTPStatusError):
        return f"HTTP {error.response.status_code} from {error.request.url}"
    text = str(error)
    return text or type(error).__name__


def api_error_code(error: BaseException) -> int | None:
    """The HTTP status of a Kubernetes API error, None for anything else."""
    if isinstance(error, ApiFailure):
        return error.code
    if isinstance(error, ApiError):
        return error.status.code
    if isinstance(error, httpx2.HTTPStatusError):
        return error.response.status_code
    return None


async def get_required(what: str, call: Awaitable[_R], *, user_error_if_missing: bool = True,
                       context: str | None = None) -> _R:
    """Await an API read; a failure becomes UNAVAILABLE (kubelet and the provisioner retry), saying what was read.

    A missing object is by default something a person must fix (an Event is due); ``context`` says where the name
    came from, as a message prefix.
    """
    try:
        return await call
    except KUBE_ERRORS as error:
        missing = api_error_code(error) == 404
        message = f"{what} not found" if missing else f"failed to get {what}"
        raise CsiError(grpc.StatusCode.UNAVAILABLE, f"{context}: {message}" if context else message,
                       user_error=missing and user_error_if_missing) from error


async def get_optional(what: str, call: Awaitable[_R]) -> _R | None:
    """Like :func:`get_required`, but a missing object is None."""
    try:
        return await call
    except KUBE_ERRORS as error:
        if api_error_code(error) == 404:
            return None
        raise CsiError(grpc.StatusCode.UNAVAILABLE, f"failed to get {what}") from error


def csi_rpc(
    method: Callable[Concatenate[_S, Any, grpc.aio.ServicerContext[Any, Any], _P], Awaitable[_R]],
) -> Callable[Concatenate[_S, Any, grpc.aio.ServicerContext[Any, Any], _P], Awaitable[_R]]:
    """Turn :class:`CsiError` (and any unexpected exception, as INTERNAL) into a gRPC status with the chain."""

    @functools.wraps(method)
    async def wrapper(self: _S, request: Any, context: grpc.aio.ServicerContext[Any, Any],
                      *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await method(self, request, context, *args, **kwargs)
        except CsiError as error:
            message = error_chain(error)
            log.info("%s failed with %s: %s", method.__name__, error.code.name, message)
            await context.abort(error.code, message)
        except Exception as error:
            log.exception("%s failed unexpectedly", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {error_chain(error)}")
        raise AssertionError("unreachable: context.abort raises")  # pragma: no cover

    return wrapper
