"""A minimal CSI driver for kubesim's own tests and benchmarks (not the listener operator's driver).

It keeps volumes in memory, pins each volume to the first preferred topology segment (like a local-volume
driver), writes ``volume_id`` and ``context.json`` into every publish target, and can be told to fail the next
``CreateVolume`` / ``NodePublishVolume`` calls with a given gRPC status, to exercise retries and Events.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from csi_proto import csi_pb2, csi_pb2_grpc
from kubesim.cluster.csi.client import socket_path_of
from kubesim.errors import ApiError

DEFAULT_NAME = "sim.csi.kubesim.io"


@dataclass
class Failure:
    code: grpc.StatusCode
    message: str


@dataclass
class DriverState:
    name: str
    topology_key: str
    pin_volumes: bool
    single_node_multi_writer: bool = False  # advertise SINGLE_NODE_MULTI_WRITER (controller and node)
    volume_mount_group: bool = False  # advertise the VOLUME_MOUNT_GROUP node capability
    volumes: dict[str, Any] = field(default_factory=dict)  # volume id -> csi_pb2.Volume
    calls: list[tuple[str, Any]] = field(default_factory=list)
    create_failures: deque[Failure] = field(default_factory=deque)
    publish_failures: deque[Failure] = field(default_factory=deque)


class _Identity(csi_pb2_grpc.IdentityServicer):
    def __init__(self, state: DriverState, controller: bool) -> None:
        self.state = state
        self.controller = controller

    async def GetPluginInfo(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return csi_pb2.GetPluginInfoResponse(name=self.state.name, vendor_version="0.1.0")

    async def GetPluginCapabilities(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        service = csi_pb2.PluginCapability.Service
        capabilities = [
            csi_pb2.PluginCapability(service=service(type=service.VOLUME_ACCESSIBILITY_CONSTRAINTS))
        ]
        if self.controller:
            capabilities.append(csi_pb2.PluginCapability(service=service(type=service.CONTROLLER_SERVICE)))
        return csi_pb2.GetPluginCapabilitiesResponse(capabilities=capabilities)

    async def Probe(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        response = csi_pb2.ProbeResponse()
        response.ready.value = True
        return response


class _Controller(csi_pb2_grpc.ControllerServicer):
    def __init__(self, state: DriverState) -> None:
        self.state = state

    async def ControllerGetCapabilities(
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Any:
        rpc = csi_pb2.ControllerServiceCapability.RPC
        types = [rpc.CREATE_DELETE_VOLUME]
        if self.state.single_node_multi_writer:
            types.append(rpc.SINGLE_NODE_MULTI_WRITER)
        return csi_pb2.ControllerGetCapabilitiesResponse(
            capabilities=[csi_pb2.ControllerServiceCapability(rpc=rpc(type=t)) for t in types]
        )

    async def CreateVolume(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        self.state.calls.append(("CreateVolume", request))
        if not request.name or not request.volume_capabilities:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "name and volume_capabilities are required")
        if self.state.create_failures:
            failure = self.state.create_failures.popleft()
            await context.abort(failure.code, failure.message)
        existing = self.state.volumes.get(request.name)
        if existing is not None:
            return csi_pb2.CreateVolumeResponse(volume=existing)
        volume = csi_pb2.Volume(
            volume_id=request.name,
            capacity_bytes=request.capacity_range.required_bytes,
            volume_context={"driver": self.state.name, **dict(request.parameters)},
        )
        preferred = list(request.accessibility_requirements.preferred) or list(
            request.accessibility_requirements.requisite
        )
        if self.state.pin_volumes and preferred:
            volume.accessible_topology.add(segments=dict(preferred[0].segments))
        self.state.volumes[request.name] = volume
        return csi_pb2.CreateVolumeResponse(volume=volume)

    async def DeleteVolume(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        self.state.calls.append(("DeleteVolume", request))
        if not request.volume_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "volume_id is required")
        self.state.volumes.pop(request.volume_id, None)
        return csi_pb2.DeleteVolumeResponse()


class _Node(csi_pb2_grpc.NodeServicer):
    def __init__(self, state: DriverState, node_name: str) -> None:
        self.state = state
        self.node_name = node_name

    async def NodeGetInfo(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        response = csi_pb2.NodeGetInfoResponse(node_id=self.node_name)
        response.accessible_topology.segments[self.state.topology_key] = self.node_name
        return response

    async def NodeGetCapabilities(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        rpc = csi_pb2.NodeServiceCapability.RPC
        types = []
        if self.state.single_node_multi_writer:
            types.append(rpc.SINGLE_NODE_MULTI_WRITER)
        if self.state.volume_mount_group:
            types.append(rpc.VOLUME_MOUNT_GROUP)
        return csi_pb2.NodeGetCapabilitiesResponse(
            capabilities=[csi_pb2.NodeServiceCapability(rpc=rpc(type=t)) for t in types]
        )

    async def NodePublishVolume(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        self.state.calls.append(("NodePublishVolume", request))
        if not request.volume_id or not request.target_path or not request.HasField("volume_capability"):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "volume_id, target_path and volume_capability are required"
            )
        if self.state.publish_failures:
            failure = self.state.publish_failures.popleft()
            await context.abort(failure.code, failure.message)
        target = Path(request.target_path)
        content = {
            "volume_id": request.volume_id,
            "node": self.node_name,
            "volume_context": dict(request.volume_context),
            "readonly": request.readonly,
        }
        await asyncio.to_thread(_write_target, target, request.volume_id, json.dumps(content, sort_keys=True))
        return csi_pb2.NodePublishVolumeResponse()

    async def NodeUnpublishVolume(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        self.state.calls.append(("NodeUnpublishVolume", request))
        if not request.volume_id or not request.target_path:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "volume_id and target_path are required")
        await asyncio.to_thread(shutil.rmtree, request.target_path, True)
        return csi_pb2.NodeUnpublishVolumeResponse()


def _prepare_socket(path: Path) -> None:
    """Create the socket's directory and remove a stale socket left by an earlier run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)


def _write_target(target: Path, volume_id: str, context_json: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    (target / "volume_id").write_text(volume_id)
    (target / "context.json").write_text(context_json)


class SimpleCsiDriver:
    """Serve the driver's controller and node plugins on Unix sockets; ``stop()`` closes all of them."""

    def __init__(
        self,
        name: str = DEFAULT_NAME,
        *,
        topology_key: str | None = None,
        pin_volumes: bool = True,
        single_node_multi_writer: bool = False,
        volume_mount_group: bool = False,
    ) -> None:
        self.state = DriverState(
            name=name,
            topology_key=topology_key or f"topology.{name}/node",
            pin_volumes=pin_volumes,
            single_node_multi_writer=single_node_multi_writer,
            volume_mount_group=volume_mount_group,
        )
        self._servers: list[grpc.aio.Server] = []

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def calls(self) -> list[tuple[str, Any]]:
        return self.state.calls

    def calls_of(self, method: str) -> list[Any]:
        return [request for name, request in self.state.calls if name == method]

    def fail_create_volume(self, times: int, code: grpc.StatusCode, message: str) -> None:
        self.state.create_failures.extend(Failure(code, message) for _ in range(times))

    def fail_node_publish(self, times: int, code: grpc.StatusCode, message: str) -> None:
        self.state.publish_failures.extend(Failure(code, message) for _ in range(times))

    async def _serve(self, endpoint: str, register: list[tuple[Any, Any]]) -> str:
        path = Path(socket_path_of(endpoint))
        _prepare_socket(path)
        server = grpc.aio.server()
        for add, servicer in register:
            add(servicer, server)
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        self._servers.append(server)
        return f"unix://{path}"

    async def serve_controller(self, endpoint: str) -> str:
        return await self._serve(
            endpoint,
            [
                (csi_pb2_grpc.add_IdentityServicer_to_server, _Identity(self.state, controller=True)),
                (csi_pb2_grpc.add_ControllerServicer_to_server, _Controller(self.state)),
            ],
        )

    async def serve_node(self, endpoint: str, node_name: str) -> str:
        return await self._serve(
            endpoint,
            [
                (csi_pb2_grpc.add_IdentityServicer_to_server, _Identity(self.state, controller=False)),
                (csi_pb2_grpc.add_NodeServicer_to_server, _Node(self.state, node_name)),
            ],
        )

    async def stop(self) -> None:
        for server in self._servers:
            await server.stop(None)
        self._servers.clear()


async def deploy(
    cluster: Any,
    driver: SimpleCsiDriver,
    *,
    storage_class: str = "sim",
    binding_mode: str = "WaitForFirstConsumer",
    pod_info_on_mount: bool = True,
) -> None:
    """Install the driver as its Helm chart would: CSIDriver, StorageClass, controller and one node plugin per node.
    Objects that exist already (a resumed cluster) stay as they are."""
    api = cluster.api
    await _create_or_keep(
        api,
        "csidrivers.storage.k8s.io",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": driver.name},
            "spec": {
                "attachRequired": False,
                "podInfoOnMount": pod_info_on_mount,
                "volumeLifecycleModes": ["Persistent", "Ephemeral"],
            },
        },
    )
    await _create_or_keep(
        api,
        "storageclasses.storage.k8s.io",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": storage_class},
            "provisioner": driver.name,
            "volumeBindingMode": binding_mode,
            "reclaimPolicy": "Delete",
        },
    )
    controller_endpoint = f"unix://{cluster.controller_socket_path(driver.name)}"
    await driver.serve_controller(controller_endpoint)
    await cluster.register_controller_plugin(driver.name, controller_endpoint)
    for node in cluster.nodes:
        endpoint = f"unix://{cluster.plugin_socket_path(node, driver.name)}"
        await driver.serve_node(endpoint, node)
        await cluster.register_node_plugin(node, driver.name, endpoint)


async def _create_or_keep(api: Any, resource: str, body: dict[str, Any]) -> None:
    try:
        await api.create(resource, body)
    except ApiError as error:
        if error.code != 409:
            raise
