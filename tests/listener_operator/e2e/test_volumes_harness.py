"""Harness of the listener-volume end-to-end tests (no tests here; imported by ``test_volumes_*.py``).

kubesim with simulated nodes, the operator in-process (``run controller`` with the CSI Controller on a socket the
simulated external-provisioner uses) and one CSI node plugin per node, registered with that node's kubelet.
Everything is observed as a user would: objects through the API, files in the Pods' volume directories.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest_asyncio
from polling import poll_until

from kubesim.errors import ApiError
from kubesim.sim import KubeSim
from listener_operator.constants import DRIVER_NAME
from listener_operator.controller_command import Operator, OperatorOptions
from listener_operator.crd.generate import all_crds
from listener_operator.csi_server.node import NodeService
from listener_operator.csi_server.server import node_servicers, start_csi_server
from listener_operator.manifests import csi_driver, storage_class
from operator_runtime.config import make_api

LISTENERS = "listeners.listeners.stackable.tech"
CLASSES = "listenerclasses.listeners.stackable.tech"
POD_LISTENERS = "podlisteners.listeners.stackable.tech"
GV = "listeners.stackable.tech/v1alpha1"
NS = "default"


class VolumeEnv:
    """A running cluster with the operator and its node plugins; ``api`` is kubesim's in-process client."""

    def __init__(self, sim: KubeSim, work_dir: Path) -> None:
        self.sim = sim
        self.api = sim.api
        self.cluster = sim.cluster
        self.work_dir = work_dir
        self.operator: Operator | None = None
        self._operator_task: asyncio.Task[int] | None = None
        self._stop = asyncio.Event()
        self._node_servers: dict[str, grpc.aio.Server] = {}
        self._node_services: dict[str, NodeService] = {}
        self._client: Any = None

    async def start(self, *, preset: str = "ephemeral-nodes", listener_wait_seconds: float = 2.0) -> None:
        for crd in all_crds():
            await self.api.create("customresourcedefinitions.apiextensions.k8s.io", crd)
        await self.api.create("csidrivers.storage.k8s.io", csi_driver())
        await self.api.create("storageclasses.storage.k8s.io", storage_class())
        socket = self.work_dir / "ctl.sock"
        self.operator = Operator(OperatorOptions(
            kubeconfig=str(self.sim.kubeconfig_path), csi_endpoint=f"unix://{socket}", listener_class_preset=preset,
            leader_elect=False, http_address=None, workers=4))
        self._operator_task = asyncio.create_task(self.operator.run(self._stop))
        await self.wait_for(lambda: _async_value(socket.exists() or self._operator_task.done()), what="CSI socket")
        if self._operator_task.done():
            self._operator_task.result()
        await self.cluster.register_controller_plugin(DRIVER_NAME, f"unix://{socket}")
        await asyncio.wait_for(self.operator.presets_done.wait(), 15)
        self._client = make_api(str(self.sim.kubeconfig_path))
        for node in self.cluster.nodes:
            await self.start_node_plugin(node, listener_wait_seconds=listener_wait_seconds)

    async def start_node_plugin(self, node: str, *, listener_wait_seconds: float = 2.0) -> None:
        path = self.cluster.plugin_socket_path(node, DRIVER_NAME)
        servicers = node_servicers(self._client, node, self.cluster.kubelet_dir(node),
                                   listener_wait_seconds=listener_wait_seconds)
        assert servicers.node is not None
        self._node_servers[node] = await start_csi_server(f"unix://{path}", servicers)
        self._node_services[node] = servicers.node
        await self.cluster.register_node_plugin(node, DRIVER_NAME, f"unix://{path}")

    async def stop_operator(self) -> None:
        """Stop ``run controller`` (Listener controller and CSI Controller); node plugins keep serving."""
        self._stop.set()
        if self._operator_task is not None:
            await asyncio.wait_for(self._operator_task, 20)

    async def stop(self) -> None:
        for server in self._node_servers.values():
            await server.stop(None)
        for service in self._node_services.values():
            await service.close()
        await self.stop_operator()
        if self._client is not None:
            await self._client.close()

    # -- observation --------------------------------------------------------------------------------------------

    async def wait_for(self, check: Callable[[], Awaitable[Any]], seconds: float = 30.0, what: str = "") -> Any:
        return await poll_until(check, seconds, what)

    async def get(self, resource: str, name: str, namespace: str | None = NS) -> dict[str, Any] | None:
        try:
            return await self.api.get(resource, name, namespace)
        except ApiError as error:
            if error.code == 404:
                return None
            raise

    async def ready_pod(self, name: str) -> dict[str, Any] | None:
        """The Pod if it is Ready (kubelet reports Ready only after every volume was published)."""
        pod = await self.get("pods", name)
        if pod is None or (pod["metadata"].get("deletionTimestamp")):
            return None
        conditions = (pod.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        return pod if ready else None

    async def volume_target(self, pod: dict[str, Any], volume: str) -> Path:
        """Where kubelet asked the driver to publish the Pod's volume."""
        spec_volume = next(v for v in pod["spec"]["volumes"] if v["name"] == volume)
        claim = (spec_volume.get("persistentVolumeClaim") or {}).get("claimName") or \
            f"{pod['metadata']['name']}-{volume}"
        pvc = await self.api.get("persistentvolumeclaims", claim, pod["metadata"]["namespace"])
        pv_name = pvc["spec"]["volumeName"]
        return (self.cluster.kubelet_dir(pod["spec"]["nodeName"]) / "pods" / pod["metadata"]["uid"] / "volumes"
                / "kubernetes.io~csi" / pv_name / "mount")

    async def pod_files(self, pod: dict[str, Any], volume: str = "listener") -> dict[str, Any]:
        """The address tree as the Pod reads it: {"default": address, "addresses": {address: {port: value}}}."""
        return await asyncio.to_thread(read_tree, await self.volume_target(pod, volume))

    async def events_for(self, kind: str, name: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for resource in ("events", "events.events.k8s.io"):
            events, _ = await self.api.list(resource, NS)
            for event in events:
                ref = event.get("involvedObject") or event.get("regarding") or {}
                if ref.get("kind") == kind and ref.get("name") == name:
                    items.append(event)
        return items


def read_tree(target: Path) -> dict[str, Any]:
    addresses: dict[str, dict[str, str]] = {}
    root = target / "addresses"
    for address in sorted(os.listdir(root)):
        entry = {"address": (root / address / "address").read_text()}
        for port in sorted(os.listdir(root / address / "ports")):
            entry[port] = (root / address / "ports" / port).read_text()
        addresses[address] = entry
    return {"default": (target / "default-address" / "address").read_text(), "addresses": addresses}


async def _async_value(value: Any) -> Any:
    return value


def expected_tree(ingress_addresses: list[dict[str, Any]]) -> dict[str, Any]:
    """What the files must say for a list of Listener-style ingress addresses."""
    return {"default": ingress_addresses[0]["address"],
            "addresses": {a["address"]: {"address": a["address"], **{p: str(v) for p, v in a["ports"].items()}}
                          for a in ingress_addresses}}


def listener_class(name: str, service_type: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": GV, "kind": "ListenerClass", "metadata": {"name": name},
            "spec": {"serviceType": service_type, **spec}}


def claim_template(annotation: str, value: str, *, name: str = "listener") -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {annotation: value}},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": DRIVER_NAME,
                     "resources": {"requests": {"storage": "1"}}}}


def web_container() -> dict[str, Any]:
    return {"name": "web", "image": "nginx", "ports": [{"name": "http", "containerPort": 8080}],
            "volumeMounts": [{"name": "listener", "mountPath": "/listener"}]}


def statefulset(name: str, replicas: int, *, claim_templates: list[dict[str, Any]] | None = None,
                volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {"metadata": {"labels": {"app": name}},
                                "spec": {"containers": [web_container()], "volumes": volumes or []}}
    spec: dict[str, Any] = {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                            "template": template}
    if claim_templates:
        spec["volumeClaimTemplates"] = claim_templates
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


@pytest_asyncio.fixture
async def volume_env_factory() -> AsyncIterator[Callable[..., Awaitable[VolumeEnv]]]:
    """Start with ``await volume_env_factory(nodes=3, preset=..., **cluster_options)``."""
    started: list[tuple[KubeSim, VolumeEnv, Path]] = []

    async def factory(*, nodes: int = 3, preset: str = "ephemeral-nodes", listener_wait_seconds: float = 2.0,
                      **cluster_options: Any) -> VolumeEnv:
        work_dir = Path(tempfile.mkdtemp(prefix="lo", dir="/tmp"))
        options: dict[str, Any] = {"mount_backoff": (0.05, 0.5), "provision_backoff": (0.05, 0.5)}
        options.update(cluster_options)
        sim = KubeSim(nodes=nodes, state_dir=work_dir / "c", kubeconfig_path=work_dir / "kubeconfig", **options)
        await sim.__aenter__()
        env = VolumeEnv(sim, work_dir)
        started.append((sim, env, work_dir))
        await env.start(preset=preset, listener_wait_seconds=listener_wait_seconds)
        return env

    yield factory
    for sim, env, work_dir in reversed(started):
        try:
            await env.stop()
        finally:
            await sim.__aexit__(None, None, None)
            shutil.rmtree(work_dir, ignore_errors=True)
