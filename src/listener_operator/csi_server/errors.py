"""Why a CSI call failed: one exception class per meaning, mapped to its gRPC code in one table.

Each class names a failure (``PvWithoutClaim``, ``NoAddressesYet``, ...); :data:`CSI_FAILURES` gives its gRPC code
and whether, by default, a person has to act on it (a user error gets a Kubernetes Event where that person looks,
a transient failure does not: kubelet or the provisioner simply retry). The message sent to the caller is the
whole cause chain joined with ': ' (see behaviour.md "CSI error codes"): kubelet and the external-provisioner show
it verbatim in their Events, so it must say in one line what failed and why.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc

from operator_runtime.errors import ApiFailure, KubeError, NotFound

__all__ = [
    "CSI_FAILURES",
    "ApiReadFailed",
    "ApiWriteFailed",
    "ClaimListenerWithoutClass",
    "CsiError",
    "CsiFailure",
    "InvalidInput",
    "InvalidSelector",
    "ListenerClassMissing",
    "ListenerWithoutClass",
    "MissingArgument",
    "MountLabelUnavailable",
    "NoAddressesYet",
    "NoPodVolume",
    "NodeWithoutAddress",
    "ObjectNotFound",
    "PodNotScheduled",
    "PodReplaced",
    "PvWithoutClaim",
    "UnsupportedVolume",
    "UnusableListenerName",
    "VolumeNotFound",
    "VolumeWriteFailed",
    "csi_rpc",
    "error_chain",
    "get_optional",
    "get_required",
]

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S")


class CsiError(Exception):
    """A failed CSI call. ``str(self)`` is the first link of the message chain; :attr:`code` comes from
    :data:`CSI_FAILURES`; ``user_error`` overrides the table's default for this one failure."""

    def __init__(self, message: str, *, user_error: bool | None = None) -> None:
        super().__init__(message)
        failure = CSI_FAILURES[type(self)]
        self.code: grpc.StatusCode = failure.code
        self.user_error: bool = failure.user_error if user_error is None else user_error


# -- the request itself -----------------------------------------------------------------------------------------------

class MissingArgument(CsiError):
    """A required request field, parameter or volume-context key is empty or absent."""


class UnsupportedVolume(CsiError):
    """A kind of volume the driver does not serve (block volumes, CSI inline volumes)."""


class VolumeNotFound(CsiError):
    """A volume id that names no volume of this driver (ValidateVolumeCapabilities: unknown or malformed)."""


class InvalidInput(CsiError):
    """A value the driver refuses to use: a name that would become part of an API URL or a path, a target path
    outside the kubelet directory, or a Listener status or Pod port that cannot be written into the volume."""


class InvalidSelector(CsiError):
    """Neither or both of the listener selector annotations are set."""


class UnusableListenerName(CsiError):
    """The volume's Listener name (the ``listener-name`` annotation, or the claim's name for a ``listener-class``
    volume) cannot name a Service or be a label value: no retry can fix it, the claim must change."""


# -- the objects the volume depends on ----------------------------------------------------------------------------

class ListenerWithoutClass(CsiError):
    """At mount time: the volume's Listener names no ListenerClass."""


class ClaimListenerWithoutClass(CsiError):
    """At provisioning: the Listener a claim binds to names no ListenerClass, so the claim cannot be provisioned
    as it is."""


class NoPodVolume(CsiError):
    """The Pod has no volume backed by the PersistentVolumeClaim being published."""


class MountLabelUnavailable(CsiError):
    """The Listener's uid cannot form the Pod mount label."""


class ObjectNotFound(CsiError):
    """An object the volume needs does not exist (yet)."""


class PvWithoutClaim(CsiError):
    """The PersistentVolume is not bound to a PersistentVolumeClaim."""


class PodReplaced(CsiError):
    """The Pod kubelet publishes for was replaced by another one of the same name."""


class PodNotScheduled(CsiError):
    """The Pod has no node yet, and its addresses depend on it."""


class ListenerClassMissing(CsiError):
    """A Listener without addresses names a ListenerClass that does not exist: it will never get any."""


class NoAddressesYet(CsiError):
    """The Listener has no address for this Pod yet (after the bounded wait)."""


class NodeWithoutAddress(CsiError):
    """The Pod's node has no address of a usable kind."""


# -- the API server and the volume ----------------------------------------------------------------------------------

class ApiReadFailed(CsiError):
    """Reading an object from the API server failed."""


class ApiWriteFailed(CsiError):
    """Writing an object (the Listener, a label, PodListeners) failed."""


class VolumeWriteFailed(CsiError):
    """Writing or removing the files in the target directory failed."""


@dataclass(frozen=True)
class CsiFailure:
    """The gRPC code of a failure class, and whether a person must act on it (an Event is due) by default."""

    code: grpc.StatusCode
    user_error: bool


_INVALID_ARGUMENT = CsiFailure(grpc.StatusCode.INVALID_ARGUMENT, user_error=True)
_FAILED_PRECONDITION = CsiFailure(grpc.StatusCode.FAILED_PRECONDITION, user_error=True)

#: The one table from failure to gRPC code (behaviour.md "CSI error codes").
CSI_FAILURES: Mapping[type[CsiError], CsiFailure] = {
    MissingArgument: _INVALID_ARGUMENT,
    UnsupportedVolume: _INVALID_ARGUMENT,
    VolumeNotFound: CsiFailure(grpc.StatusCode.NOT_FOUND, user_error=False),
    InvalidInput: _INVALID_ARGUMENT,
    InvalidSelector: _INVALID_ARGUMENT,
    UnusableListenerName: _INVALID_ARGUMENT,
    ClaimListenerWithoutClass: _INVALID_ARGUMENT,
    ListenerWithoutClass: _FAILED_PRECONDITION,
    NoPodVolume: _FAILED_PRECONDITION,
    MountLabelUnavailable: _FAILED_PRECONDITION,
    ObjectNotFound: CsiFailure(grpc.StatusCode.UNAVAILABLE, user_error=True),
    PvWithoutClaim: CsiFailure(grpc.StatusCode.UNAVAILABLE, user_error=False),
    PodReplaced: CsiFailure(grpc.StatusCode.UNAVAILABLE, user_error=False),
    PodNotScheduled: CsiFailure(grpc.StatusCode.UNAVAILABLE, user_error=False),
    ListenerClassMissing: CsiFailure(grpc.StatusCode.UNAVAILABLE, user_error=True),
    NoAddressesYet: CsiFailure(grpc.StatusCode.UNAVAILABLE, user_error=True),
    NodeWithoutAddress: CsiFailure(grpc.StatusCode.UNAVAILABLE, user_error=True),
    ApiReadFailed: CsiFailure(grpc.StatusCode.UNAVAILABLE, user_error=False),
    ApiWriteFailed: CsiFailure(grpc.StatusCode.UNAVAILABLE, user_error=False),
    VolumeWriteFailed: CsiFailure(grpc.StatusCode.INTERNAL, user_error=False),
}


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
    text = str(error)
    return text or type(error).__name__


async def get_required(what: str, call: Awaitable[_R], *, user_error_if_missing: bool = True,
                       context: str | None = None) -> _R:
    """Await an API read; a failure becomes UNAVAILABLE (kubelet and the provisioner retry), saying what was read.

    A missing object is by default something a person must fix (an Event is due); ``context`` says where the name
    came from, as a message prefix.
    """
    prefix = f"{context}: " if context else ""
    try:
        return await call
    except NotFound as error:
        raise ObjectNotFound(f"{prefix}{what} not found", user_error=user_error_if_missing) from error
    except KubeError as error:
        raise ApiReadFailed(f"{prefix}failed to get {what}") from error


async def get_optional(what: str, call: Awaitable[_R]) -> _R | None:
    """Like :func:`get_required`, but a missing object is None."""
    try:
        return await call
    except NotFound:
        return None
    except KubeError as error:
        raise ApiReadFailed(f"failed to get {what}") from error


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
            log.info("%s failed with %s (%s): %s", method.__name__, error.code.name, type(error).__name__,
                     message)
            await context.abort(error.code, message)
        except Exception as error:
            log.exception("%s failed unexpectedly", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {error_chain(error)}")
        raise AssertionError("unreachable: context.abort raises")  # pragma: no cover

    return wrapper
