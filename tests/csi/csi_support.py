"""Helpers of the CSI tests: a CSI endpoint on a real Unix socket serving Identity + Controller + Node."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_proto import csi_pb2, csi_pb2_grpc
from kubesim.testing.patience import patience
from listener_operator.constants import ANNOTATION_LISTENER_CLASS
from listener_operator.crd.generate import all_crds
from listener_operator.csi_server.node import NodeService
from listener_operator.csi_server.server import (
    CsiServicers,
    controller_servicers,
    node_servicers,
    start_csi_server,
)
from operator_runtime.api import KubeApi
from operator_runtime.errors import Conflict
from operator_runtime.kinds import CRD, NAMESPACE

NODE_NAME = "node-a"


MOUNT = csi_pb2.VolumeCapability(
    mount=csi_pb2.VolumeCapability.MountVolume(),
    access_mode=csi_pb2.VolumeCapability.AccessMode(mode=csi_pb2.VolumeCapability.AccessMode.MULTI_NODE_MULTI_WRITER),
)
BLOCK = csi_pb2.VolumeCapability(
    block=csi_pb2.VolumeCapability.BlockVolume(),
    access_mode=csi_pb2.VolumeCapability.AccessMode(mode=csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_WRITER),
)
POD_INFO = {"csi.storage.k8s.io/pod.name": "web-0", "csi.storage.k8s.io/pod.namespace": "default",
            "csi.storage.k8s.io/pod.uid": "uid-1", ANNOTATION_LISTENER_CLASS: "external-stable"}


async def expect_code(call: object, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    assert caught.value.code() == code, caught.value.details()
    return caught.value.details() or ""


@dataclass
class CsiEndpoint:
    socket: Path
    kubelet_dir: Path
    identity: csi_pb2_grpc.IdentityStub
    controller: csi_pb2_grpc.ControllerStub
    node: csi_pb2_grpc.NodeStub
    service: NodeService | None = None  # the node service behind the socket (closed by the fixtures)

    def target(self, pod_uid: str = "uid-1", volume: str = "pvc-1") -> str:
        return str(self.kubelet_dir / "pods" / pod_uid / "volumes" / "kubernetes.io~csi" / volume / "mount")


@dataclass
class KubeCsi:
    """A CSI endpoint backed by kubesim; ``api`` sets up and inspects objects as a user would."""

    api: KubeApi
    csi: CsiEndpoint


async def open_endpoint(api: KubeApi, short_dir: Path, *, listener_wait_seconds: float = 0.0
                        ) -> tuple[grpc.aio.Server, grpc.aio.Channel, CsiEndpoint]:
    kubelet_dir = short_dir / "kubelet"
    (kubelet_dir / "pods").mkdir(parents=True, exist_ok=True)
    controller = controller_servicers(api)
    node = node_servicers(api, NODE_NAME, kubelet_dir, listener_wait_seconds=listener_wait_seconds)
    servicers = CsiServicers(identity=controller.identity, controller=controller.controller, node=node.node)
    socket = short_dir / "csi.sock"
    server = await start_csi_server(f"unix://{socket}", servicers)
    channel = grpc.aio.insecure_channel(f"unix://{socket}")
    endpoint = CsiEndpoint(socket, kubelet_dir, csi_pb2_grpc.IdentityStub(channel),
                           csi_pb2_grpc.ControllerStub(channel), csi_pb2_grpc.NodeStub(channel), node.node)
    return server, channel, endpoint


async def close_endpoint(server: grpc.aio.Server, channel: grpc.aio.Channel, endpoint: CsiEndpoint) -> None:
    await channel.close()
    await server.stop(None)
    if endpoint.service is not None:
        await endpoint.service.close()



# -- Kubernetes objects for the tests (plain dicts, as the API returns them) ----------------------------------------

LISTENER_API = "listeners.stackable.tech/v1alpha1"


def node_object(name: str, *, external_ip: str | None = None, internal_ip: str | None = None,
                hostname: str | None = None) -> dict[str, Any]:
    addresses = [{"type": kind, "address": value} for kind, value in
                 (("ExternalIP", external_ip), ("InternalIP", internal_ip), ("Hostname", hostname)) if value]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"addresses": addresses}}


def listener_class_object(name: str, service_type: str, *, pinned: bool = False) -> dict[str, Any]:
    return {"apiVersion": LISTENER_API, "kind": "ListenerClass", "metadata": {"name": name},
            "spec": {"serviceType": service_type, "pinnedNodePorts": pinned}}


def pvc_object(namespace: str, name: str, annotations: dict[str, str],
               labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations, "labels": labels or {}},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "listeners.stackable.tech",
                     "resources": {"requests": {"storage": "1"}}}}


def pv_object(name: str, claim_namespace: str, claim_name: str, context: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1"}, "accessModes": ["ReadWriteMany"],
                     "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "listeners.stackable.tech",
                     "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": claim_namespace,
                                  "name": claim_name},
                     "csi": {"driver": "listeners.stackable.tech", "volumeHandle": name,
                             "volumeAttributes": context}}}


def pod_object(namespace: str, name: str, *, node: str | None, claims: dict[str, str],
               ports: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Pod whose volumes map volume name -> PVC name; ports go on its only container."""
    container: dict[str, Any] = {"name": "main", "image": "nginx"}
    if ports:
        container["ports"] = ports
    spec: dict[str, Any] = {"containers": [container],
                            "volumes": [{"name": vol, "persistentVolumeClaim": {"claimName": claim}}
                                        for vol, claim in claims.items()]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec}


async def install_crds(api: KubeApi) -> None:
    """The listener CRDs and the ``default`` namespace (which may exist already), as a fresh cluster needs them."""
    for crd in all_crds():
        await api.create(CRD, crd)
    try:
        await api.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    except Conflict:
        pass


async def until(check: Callable[[], Awaitable[Any]], within: float = 10.0) -> Any:
    """The first truthy value of ``check``, or its last value after ``within`` seconds (stretched by the load)."""
    deadline = time.monotonic() + patience(within)
    while True:
        value = await check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.05)
