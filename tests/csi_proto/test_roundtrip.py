"""The stubs work end to end with grpc.aio over a Unix socket, as kubelet talks to a plugin."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from csi_proto import csi_pb2, csi_pb2_grpc


class _Identity(csi_pb2_grpc.IdentityServicer):
    async def GetPluginInfo(
        self, request: csi_pb2.GetPluginInfoRequest, context: grpc.aio.ServicerContext
    ) -> csi_pb2.GetPluginInfoResponse:
        return csi_pb2.GetPluginInfoResponse(name="test.example.com", vendor_version="1")


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="ks", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


async def test_identity_call_and_unimplemented_over_unix_socket(socket_dir: Path) -> None:
    socket = socket_dir / "csi.sock"
    server = grpc.aio.server()
    csi_pb2_grpc.add_IdentityServicer_to_server(_Identity(), server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            info = await csi_pb2_grpc.IdentityStub(channel).GetPluginInfo(csi_pb2.GetPluginInfoRequest())
            assert info.name == "test.example.com"
            try:
                await csi_pb2_grpc.IdentityStub(channel).Probe(csi_pb2.ProbeRequest())
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.UNIMPLEMENTED
            else:
                raise AssertionError("Probe should be UNIMPLEMENTED")
            try:
                await csi_pb2_grpc.NodeStub(channel).NodeGetInfo(csi_pb2.NodeGetInfoRequest())
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.UNIMPLEMENTED
            else:
                raise AssertionError("an unregistered service should be UNIMPLEMENTED")
    finally:
        await server.stop(None)
