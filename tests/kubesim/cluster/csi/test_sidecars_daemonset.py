"""A CSI driver deployed the way real clusters deploy it, driven only by Pod specs: a DaemonSet Pod per node with the
node-driver-registrar sidecar registers the node plugin with that node's kubelet (through the registration path on
the node, so a wrong kubelet directory fails as on a real node), and external-provisioner sidecars in controller Pods
take turns provisioning. Plus the DaemonSet controller itself and hostPath volumes of the node's file system."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from clusterhelpers import pod_ready, short_state_dir, wait_for, wait_for_event
from traffichelpers import FAST_RESTARTS, NS, container, eventually, pod, ready_pod

from kubesim.cluster.controllers.daemonset import REVISION_LABEL
from kubesim.cluster.csi.testdriver import SimpleCsiDriver
from kubesim.sim import KubeSim

REGISTRAR = "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.15.0"
PROVISIONER = "registry.k8s.io/sig-storage/csi-provisioner:v5.3.0"
PAUSE = "registry.k8s.io/pause:3.10"


@pytest_asyncio.fixture
async def sim() -> AsyncIterator[KubeSim]:
    state = short_state_dir()
    try:
        async with KubeSim(nodes=2, state_dir=state, tls=False, discover_plugins=False, **FAST_RESTARTS) as running:
            yield running
    finally:
        shutil.rmtree(state, ignore_errors=True)


def daemon_set(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": list(containers), **spec}}}}


async def drivers_on(sim: KubeSim, node: str) -> list[str]:
    try:
        csinode = await sim.api.get("csinodes.storage.k8s.io", node)
    except Exception:
        return []
    return [driver["name"] for driver in csinode["spec"].get("drivers") or []]


def registrar_pod(name: str, node: str, registration_path: str) -> dict[str, Any]:
    registrar = container("node-driver-registrar", REGISTRAR,
                          args=["--csi-address=/csi/csi.sock", f"--kubelet-registration-path={registration_path}"],
                          volumeMounts=[{"name": "plugin-dir", "mountPath": "/csi"},
                                        {"name": "registration-dir", "mountPath": "/registration"}])
    return pod(name, registrar, nodeName=node, volumes=[
        {"name": "plugin-dir", "hostPath": {"path": "/var/lib/kubelet/plugins/sim.csi.kubesim.io/",
                                            "type": "DirectoryOrCreate"}},
        {"name": "registration-dir", "hostPath": {"path": "/var/lib/kubelet/plugins_registry", "type": "Directory"}}])


async def test_the_registrar_registers_the_node_plugin_its_pod_shares_a_socket_with(sim: KubeSim) -> None:
    assert sim.cluster is not None
    driver = SimpleCsiDriver()
    try:
        # The node plugin listens where its hostPath volume is on node-1 (no registration by the test).
        await driver.serve_node(f"unix://{sim.cluster.plugin_socket_path('node-1', driver.name)}", "node-1")
        await sim.api.create("pods", registrar_pod(
            "registrar", "node-1", f"/var/lib/kubelet/plugins/{driver.name}/csi.sock"), NS)
        await ready_pod(sim.api, "registrar")
        assert await eventually(lambda: drivers_on(sim, "node-1"), 10, "the driver in CSINode") == [driver.name]
        assert await drivers_on(sim, "node-2") == []
        log = sim.cluster.container_log_path(NS, "registrar", "node-driver-registrar")
        assert log is not None and f"Registered {driver.name} with kubelet" in log.read_text()
        # The registrar stops with its Pod: the kubelet forgets the driver.
        await sim.api.delete("pods", "registrar", NS)
        assert await eventually(lambda: _none(drivers_on(sim, "node-1")), 10, "the driver gone from CSINode")

        # A registration path kubelet cannot reach (another kubelet directory) fails as on a real node: the
        # container exits, is restarted, and the driver is never registered.
        await sim.api.create("pods", registrar_pod(
            "misplaced", "node-1", f"/var/lib/k0s/kubelet/plugins/{driver.name}/csi.sock"), NS)
        await wait_for_event(sim.api, NS, "BackOff", "misplaced")
        log = sim.cluster.container_log_path(NS, "misplaced", "node-driver-registrar")
        assert log is not None
        assert (f"Registration process failed with error: kubelet could not reach the driver at "
                f"/var/lib/k0s/kubelet/plugins/{driver.name}/csi.sock") in log.read_text()
        assert await drivers_on(sim, "node-1") == []
    finally:
        await driver.stop()


async def _none(value: Any) -> bool:
    return not await value


async def test_external_provisioner_replicas_take_turns(sim: KubeSim) -> None:
    assert sim.cluster is not None
    driver = SimpleCsiDriver()
    try:
        node_dir = sim.cluster.kubelet_dir("node-1") / "plugins" / "controller"
        node_dir.mkdir(parents=True)
        await driver.serve_controller(f"unix://{node_dir / 'csi.sock'}")
        for node in sim.cluster.nodes:
            endpoint = f"unix://{sim.cluster.plugin_socket_path(node, driver.name)}"
            await driver.serve_node(endpoint, node)
            await sim.cluster.register_node_plugin(node, driver.name, endpoint)
        await sim.api.create("storageclasses.storage.k8s.io", {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "sim"},
            "provisioner": driver.name, "volumeBindingMode": "Immediate"})
        for name in ("provisioner-a", "provisioner-b"):
            sidecar = container("external-provisioner", PROVISIONER,
                                args=["--csi-address=$(ADDRESS)", "--leader-election"],
                                env=[{"name": "ADDRESS", "value": "/csi/csi.sock"}],
                                volumeMounts=[{"name": "socket-dir", "mountPath": "/csi"}])
            await sim.api.create("pods", pod(name, sidecar, nodeName="node-1", volumes=[
                {"name": "socket-dir", "hostPath": {"path": "/var/lib/kubelet/plugins/controller"}}]), NS)
            await ready_pod(sim.api, name)

        async def provisioned(claim: str) -> bool:
            found = await sim.api.get("persistentvolumeclaims", claim, NS)
            return bool(found["status"].get("phase") == "Bound")

        async def claim(name: str) -> None:
            await sim.api.create("persistentvolumeclaims", {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "sim",
                         "resources": {"requests": {"storage": "1"}}}}, NS)
            await eventually(lambda: provisioned(name), 15, f"claim {name} bound")

        await claim("first")
        logs = {name: sim.cluster.container_log_path(NS, name, "external-provisioner")
                for name in ("provisioner-a", "provisioner-b")}
        assert "became leader" in logs["provisioner-a"].read_text()  # type: ignore[union-attr]
        assert "waiting to become leader" in logs["provisioner-b"].read_text()  # type: ignore[union-attr]
        await sim.api.delete("pods", "provisioner-a", NS)
        await wait_for(sim.api, "pods", "provisioner-a", NS, lambda found: found is None)
        await claim("second")  # provisioned through provisioner-b's sidecar now
        await sim.api.delete("pods", "provisioner-b", NS)
        await wait_for(sim.api, "pods", "provisioner-b", NS, lambda found: found is None)
        assert driver.name not in sim.cluster.provisioner.plugins
    finally:
        await driver.stop()


async def test_a_daemon_set_runs_one_pod_per_eligible_node(sim: KubeSim) -> None:
    assert sim.cluster is not None
    await sim.api.create("daemonsets.apps", daemon_set("agent", container("agent", PAUSE)), NS)

    async def pods_by_node(revision: str | None = None) -> dict[str, str] | None:
        found, _ = await sim.api.list("pods", NS, label_selector="app=agent")
        live = [p for p in found if not p["metadata"].get("deletionTimestamp") and pod_ready(p)
                and (revision is None or p["metadata"]["labels"][REVISION_LABEL] == revision)]
        return {p["spec"]["nodeName"]: p["metadata"]["name"] for p in live} if len(live) == len(found) else None

    async def on_nodes(expected: set[str], revision: str | None = None) -> dict[str, str] | None:
        current = await pods_by_node(revision)
        return current if current is not None and set(current) == expected else None

    first = await eventually(lambda: on_nodes({"node-1", "node-2"}), 15, "a Pod on each node")
    daemon = await wait_for(sim.api, "daemonsets.apps", "agent", NS,
                            lambda ds: (ds or {}).get("status", {}).get("numberReady") == 2)
    assert daemon is not None and daemon["status"]["desiredNumberScheduled"] == 2
    spec = (await sim.api.get("pods", first["node-1"], NS))["spec"]
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}

    # A cordoned node keeps its daemon; a new node gets one; a removed node's Pod goes.
    await sim.cluster.cordon_node("node-1")
    await sim.cluster.add_node("node-3")
    grown = await eventually(lambda: on_nodes({"node-1", "node-2", "node-3"}), 15, "a Pod on the new node")
    assert grown["node-1"] == first["node-1"]
    await sim.cluster.remove_node("node-2")
    await eventually(lambda: on_nodes({"node-1", "node-3"}), 15, "no Pod for the removed node")

    # A node selector narrows the nodes; a template change replaces the Pods.
    await sim.api.patch("nodes", "node-3", {"metadata": {"labels": {"role": "edge"}}})
    await sim.api.patch("daemonsets.apps", "agent", {"spec": {"template": {"spec": {"nodeSelector": {
        "role": "edge"}}}}}, namespace=NS)
    replaced = await eventually(lambda: on_nodes({"node-3"}), 15, "the Pod of the edge node only")
    assert replaced["node-3"] != grown["node-3"]


async def test_host_path_volumes_are_the_nodes_directories(sim: KubeSim) -> None:
    assert sim.cluster is not None
    writer = container("writer", PAUSE, volumeMounts=[{"name": "node-data", "mountPath": "/data"}])
    volumes = [{"name": "node-data", "hostPath": {"path": "/srv/data", "type": "DirectoryOrCreate"}}]
    await sim.api.create("pods", pod("one", writer, nodeName="node-1", volumes=volumes), NS)
    await sim.api.create("pods", pod("two", writer, nodeName="node-2", volumes=volumes), NS)
    await ready_pod(sim.api, "one")
    await ready_pod(sim.api, "two")
    assert sim.cluster.node_filesystem("node-1").host_path("/srv/data").is_dir()
    assert sim.cluster.node_filesystem("node-1").host_path("/srv/data") != \
        sim.cluster.node_filesystem("node-2").host_path("/srv/data")
    # type Directory on a path the node does not have: FailedMount, as kubelet says it
    missing = [{"name": "node-data", "hostPath": {"path": "/var/lib/k0s/kubelet/pods/", "type": "Directory"}}]
    await sim.api.create("pods", pod("three", writer, nodeName="node-1", volumes=missing), NS)
    event = await wait_for_event(sim.api, NS, "FailedMount", "three")
    assert event["message"] == ('MountVolume.SetUp failed for volume "node-data" : hostPath type check failed: '
                                "/var/lib/k0s/kubelet/pods/ is not a directory")
