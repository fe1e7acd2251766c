"""The two failure tables: API answers -> failure classes (``operator_runtime.errors``), and CSI failures -> gRPC
codes (``csi_server.errors``), including what a caller sees through a real gRPC call."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_proto import csi_pb2, csi_pb2_grpc
from listener_operator.csi_server import errors as csi_errors
from listener_operator.csi_server.errors import CSI_FAILURES, CsiError, csi_rpc
from operator_runtime import errors as api_errors
from operator_runtime.errors import (
    AlreadyExists,
    ApiFailure,
    BadRequest,
    Conflict,
    Expired,
    Forbidden,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    failure_from_response,
)


@pytest.mark.parametrize(("code", "reason", "cls"), [
    (400, "BadRequest", BadRequest),
    (401, "Unauthorized", Unauthorized),
    (403, "Forbidden", Forbidden),
    (404, "NotFound", NotFound),
    (409, "Conflict", Conflict),
    (409, "AlreadyExists", AlreadyExists),
    (410, "Expired", Expired),
    (422, "Invalid", Invalid),
    (429, "TooManyRequests", TooManyRequests),
    (500, "InternalError", ServerError),
    (503, "ServiceUnavailable", ServerError),
    (418, "Teapot", ApiFailure),
])
def test_status_answers_become_failures_by_meaning(code: int, reason: str, cls: type[ApiFailure]) -> None:
    body = f'{{"kind": "Status", "code": {code}, "reason": "{reason}", "message": "it says why"}}'.encode()
    failure = failure_from_response(code, body)
    assert type(failure) is cls
    assert (failure.code, failure.reason, failure.message) == (code, reason, "it says why")


def test_already_exists_is_a_conflict() -> None:
    assert isinstance(failure_from_response(409, b'{"code": 409, "reason": "AlreadyExists"}'), Conflict)


def test_a_body_that_is_not_a_status_keeps_the_http_code_and_an_excerpt() -> None:
    failure = failure_from_response(404, b"<html>" + b"x" * 1000)
    assert type(failure) is NotFound
    assert failure.message.startswith("<html>") and len(failure.message) == 200


def test_the_status_code_of_a_watch_error_event_wins() -> None:
    # a watch answers 200 and reports a 410 inside the stream: the Status body decides
    assert type(failure_from_response(200, b'{"code": 410, "reason": "Expired", "message": "too old"}')) is Expired


def test_every_failure_class_is_reachable_from_the_table() -> None:
    classes = {cls for _, cls in inspect.getmembers(api_errors, inspect.isclass)
               if issubclass(cls, ApiFailure) and cls is not ApiFailure}
    reachable = set(api_errors.FAILURES_BY_CODE.values()) | {AlreadyExists, ServerError}
    assert classes == reachable


def csi_failure_classes() -> set[type[CsiError]]:
    return {cls for _, cls in inspect.getmembers(csi_errors, inspect.isclass)
            if issubclass(cls, CsiError) and cls is not CsiError}


def test_every_csi_failure_has_exactly_one_row() -> None:
    assert csi_failure_classes() == set(CSI_FAILURES)


@pytest.mark.parametrize(("cls", "code", "user_error"), [
    (csi_errors.MissingArgument, grpc.StatusCode.INVALID_ARGUMENT, True),
    (csi_errors.UnsupportedVolume, grpc.StatusCode.INVALID_ARGUMENT, True),
    (csi_errors.InvalidInput, grpc.StatusCode.INVALID_ARGUMENT, True),
    (csi_errors.InvalidSelector, grpc.StatusCode.INVALID_ARGUMENT, True),
    (csi_errors.ClaimListenerWithoutClass, grpc.StatusCode.INVALID_ARGUMENT, True),
    (csi_errors.ListenerWithoutClass, grpc.StatusCode.FAILED_PRECONDITION, True),
    (csi_errors.NoPodVolume, grpc.StatusCode.FAILED_PRECONDITION, True),
    (csi_errors.MountLabelUnavailable, grpc.StatusCode.FAILED_PRECONDITION, True),
    (csi_errors.ObjectNotFound, grpc.StatusCode.UNAVAILABLE, True),
    (csi_errors.PvWithoutClaim, grpc.StatusCode.UNAVAILABLE, False),
    (csi_errors.PodReplaced, grpc.StatusCode.UNAVAILABLE, False),
    (csi_errors.PodNotScheduled, grpc.StatusCode.UNAVAILABLE, False),
    (csi_errors.ListenerClassMissing, grpc.StatusCode.UNAVAILABLE, True),
    (csi_errors.NoAddressesYet, grpc.StatusCode.UNAVAILABLE, True),
    (csi_errors.NodeWithoutAddress, grpc.StatusCode.UNAVAILABLE, True),
    (csi_errors.ApiReadFailed, grpc.StatusCode.UNAVAILABLE, False),
    (csi_errors.ApiWriteFailed, grpc.StatusCode.UNAVAILABLE, False),
    (csi_errors.VolumeWriteFailed, grpc.StatusCode.INTERNAL, False),
])
def test_csi_failure_codes(cls: type[CsiError], code: grpc.StatusCode, user_error: bool) -> None:
    error = cls("what failed")
    assert (error.code, error.user_error) == (code, user_error)
    assert cls("what failed", user_error=not user_error).user_error is (not user_error)


class _Failing(csi_pb2_grpc.IdentityServicer):  # type: ignore[misc]
    """Answers Probe with whatever failure the test sets."""

    failure: BaseException = RuntimeError("unset")

    @csi_rpc
    async def Probe(self, request: Any, context: Any) -> csi_pb2.ProbeResponse:
        raise self.failure


@pytest.fixture
async def failing(tmp_path: Path) -> AsyncIterator[tuple[_Failing, csi_pb2_grpc.IdentityStub]]:
    servicer = _Failing()
    server = grpc.aio.server()
    csi_pb2_grpc.add_IdentityServicer_to_server(servicer, server)
    socket = f"unix://{tmp_path}/s"
    server.add_insecure_port(socket)
    await server.start()
    channel = grpc.aio.insecure_channel(socket)
    yield servicer, csi_pb2_grpc.IdentityStub(channel)
    await channel.close()
    await server.stop(None)


async def test_the_caller_gets_the_tables_code_and_the_whole_chain(
        failing: tuple[_Failing, csi_pb2_grpc.IdentityStub]) -> None:
    servicer, stub = failing
    try:
        raise NotFound(404, "NotFound", 'persistentvolumes "pv-1" not found')
    except NotFound as cause:
        try:
            raise csi_errors.ObjectNotFound("PersistentVolume pv-1 not found") from cause
        except CsiError as error:
            servicer.failure = error
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Probe(csi_pb2.ProbeRequest())
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details() == (
        'PersistentVolume pv-1 not found: persistentvolumes "pv-1" not found (HTTP 404)')


async def test_an_unexpected_exception_is_internal(failing: tuple[_Failing, csi_pb2_grpc.IdentityStub]) -> None:
    servicer, stub = failing
    servicer.failure = KeyError("spec")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Probe(csi_pb2.ProbeRequest())
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert caught.value.details() == "internal error: 'spec'"
