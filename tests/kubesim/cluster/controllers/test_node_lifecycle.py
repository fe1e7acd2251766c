"""Nodes that fail and come back, as on a real cluster, with the durations scaled down by configuration (a 1 s
grace period instead of 50 s, 2 s default tolerations instead of 300 s): kubelets renew Leases in kube-node-lease;
a stopped node turns Unknown once its grace period is over (not before), is tainted unreachable, its Pods turn not
Ready and are evicted when their tolerations run out (a ReplicaSet replaces its Pod on another node, a StatefulSet's
stays Terminating until the node returns or the Pod is force-deleted); the scheduler keeps new Pods off it;
started again, the node is Ready and untainted, its Pods run again and the volumes of those evicted meanwhile are
unpublished. ``kubesim node`` does the same from a shell."""

from __future__ import annotations

import asyncio
import datetime
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clusterhelpers import pod_ready, wait_for, wait_for_event
from traffichelpers import FAST_RESTARTS, NS, container, eventually, pod, refuses, short_state_dir

from kubesim.cluster.csi.testdriver import SimpleCsiDriver, deploy
from kubesim.sim import KubeSim
from kubesim.testing.patience import patience
from kubesim.testing.traffic import who_answers

KUBECTL = str(Path(sys.executable).parent / "kubectl")
# Scaled down (Kubernetes: 50 s and 300 s), and stretched on a loaded machine, so that heartbeats a busy event loop
# delays are never taken for a silent node.
GRACE = patience(1.0)
TOLERATION = max(2, round(patience(2.0)))
SCALED = {"node_lease_duration": 1.0, "node_lease_renew": 0.2, "node_monitor_grace": GRACE,
          "node_monitor_period": 0.2, "node_status_report": 5.0, "default_toleration_seconds": TOLERATION}


@pytest.fixture
async def cluster() -> AsyncIterator[KubeSim]:
    state = short_state_dir()
    try:
        async with KubeSim(nodes=2, state_dir=state, **SCALED, **FAST_RESTARTS) as sim:
            yield sim
    finally:
        shutil.rmtree(state, ignore_errors=True)


def ready_status(node: dict[str, Any] | None) -> str | None:
    for entry in (node or {}).get("status", {}).get("conditions") or []:
        if entry["type"] == "Ready":
            return str(entry["status"])
    return None


def taints(node: dict[str, Any] | None) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in (node or {}).get("spec", {}).get("taints") or []}


UNREACHABLE = {("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")}


async def kubectl(sim: KubeSim, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(sim.kubeconfig_path), *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), patience(60))
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_kubelets_renew_their_leases(cluster: KubeSim) -> None:
    first = await wait_for(cluster.api, "leases.coordination.k8s.io", "node-1", "kube-node-lease", bool)
    assert first is not None
    assert first["spec"]["holderIdentity"] == "node-1" and first["spec"]["leaseDurationSeconds"] == 1
    node = await cluster.api.get("nodes", "node-1")
    assert first["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "node-1",
                                                     "uid": node["metadata"]["uid"]}]
    renewed = await wait_for(cluster.api, "leases.coordination.k8s.io", "node-1", "kube-node-lease",
                             lambda lease: bool(lease) and lease["spec"]["renewTime"] > first["spec"]["renewTime"])
    assert renewed is not None
    out = await kubectl(cluster, "get", "leases", "-n", "kube-node-lease", "-o", "name")
    assert set(out.split()) == {"lease.coordination.k8s.io/node-1", "lease.coordination.k8s.io/node-2"}
    # a running node stays Ready through many grace periods
    await asyncio.sleep(3 * GRACE)  # three grace periods of heartbeats: the node must not be marked
    assert ready_status(await cluster.api.get("nodes", "node-1")) == "True"


async def test_a_stopped_node_turns_unknown_is_tainted_and_its_pods_are_evicted(cluster: KubeSim) -> None:
    api = cluster.api
    web = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
           "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                        "containers": [container(args=["serve-hostname", "--http"], ports=[9376])]}}}}
    await api.create("deployments.apps", web, NS)
    service = await api.create("services", {"apiVersion": "v1", "kind": "Service",
                                            "metadata": {"name": "web", "namespace": NS},
                                            "spec": {"type": "NodePort", "selector": {"app": "web"},
                                                     "ports": [{"port": 80, "targetPort": 9376}]}}, NS)
    node_port = service["spec"]["ports"][0]["nodePort"]
    node_1, node_2 = (cluster.address_block.node_internal_ip(i) for i in (1, 2))
    # one Pod that tolerates unreachable nodes for good, pinned to node-1 like the Deployment's Pod there
    patient = pod("patient", container(args=["serve-hostname"]), nodeName="node-1",
                  tolerations=[{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}])
    await api.create("pods", patient, NS)
    await wait_for(api, "pods", "patient", NS, pod_ready)
    pods = await _ready_web(cluster, 2)
    victim = next((p for p in pods if p["spec"]["nodeName"] == "node-1"), None)
    if victim is None:  # both landed on node-2: move one over
        await api.delete("pods", pods[0]["metadata"]["name"], NS)
        await api.patch("nodes", "node-2", {"spec": {"unschedulable": True}})
        pods = await _ready_web(cluster, 2)
        await api.patch("nodes", "node-2", {"spec": {"unschedulable": None}})
        victim = next(p for p in pods if p["spec"]["nodeName"] == "node-1")
    defaults = [t for t in victim["spec"]["tolerations"] if t.get("tolerationSeconds") == TOLERATION]
    assert {t["key"] for t in defaults} == {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    assert not [t for t in (await api.get("pods", "patient", NS))["spec"]["tolerations"]
                if t["key"] == "node.kubernetes.io/unreachable" and "tolerationSeconds" in t]

    assert await eventually(lambda: who_answers(node_1, node_port), what="the nodePort on node-1")

    await cluster.cluster.stop_node("node-1")
    assert await refuses(node_1, node_port)  # the node's kube-proxy went down with it
    assert (await eventually(lambda: who_answers(node_2, node_port), what="the nodePort on node-2")).startswith("web-")
    last_beat = (await api.get("leases.coordination.k8s.io", "node-1", "kube-node-lease"))["spec"]["renewTime"]
    unknown = await wait_for(api, "nodes", "node-1", None, lambda n: ready_status(n) == "Unknown", within=10)
    silent_for = (datetime.datetime.now(datetime.UTC) - datetime.datetime.fromisoformat(last_beat)).total_seconds()
    assert silent_for >= GRACE, f"marked Unknown {silent_for:.2f}s after the last heartbeat, before the grace period"
    ready = next(c for c in unknown["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["reason"], ready["message"]) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
    tainted = await wait_for(api, "nodes", "node-1", None, lambda n: taints(n) >= UNREACHABLE)
    assert all(t.get("timeAdded") for t in tainted["spec"]["taints"] if t["effect"] == "NoExecute")
    await wait_for_event(api, "default", "NodeNotReady", "node-1")
    table = await kubectl(cluster, "get", "node", "node-1")
    assert table.splitlines()[1].split()[1] == "NotReady"
    not_ready = await wait_for(api, "pods", victim["metadata"]["name"], NS, lambda p: bool(p) and not pod_ready(p))
    assert not_ready is not None

    # evicted once its toleration ran out: Terminating (its kubelet is gone), replaced on node-2
    evicted = await wait_for(api, "pods", victim["metadata"]["name"], NS,
                             lambda p: bool(p) and bool(p["metadata"].get("deletionTimestamp")), within=15)
    # not before the toleration ran out, counted from the taint's timeAdded (whole seconds, so never later than the
    # taint itself): the node went silent at its last heartbeat, so a bound from when the test stopped it (up to a
    # renewal period later) would be wrong by that much
    seen = datetime.datetime.now(datetime.UTC)
    added = next(datetime.datetime.fromisoformat(t["timeAdded"]) for t in tainted["spec"]["taints"]
                 if (t["key"], t["effect"]) == ("node.kubernetes.io/unreachable", "NoExecute"))
    assert (seen - added).total_seconds() >= TOLERATION, f"evicted {(seen - added).total_seconds():.2f}s after the taint"
    assert evicted["spec"]["nodeName"] == "node-1"
    await wait_for_event(api, NS, "TaintManagerEviction", victim["metadata"]["name"])
    replaced = await _ready_web(cluster, 2)
    assert all(p["spec"]["nodeName"] == "node-2" for p in replaced)
    assert (await api.get("pods", "patient", NS))["metadata"].get("deletionTimestamp") is None  # tolerated

    # new Pods stay off the tainted node
    await api.create("pods", pod("pinned", container(args=["serve-hostname"]),
                                 nodeSelector={"kubernetes.io/hostname": "node-1"}), NS)
    event = await wait_for_event(api, NS, "FailedScheduling", "pinned")
    assert "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }" in event["message"]

    # back: Ready, untainted, the evicted Pod's deletion finishes, the others run again
    await cluster.cluster.start_node("node-1")
    back = await wait_for(api, "nodes", "node-1", None, lambda n: ready_status(n) == "True" and not taints(n))
    assert back is not None
    await wait_for(api, "pods", victim["metadata"]["name"], NS, lambda p: p is None)
    running = await wait_for(api, "pods", "patient", NS, pod_ready)
    [status] = running["status"]["containerStatuses"]
    assert status["restartCount"] == 1 and status["lastState"]["terminated"]["reason"] == "Unknown"
    assert await who_answers(running["status"]["podIP"], 9376) == "patient"
    pinned = await wait_for(api, "pods", "pinned", NS, pod_ready)
    assert pinned["spec"]["nodeName"] == "node-1"


async def _ready_web(sim: KubeSim, count: int) -> list[dict[str, Any]]:
    async def ready() -> list[dict[str, Any]] | None:
        items, _ = await sim.api.list("pods", NS, label_selector="app=web")
        live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
        good = [p for p in live if pod_ready(p)]
        return good if len(good) == count and len(live) == count else None
    found: list[dict[str, Any]] = await eventually(ready, within=20, what=f"{count} ready web Pods")
    return found


async def test_a_stateful_pod_on_a_lost_node_waits_for_it_or_a_force_delete(cluster: KubeSim) -> None:
    api = cluster.api
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": NS},
           "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "db"}}, "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": "node-1"},
                        "containers": [container(args=["serve-hostname"])]}}}}
    await api.create("statefulsets.apps", sts, NS)
    first = await wait_for(api, "pods", "db-0", NS, pod_ready)
    await cluster.cluster.stop_node("node-1")
    terminating = await wait_for(api, "pods", "db-0", NS,
                                 lambda p: bool(p) and bool(p["metadata"].get("deletionTimestamp")), within=15)
    assert terminating["metadata"]["uid"] == first["metadata"]["uid"]
    # it stays Terminating (its kubelet is gone) and the StatefulSet does not make a second db-0
    await asyncio.sleep(3 * GRACE)  # long enough for a wrong replacement to appear
    still = await api.get("pods", "db-0", NS)
    assert still["metadata"]["uid"] == first["metadata"]["uid"] and still["metadata"].get("deletionTimestamp")
    table = await kubectl(cluster, "get", "pod", "db-0", "-n", NS)
    assert table.splitlines()[1].split()[2] == "Terminating"
    # a force delete lets the StatefulSet recreate it (here it waits for its node, the only one it fits)
    await kubectl(cluster, "delete", "pod", "db-0", "-n", NS, "--force", "--grace-period=0")
    recreated = await wait_for(api, "pods", "db-0", NS,
                               lambda p: bool(p) and p["metadata"]["uid"] != first["metadata"]["uid"])
    assert recreated is not None
    await cluster.cluster.start_node("node-1")
    running = await wait_for(api, "pods", "db-0", NS, pod_ready)
    assert running["spec"]["nodeName"] == "node-1"


async def test_kubesim_node_stops_and_starts_a_node_from_a_shell(cluster: KubeSim) -> None:
    async def node(*args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kubesim.cli.main", "node", *args, "--kubeconfig", str(cluster.kubeconfig_path),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), patience(60))
        return process.returncode or 0, out.decode(), err.decode()

    await cluster.api.create("pods", pod("one", container(args=["serve-hostname", "--http"], ports=[9376]),
                                         nodeName="node-2"), NS)
    served = await wait_for(cluster.api, "pods", "one", NS, pod_ready)
    assert await node("stop", "node-2") == (0, "node/node-2 stopped\n", "")
    assert await refuses(served["status"]["podIP"], 9376)  # its containers stopped with it
    code, out, _ = await node("list")
    assert code == 0 and out.split("\n")[:2] == ["node-1\trunning", "node-2\tstopped"]
    await wait_for(cluster.api, "nodes", "node-2", None, lambda n: ready_status(n) == "Unknown", within=10)
    assert await node("start", "node-2") == (0, "node/node-2 started\n", "")
    await wait_for(cluster.api, "nodes", "node-2", None, lambda n: ready_status(n) == "True" and not taints(n))
    back = await wait_for(cluster.api, "pods", "one", NS, pod_ready)
    assert await who_answers(back["status"]["podIP"], 9376) == "one"
    assert (await node("restart", "node-2"))[:2] == (0, "node/node-2 restarted\n")
    code, _, err = await node("stop", "node-9")
    assert code == 1 and 'nodes "node-9" not found' in err
    code, _, err = await node("stop")
    assert code == 2 and "needs the name of a node" in err
    assert cluster.cluster.node_states() == {"node-1": True, "node-2": True}


async def test_a_pod_evicted_while_its_node_was_down_has_its_volumes_unpublished_when_it_returns(
        cluster: KubeSim) -> None:
    driver = SimpleCsiDriver()
    await deploy(cluster.cluster, driver)
    try:
        volume = {"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": "sim", "resources": {"requests": {"storage": "1"}}}}}}
        await cluster.api.create("pods", pod("stateful", container(args=["serve-hostname"]), volumes=[volume],
                                             nodeSelector={"kubernetes.io/hostname": "node-1"}), NS)
        running = await wait_for(cluster.api, "pods", "stateful", NS, pod_ready)
        [published] = [c for c in driver.calls_of("NodePublishVolume") if running["metadata"]["uid"] in c.target_path]
        await cluster.cluster.stop_node("node-1")
        await wait_for(cluster.api, "pods", "stateful", NS,
                       lambda p: bool(p) and bool(p["metadata"].get("deletionTimestamp")), within=15)
        assert not driver.calls_of("NodeUnpublishVolume")  # nobody on the node to do it
        await cluster.cluster.start_node("node-1")
        await wait_for(cluster.api, "pods", "stateful", NS, lambda p: p is None)
        [unpublished] = driver.calls_of("NodeUnpublishVolume")
        assert (unpublished.volume_id, unpublished.target_path) == (published.volume_id, published.target_path)
    finally:
        await driver.stop()
