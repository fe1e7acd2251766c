"""The CSI socket: mode 0600 from the start, stale sockets replaced, clear errors for unusable endpoints."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import grpc
import pytest

from csi_proto import csi_pb2, csi_pb2_grpc
from listener_operator.csi_server.identity import IdentityService
from listener_operator.csi_server.server import CsiServicers, socket_path_from_endpoint, start_csi_server


async def test_socket_is_private_and_serves(short_dir: Path) -> None:
    path = short_dir / "csi.sock"
    server = await start_csi_server(f"unix://{path}", CsiServicers(identity=IdentityService()))
    try:
        mode = os.stat(path).st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600
        # no temporary binding directory is left next to it
        assert os.listdir(short_dir) == ["csi.sock"]
        async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
            info = await csi_pb2_grpc.IdentityStub(channel).GetPluginInfo(csi_pb2.GetPluginInfoRequest())
        assert info.name == "listeners.stackable.tech"
    finally:
        await server.stop(None)


async def test_socket_is_bound_inside_a_private_directory(short_dir: Path, monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """At the moment gRPC creates the socket, it sits in a 0700 directory, so nobody else can reach it."""
    seen: list[tuple[int, int, int]] = []
    server_class = grpc.aio._server.Server  # the concrete class grpc.aio.server() returns
    original = server_class.add_insecure_port

    def spy(self: grpc.aio.Server, address: str) -> int:
        port = original(self, address)
        socket_path = Path(address.removeprefix("unix://"))
        parent = os.stat(socket_path.parent)
        seen.append((stat.S_IMODE(parent.st_mode), parent.st_uid, stat.S_IMODE(os.stat(socket_path).st_mode)))
        return port

    monkeypatch.setattr(server_class, "add_insecure_port", spy)
    server = await start_csi_server(f"unix://{short_dir}/csi.sock", CsiServicers(identity=IdentityService()))
    await server.stop(None)
    assert len(seen) == 1
    directory_mode, owner, _ = seen[0]
    assert (directory_mode, owner) == (0o700, os.getuid())


async def test_stale_socket_is_replaced(short_dir: Path) -> None:
    path = short_dir / "csi.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # a socket file nobody listens on, as left by a killed process
    server = await start_csi_server(f"unix://{path}", CsiServicers(identity=IdentityService()))
    try:
        async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
            probe = await csi_pb2_grpc.IdentityStub(channel).Probe(csi_pb2.ProbeRequest())
        assert probe.ready.value is True
    finally:
        await server.stop(None)


async def test_regular_file_at_endpoint_is_not_clobbered(short_dir: Path) -> None:
    path = short_dir / "csi.sock"
    path.write_text("important")
    with pytest.raises(ValueError, match="not a socket"):
        await start_csi_server(f"unix://{path}", CsiServicers(identity=IdentityService()))
    assert path.read_text() == "important"


@pytest.mark.parametrize(("endpoint", "message"), [
    ("tcp://127.0.0.1:1234", "only unix://"),
    ("unix://relative/csi.sock", "absolute"),
    ("unix:///" + "x" * 120 + "/csi.sock", "longer than 107 bytes"),
])
def test_unusable_endpoints_are_refused(endpoint: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        socket_path_from_endpoint(endpoint)


def test_plain_path_endpoint_is_accepted() -> None:
    assert socket_path_from_endpoint("/csi/csi.sock") == Path("/csi/csi.sock")
