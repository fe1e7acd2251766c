"""The CSI gRPC server on a Unix socket, and the servicer sets of the two operator modes.

Socket safety (behaviour.md "CSI socket"): gRPC creates the socket file itself when the port is added, with the process umask. To keep
it from ever being reachable by others, it is bound inside a fresh 0700 directory next to the endpoint, made 0600,
and only then renamed onto the endpoint path (a rename is atomic and replaces a stale socket left by a previous
run). Changing the process-wide umask instead would race with other tasks of the same process.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

import grpc

from csi_proto import csi_pb2_grpc
from listener_operator.constants import FULL_CONTROLLER_NAME
from listener_operator.csi_server.controller import ControllerService
from listener_operator.csi_server.identity import IdentityService
from listener_operator.csi_server.metrics import CsiMetrics, CsiMetricsInterceptor
from listener_operator.csi_server.node import DEFAULT_LISTENER_WAIT_SECONDS, NodeService
from operator_runtime.api import KubeApi
from operator_runtime.events import EventRecorder

__all__ = [
    "MAX_SOCKET_PATH",
    "CsiServicers",
    "controller_servicers",
    "node_servicers",
    "socket_path_from_endpoint",
    "start_csi_server",
]

log = logging.getLogger(__name__)

#: sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107
#: Name of the Events' reportingController for the CSI services.
CSI_REPORTING_CONTROLLER = f"csi.{FULL_CONTROLLER_NAME}"


@dataclass(frozen=True)
class CsiServicers:
    """The services one CSI endpoint serves: Identity always, plus Controller and/or Node."""

    identity: IdentityService
    controller: ControllerService | None = None
    node: NodeService | None = None


def controller_servicers(api: KubeApi) -> CsiServicers:
    """Identity + Controller, as served next to the Listener controller (``run controller``)."""
    events = EventRecorder(api, CSI_REPORTING_CONTROLLER, f"{CSI_REPORTING_CONTROLLER}-provisioner")
    return CsiServicers(identity=IdentityService(), controller=ControllerService(api, events))


def node_servicers(api: KubeApi, node_name: str, kubelet_dir: str | os.PathLike[str], *,
                   listener_wait_seconds: float = DEFAULT_LISTENER_WAIT_SECONDS,
                   metrics: CsiMetrics | None = None) -> CsiServicers:
    """Identity + Node for one node (``run node``); ``kubelet_dir`` bounds every target path.

    With ``metrics``, mounts waiting for a Listener address are counted in its ``mounts_waiting`` gauge.
    """
    if not node_name:
        raise ValueError("a node name is required for the CSI node service")
    events = EventRecorder(api, CSI_REPORTING_CONTROLLER, f"{CSI_REPORTING_CONTROLLER}-{node_name}")
    node = NodeService(api, node_name, Path(kubelet_dir), events=events, listener_wait_seconds=listener_wait_seconds,
                       mounts_waiting=metrics.mounts_waiting if metrics is not None else None)
    return CsiServicers(identity=IdentityService(), node=node)


def socket_path_from_endpoint(endpoint: str) -> Path:
    """``unix:///abs/path`` or a plain absolute path -> the socket path; anything else is a ValueError."""
    if endpoint.startswith("unix://"):
        path = endpoint[len("unix://"):]
    elif "://" in endpoint:
        raise ValueError(f"CSI endpoint {endpoint!r}: only unix:// endpoints are supported")
    else:
        path = endpoint
    if not path.startswith("/"):
        raise ValueError(f"CSI endpoint {endpoint!r}: the socket path must be absolute (unix:///path/csi.sock)")
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ValueError(f"CSI endpoint {endpoint!r}: the socket path is longer than {MAX_SOCKET_PATH} bytes, "
                         "the limit of Unix socket addresses; use a shorter directory")
    return Path(path)


def _check_replaceable(path: Path) -> None:
    try:
        mode = os.stat(path, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ValueError(f"CSI endpoint {path} exists and is not a socket; refusing to replace it")
    log.info("replacing stale socket %s", path)


async def start_csi_server(endpoint: str, servicers: CsiServicers, *,
                           metrics: CsiMetrics | None = None) -> grpc.aio.Server:
    """Bind the socket (mode 0600, replacing a stale one), register the services and start serving.

    With ``metrics``, every call is counted by method and status code and timed (:class:`CsiMetricsInterceptor`).

    The caller stops it with ``await server.stop(grace)``; the socket file is removed then by the caller or left
    for the next start to replace.
    """
    path = socket_path_from_endpoint(endpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_replaceable(path)
    private_dir = path.parent / f".lo{secrets.token_hex(3)}"
    private_socket = private_dir / "s"
    if len(os.fsencode(str(private_socket))) > MAX_SOCKET_PATH:
        raise ValueError(f"CSI endpoint {endpoint!r}: the directory {path.parent} is too long to bind a socket "
                         f"safely within {MAX_SOCKET_PATH} bytes; use a shorter directory")
    os.mkdir(private_dir, 0o700)
    os.chmod(private_dir, 0o700)
    server = grpc.aio.server(interceptors=[CsiMetricsInterceptor(metrics)] if metrics is not None else None)
    try:
        csi_pb2_grpc.add_IdentityServicer_to_server(servicers.identity, server)
        if servicers.controller is not None:
            csi_pb2_grpc.add_ControllerServicer_to_server(servicers.controller, server)
        if servicers.node is not None:
            csi_pb2_grpc.add_NodeServicer_to_server(servicers.node, server)
        server.add_insecure_port(f"unix://{private_socket}")
        os.chmod(private_socket, 0o600)
        await server.start()
        os.replace(private_socket, path)
    except BaseException:
        await server.stop(None)
        raise
    finally:
        try:
            if private_socket.exists() or private_socket.is_symlink():
                private_socket.unlink()
            private_dir.rmdir()
        except OSError:
            log.warning("could not remove %s", private_dir, exc_info=True)
    log.info("CSI server listening on %s (identity%s%s)", path,
             ", controller" if servicers.controller else "", ", node" if servicers.node else "")
    return server
