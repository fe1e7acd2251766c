"""gRPC connections to CSI plugins over Unix sockets, as kubelet and the sidecars hold them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import grpc

from csi_proto import csi_pb2, csi_pb2_grpc

UNIX_PATH_MAX = 107  # sun_path is 108 bytes including the terminating NUL


def socket_path_of(endpoint: str) -> str:
    """The filesystem path of a ``unix://`` (or bare absolute path) endpoint; rejects anything else."""
    path = endpoint.removeprefix("unix://")
    if not path.startswith("/"):
        raise ValueError(f"CSI endpoint {endpoint!r} must be an absolute Unix socket path (unix:///...)")
    if len(path.encode()) > UNIX_PATH_MAX:
        raise ValueError(
            f"Unix socket path {path!r} is {len(path.encode())} bytes, more than the {UNIX_PATH_MAX} the kernel "
            "allows; use a shorter state directory (e.g. tempfile.mkdtemp(prefix='ks', dir='/tmp'))"
        )
    return path


def grpc_error_text(error: grpc.aio.AioRpcError) -> str:
    """How Kubernetes components quote a gRPC failure: ``rpc error: code = X desc = message``."""
    code = error.code()
    code_name = "".join(part.capitalize() for part in code.name.split("_")) if code is not None else "Unknown"
    return f"rpc error: code = {code_name} desc = {error.details() or ''}"


@dataclass
class CsiConnection:
    """One channel to one plugin with the three service stubs."""

    endpoint: str
    channel: grpc.aio.Channel = field(init=False)
    identity: csi_pb2_grpc.IdentityStub = field(init=False)
    controller: csi_pb2_grpc.ControllerStub = field(init=False)
    node: csi_pb2_grpc.NodeStub = field(init=False)

    def __post_init__(self) -> None:
        path = socket_path_of(self.endpoint)
        self.channel = grpc.aio.insecure_channel(f"unix://{path}")
        self.identity = csi_pb2_grpc.IdentityStub(self.channel)
        self.controller = csi_pb2_grpc.ControllerStub(self.channel)
        self.node = csi_pb2_grpc.NodeStub(self.channel)

    async def plugin_name(self, rpc_timeout: float) -> str:
        info = await self.identity.GetPluginInfo(csi_pb2.GetPluginInfoRequest(), timeout=rpc_timeout)
        return str(info.name)

    async def close(self) -> None:
        await self.channel.close(None)


async def wait_for_plugin(connection: CsiConnection, wait: float, rpc_timeout: float) -> str:
    """``GetPluginInfo`` until the plugin answers (its socket may not exist yet), at most ``wait`` seconds.

    Only registration waits here, and only until the first answer. gRPC's own ``channel_ready()`` would wait on
    its reconnect backoff (a second or more after a failed connect), which is far slower than a socket that
    appears a few milliseconds after the call.
    """
    deadline = time.monotonic() + wait
    delay = 0.02
    while True:
        try:
            return await connection.plugin_name(rpc_timeout)
        except grpc.aio.AioRpcError as error:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"CSI plugin at {connection.endpoint} did not answer within {wait}s: {error.details()}"
                ) from error
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
