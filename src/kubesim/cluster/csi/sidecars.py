"""The CSI sidecars kubesim emulates instead of running: external-provisioner and node-driver-registrar.

A Pod that runs a CSI driver the way real clusters do (a Deployment with the driver's controller and the
``csi-provisioner`` sidecar, a DaemonSet with the node plugin and ``csi-node-driver-registrar``) gets these
containers as in-process programs that do the sidecar's job with kubesim's own components, reading everything from
the Pod spec:

- **node-driver-registrar**: ``--csi-address`` (default ``/run/csi/socket``) through the container's view (the volume
  that holds it), ``GetPluginInfo`` until the driver answers (logging ``Still connecting`` meanwhile), then
  registration with the node's kubelet at ``--kubelet-registration-path`` - a path on the node, mapped by the node's
  file system - exactly what kubelet dials, so a wrong kubelet directory fails here as it would on a real node (the
  container logs the failure and exits 1, and is restarted). Stopping the container deregisters the driver (the
  kubelet drops it from CSINode).
- **external-provisioner**: ``--csi-address`` the same way, then kubesim's provisioner serves the driver's claims
  through that socket. Several replicas (``--leader-election``) take turns as the real sidecars do through their
  Lease: the first to start provisions; when it stops, the next one takes over.

Other flags are accepted and ignored. Both programs run until the kubelet stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Protocol

import grpc

from kubesim.cluster.base.nodefs import NodeFilesystem
from kubesim.cluster.csi.client import CsiConnection, socket_path_of
from kubesim.cluster.runtime.inprocess import InProcessHandler, Program, ProgramContext
from kubesim.cluster.runtime.registry import ContainerSpec
from kubesim.cluster.runtime.view import ContainerView

log = logging.getLogger(__name__)

DEFAULT_CSI_ADDRESS = "/run/csi/socket"
CONNECT_LOG_SECONDS = 10.0
PROVISIONER_IMAGE = "csi-provisioner"
REGISTRAR_IMAGE = "csi-node-driver-registrar"


class SidecarHost(Protocol):
    """What the emulated sidecars use of the cluster (``Cluster`` implements it)."""

    @property
    def rpc_timeout(self) -> float: ...

    @property
    def running(self) -> bool: ...

    def node_filesystem(self, node: str) -> NodeFilesystem: ...

    async def register_node_plugin(self, node: str, driver: str, endpoint: str) -> None: ...

    async def deregister_node_plugin(self, node: str, driver: str, endpoint: str) -> None: ...

    async def register_controller_plugin(self, driver: str, endpoint: str) -> None: ...

    async def unregister_controller_plugin(self, driver: str, endpoint: str) -> None: ...


def parse_flags(args: list[str]) -> dict[str, str]:
    """Go-style flags: ``--name=value``, ``-name=value``, ``--name value``; a bare ``--name`` is ``"true"``."""
    flags: dict[str, str] = {}
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        name, sep, value = arg.lstrip("-").partition("=")
        if not sep:
            if index < len(args) and not args[index].startswith("-"):
                value = args[index]
                index += 1
            else:
                value = "true"
        flags[name] = value
    return flags


def _view(spec: ContainerSpec) -> ContainerView:
    if spec.run_dir is None:
        raise RuntimeError("the kubelet gave this container no run directory")
    view = ContainerView(spec, spec.run_dir)
    view.build()
    return view


async def _driver_name(ctx: ProgramContext, endpoint: str, rpc_timeout: float) -> str:
    """``GetPluginInfo`` on the driver's socket until it answers (the sidecars wait for their driver forever).

    Each attempt uses a fresh channel once the socket file exists: a channel that failed to connect would wait out
    gRPC's reconnect back-off (a second or more) after the driver is already listening.
    """
    socket = socket_path_of(endpoint)
    delay = 0.02
    next_log = time.monotonic() + CONNECT_LOG_SECONDS
    while True:
        if await asyncio.to_thread(os.path.exists, socket):
            connection = CsiConnection(endpoint)
            try:
                return await connection.plugin_name(rpc_timeout)
            except grpc.aio.AioRpcError:
                pass  # created but not served yet
            finally:
                await connection.close()
        if time.monotonic() > next_log:
            ctx.log(f"Still connecting to {endpoint}")
            next_log = time.monotonic() + CONNECT_LOG_SECONDS
        # A socket another process creates offers nothing to wait on here; poll it with a short, growing delay.
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.2)


def _csi_endpoint(ctx: ProgramContext, view: ContainerView, address: str) -> str | None:
    path = view.path(address.removeprefix("unix://"))
    if path is None:
        ctx.log(f"--csi-address {address[:200]} is in no volume of this container: the driver's socket cannot be "
                "shared with it")
        return None
    return f"unix://{path}"


def registrar(host: SidecarHost) -> Callable[[ContainerSpec], Program]:
    def program_for(spec: ContainerSpec) -> Program:
        async def run(ctx: ProgramContext) -> int:
            flags = parse_flags(spec.args)
            registration_path = flags.get("kubelet-registration-path", "")
            if not registration_path.startswith("/"):
                ctx.log("kubelet-registration-path is a required parameter (an absolute path on the node)")
                return 1
            endpoint = _csi_endpoint(ctx, _view(spec), flags.get("csi-address", DEFAULT_CSI_ADDRESS))
            if endpoint is None:
                return 1
            ctx.log(f"Attempting to open a gRPC connection with: {endpoint}")
            driver = await _driver_name(ctx, endpoint, host.rpc_timeout)
            ctx.log(f"CSI driver name: {driver!r}")
            kubelet_socket = host.node_filesystem(spec.node_name).host_path(registration_path)
            kubelet_endpoint = f"unix://{kubelet_socket}"
            try:
                if not await asyncio.to_thread(kubelet_socket.is_socket):
                    raise FileNotFoundError(f"no socket at {registration_path} on node {spec.node_name}")
                await host.register_node_plugin(spec.node_name, driver, kubelet_endpoint)
            except Exception as error:
                ctx.log(f"Registration process failed with error: kubelet could not reach the driver at "
                        f"{registration_path}: {error}, restarting registration container.")
                return 1
            ctx.log(f"Registered {driver} with kubelet at {registration_path}")
            try:
                return await ctx.exited()
            finally:
                with contextlib.suppress(Exception):
                    await host.deregister_node_plugin(spec.node_name, driver, kubelet_endpoint)

        return run

    return program_for


class ControllerElection:
    """external-provisioner replicas per driver: the first serves, the next takes over when it leaves."""

    def __init__(self, host: SidecarHost) -> None:
        self.host = host
        self._candidates: dict[str, list[str]] = {}
        self._lock = asyncio.Lock()

    async def join(self, driver: str, endpoint: str) -> bool:
        """Returns whether ``endpoint`` leads (and is registered) now."""
        async with self._lock:
            candidates = self._candidates.setdefault(driver, [])
            candidates.append(endpoint)
            if candidates[0] != endpoint:
                return False
        try:
            await self.host.register_controller_plugin(driver, endpoint)
        except BaseException:
            await self.leave(driver, endpoint)
            raise
        return True

    async def leave(self, driver: str, endpoint: str) -> None:
        async with self._lock:
            candidates = self._candidates.get(driver, [])
            led = bool(candidates) and candidates[0] == endpoint
            if endpoint in candidates:
                candidates.remove(endpoint)
            successor = candidates[0] if led and candidates else None
        if not led:
            return
        await self.host.unregister_controller_plugin(driver, endpoint)
        if successor is not None and self.host.running:
            try:
                await self.host.register_controller_plugin(driver, successor)
            except Exception as error:
                log.warning("external-provisioner for %s at %s could not take over: %s", driver, successor, error)


def provisioner(host: SidecarHost, election: ControllerElection) -> Callable[[ContainerSpec], Program]:
    def program_for(spec: ContainerSpec) -> Program:
        async def run(ctx: ProgramContext) -> int:
            flags = parse_flags(spec.args)
            endpoint = _csi_endpoint(ctx, _view(spec), flags.get("csi-address", DEFAULT_CSI_ADDRESS))
            if endpoint is None:
                return 1
            driver = await _driver_name(ctx, endpoint, host.rpc_timeout)
            ctx.log(f"Detected CSI driver {driver}")
            joined = False
            try:
                leads = await election.join(driver, endpoint)
                joined = True
                ctx.log(f"{'became leader, provisioning' if leads else 'waiting to become leader'} for {driver}")
                return await ctx.exited()
            finally:
                if joined:
                    with contextlib.suppress(Exception):
                        await election.leave(driver, endpoint)

        return run

    return program_for


def sidecar_handlers(host: SidecarHost) -> dict[str, InProcessHandler]:
    """Image (last path segment, any registry) -> handler of the emulated sidecars."""
    return {
        PROVISIONER_IMAGE: InProcessHandler(provisioner(host, ControllerElection(host))),
        REGISTRAR_IMAGE: InProcessHandler(registrar(host)),
    }

