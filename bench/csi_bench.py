"""Benchmarks of the listener-volume CSI driver on kubesim; prints one JSON document.

* ``publish``: NodePublishVolume latency over the real Unix socket with the Listener already ready, for
  ``listener-name`` volumes (one shared Listener) and ``listener-class`` volumes (one Listener per volume): first
  publishes of fresh volumes, and re-publishes of the same volumes (the idempotent path kubelet takes after a
  restart, which writes nothing), p50/p99 in milliseconds.
* ``statefulset``: seconds from creating a StatefulSet with a ``listener-class`` volumeClaimTemplate until every
  replica is Ready and its address files are in place, with the operator and one node plugin per simulated node.

Usage: ``python bench/csi_bench.py [--publishes 200] [--replicas 20] [--nodes 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from csi_proto import csi_pb2, csi_pb2_grpc
from kubesim.errors import ApiError
from kubesim.sim import KubeSim
from listener_operator.constants import ANNOTATION_LISTENER_CLASS, ANNOTATION_LISTENER_NAME, DRIVER_NAME
from listener_operator.controller_command import Operator, OperatorOptions
from listener_operator.crd.generate import all_crds
from listener_operator.csi_server.server import node_servicers, start_csi_server
from listener_operator.manifests import csi_driver, storage_class
from operator_runtime.config import make_api

NS = "default"
GV = "listeners.stackable.tech/v1alpha1"
CAPABILITY = csi_pb2.VolumeCapability(
    mount=csi_pb2.VolumeCapability.MountVolume(),
    access_mode=csi_pb2.VolumeCapability.AccessMode(mode=csi_pb2.VolumeCapability.AccessMode.MULTI_NODE_MULTI_WRITER))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> dict[str, float]:
    return {"count": len(values), "p50_ms": round(percentile(values, 0.5) * 1000, 3),
            "p99_ms": round(percentile(values, 0.99) * 1000, 3), "mean_ms": round(statistics.fmean(values) * 1000, 3)}


async def install(sim: KubeSim) -> None:
    for crd in all_crds():
        await sim.api.create("customresourcedefinitions.apiextensions.k8s.io", crd)
    await sim.api.create("csidrivers.storage.k8s.io", csi_driver())
    await sim.api.create("storageclasses.storage.k8s.io", storage_class())


async def bench_publish(count: int, work: Path, mode: str) -> dict[str, Any]:
    """``mode`` ``name``: volumes bound to one shared Listener; ``class``: one Listener per volume, created ready
    (status set) before the first publish, which then only takes it over (apply)."""
    async with KubeSim(kubeconfig_path=work / "kubeconfig") as sim:
        await install(sim)
        api = sim.api
        await api.create("listenerclasses.listeners.stackable.tech", {
            "apiVersion": GV, "kind": "ListenerClass", "metadata": {"name": "lb"},
            "spec": {"serviceType": "LoadBalancer"}})
        status = {"ingressAddresses": [{"address": "198.51.100.1", "addressType": "IP", "ports": {"http": 80}}]}

        async def ready_listener(name: str) -> None:
            await api.create("listeners.listeners.stackable.tech", {
                "apiVersion": GV, "kind": "Listener", "metadata": {"name": name, "namespace": NS},
                "spec": {"className": "lb", "ports": [{"name": "http", "port": 80}]}}, NS)
            await api.patch("listeners.listeners.stackable.tech", name, {"status": status}, namespace=NS,
                            subresource="status")

        if mode == "name":
            await ready_listener("shared")
        kubelet = work / "kubelet"
        requests: list[csi_pb2.NodePublishVolumeRequest] = []
        context = {ANNOTATION_LISTENER_NAME: "shared"} if mode == "name" else {ANNOTATION_LISTENER_CLASS: "lb"}
        for index in range(count):
            claim = f"claim-{index}"
            if mode == "class":
                await ready_listener(claim)
            await api.create("persistentvolumeclaims", {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": NS, "annotations": context},
                "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": DRIVER_NAME,
                         "resources": {"requests": {"storage": "1"}}}}, NS)
            await api.create("persistentvolumes", {
                "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv-{index}"},
                "spec": {"capacity": {"storage": "1"}, "accessModes": ["ReadWriteMany"],
                         "claimRef": {"namespace": NS, "name": claim},
                         "csi": {"driver": DRIVER_NAME, "volumeHandle": f"pv-{index}", "volumeAttributes": context}}})
            pod = await api.create("pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{index}", "namespace": NS},
                "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "x", "ports": [
                    {"name": "http", "containerPort": 80}]}],
                         "volumes": [{"name": "listener", "persistentVolumeClaim": {"claimName": claim}}]}}, NS)
            uid = pod["metadata"]["uid"]
            requests.append(csi_pb2.NodePublishVolumeRequest(
                volume_id=f"pv-{index}", volume_capability=CAPABILITY,
                target_path=str(kubelet / "pods" / uid / "volumes" / "kubernetes.io~csi" / f"pv-{index}" / "mount"),
                volume_context={"csi.storage.k8s.io/pod.name": f"pod-{index}", "csi.storage.k8s.io/pod.namespace": NS,
                                "csi.storage.k8s.io/pod.uid": uid, **context}))
        (kubelet / "pods").mkdir(parents=True)
        client = make_api(str(sim.kubeconfig_path))
        servicers = node_servicers(client, "node-1", kubelet)
        server = await start_csi_server(f"unix://{work}/n.sock", servicers)
        try:
            async with grpc.aio.insecure_channel(f"unix://{work}/n.sock") as channel:
                node = csi_pb2_grpc.NodeStub(channel)
                await node.NodeGetInfo(csi_pb2.NodeGetInfoRequest())  # connect before timing
                results: dict[str, Any] = {}
                for phase in ("first_publish", "republish"):
                    latencies = []
                    for request in requests:
                        start = time.perf_counter()
                        await node.NodePublishVolume(request)
                        latencies.append(time.perf_counter() - start)
                    results[phase] = summary(latencies)
                return results
        finally:
            await server.stop(None)
            if servicers.node is not None:
                await servicers.node.close()
            await client.close()


async def bench_statefulset(replicas: int, nodes: int, work: Path) -> dict[str, Any]:
    async with KubeSim(nodes=nodes, state_dir=work / "c", kubeconfig_path=work / "kubeconfig",
                       mount_backoff=(0.05, 0.5), provision_backoff=(0.05, 0.5)) as sim:
        await install(sim)
        stop = asyncio.Event()
        socket = work / "ctl.sock"
        operator = Operator(OperatorOptions(kubeconfig=str(sim.kubeconfig_path), csi_endpoint=f"unix://{socket}",
                                            leader_elect=False, http_address=None, workers=4))
        task = asyncio.create_task(operator.run(stop))
        client = make_api(str(sim.kubeconfig_path))
        servers = []
        services = []
        try:
            for _ in range(1000):  # the operator binds its CSI socket shortly after start
                if socket.exists() or task.done():
                    break
                await asyncio.sleep(0.02)
            if task.done():
                task.result()
            await sim.cluster.register_controller_plugin(DRIVER_NAME, f"unix://{socket}")
            await asyncio.wait_for(operator.presets_done.wait(), 15)
            for node in sim.cluster.nodes:
                path = sim.cluster.plugin_socket_path(node, DRIVER_NAME)
                node_set = node_servicers(client, node, sim.cluster.kubelet_dir(node))
                services.append(node_set.node)
                servers.append(await start_csi_server(f"unix://{path}", node_set))
                await sim.cluster.register_node_plugin(node, DRIVER_NAME, f"unix://{path}")
            template = {"metadata": {"labels": {"app": "bench"}}, "spec": {"containers": [
                {"name": "web", "image": "nginx", "ports": [{"name": "http", "containerPort": 8080}]}]}}
            claim = {"metadata": {"name": "listener", "annotations": {ANNOTATION_LISTENER_CLASS: "cluster-internal"}},
                     "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": DRIVER_NAME,
                              "resources": {"requests": {"storage": "1"}}}}
            start = time.perf_counter()
            await sim.api.create("statefulsets.apps", {
                "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "bench", "namespace": NS},
                "spec": {"replicas": replicas, "serviceName": "bench", "selector": {"matchLabels": {"app": "bench"}},
                         "template": template, "volumeClaimTemplates": [claim]}}, NS)
            pending = {f"bench-{i}" for i in range(replicas)}
            while pending:
                for name in sorted(pending):
                    if await _ready_with_files(sim, name):
                        pending.discard(name)
                await asyncio.sleep(0.02)
            elapsed = time.perf_counter() - start
            return {"replicas": replicas, "nodes": nodes, "seconds_to_all_ready_with_files": round(elapsed, 3)}
        finally:
            for server in servers:
                await server.stop(None)
            for service in services:
                if service is not None:
                    await service.close()
            stop.set()
            await asyncio.wait_for(task, 20)
            await client.close()


async def _ready_with_files(sim: KubeSim, name: str) -> bool:
    try:
        pod = await sim.api.get("pods", name, NS)
        claim = await sim.api.get("persistentvolumeclaims", f"listener-{name}", NS)
    except ApiError:
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return False
    target = (sim.cluster.kubelet_dir(pod["spec"]["nodeName"]) / "pods" / pod["metadata"]["uid"] / "volumes"
              / "kubernetes.io~csi" / claim["spec"]["volumeName"] / "mount" / "default-address" / "address")
    return await asyncio.to_thread(os.path.exists, target)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result: dict[str, Any] = {"benchmark": "csi", "python": sys.version.split()[0]}
    runs: tuple[tuple[str, Callable[[Path], Awaitable[dict[str, Any]]]], ...] = (
        ("listener_name", lambda w: bench_publish(args.publishes, w, "name")),
        ("listener_class", lambda w: bench_publish(args.publishes, w, "class")),
        ("statefulset", lambda w: bench_statefulset(args.replicas, args.nodes, w)),
    )
    for key, run in runs:
        work = Path(tempfile.mkdtemp(prefix="lo", dir="/tmp"))
        try:
            value = await run(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if key == "statefulset":
            result[key] = value
        else:
            result.setdefault("publish", {})[key] = value
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
