"""Scheduling: PV node affinity, removed and cordoned nodes, selectors, failed nodes."""

from __future__ import annotations

from typing import Any

from clusterhelpers import Env, pod_ready, wait_for, wait_for_event
from test_statefulset_csi import statefulset

NS = "default"


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}], **spec},
    }


def scheduled_false(message_part: str) -> Any:
    def check(obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        for cond in obj.get("status", {}).get("conditions") or []:
            if (
                cond["type"] == "PodScheduled"
                and cond["status"] == "False"
                and message_part in cond.get("message", "")
            ):
                return True
        return False

    return check


async def test_recreated_pod_returns_to_the_node_of_its_volume(env: Env) -> None:
    api = env.api
    await api.create("statefulsets.apps", statefulset("db", 3), namespace=NS)
    await wait_for(
        api,
        "statefulsets.apps",
        "db",
        NS,
        lambda s: bool(s) and s.get("status", {}).get("readyReplicas") == 3,
    )
    before = await api.get("pods", "db-1", NS)
    node = before["spec"]["nodeName"]
    await api.delete("pods", "db-1", NS)
    after = await wait_for(
        api, "pods", "db-1", NS, lambda p: pod_ready(p) and p["metadata"]["uid"] != before["metadata"]["uid"]
    )
    assert after is not None
    assert after["spec"]["nodeName"] == node
    # the old Pod's volume was unpublished and its directory removed
    old_dir = env.cluster.kubelet_dir(node) / "pods" / before["metadata"]["uid"]
    assert not old_dir.exists()
    unpublished = [r.target_path for r in env.driver.calls_of("NodeUnpublishVolume")]
    assert any(before["metadata"]["uid"] in path for path in unpublished)


async def test_pod_pinned_to_removed_node_stays_pending_with_event(env: Env) -> None:
    api = env.api
    await api.create("statefulsets.apps", statefulset("kafka", 3), namespace=NS)
    await wait_for(
        api,
        "statefulsets.apps",
        "kafka",
        NS,
        lambda s: bool(s) and s.get("status", {}).get("readyReplicas") == 3,
    )
    victim = await api.get("pods", "kafka-2", NS)
    node = victim["spec"]["nodeName"]
    await env.cluster.remove_node(node)
    assert node not in env.cluster.nodes
    pending = await wait_for(
        api,
        "pods",
        "kafka-2",
        NS,
        lambda p: (
            p is not None
            and p["metadata"]["uid"] != victim["metadata"]["uid"]
            and scheduled_false("volume node affinity conflict")(p)
        ),
    )
    assert pending is not None
    assert not pending["spec"].get("nodeName")
    assert pending["status"]["phase"] == "Pending"
    event = await wait_for_event(api, NS, "FailedScheduling", "kafka-2")
    assert event["type"] == "Warning"
    assert "0/2 nodes are available: 2 node(s) had volume node affinity conflict." == event["message"]
    # the Node and its CSINode are gone
    nodes, _ = await api.list("nodes")
    assert node not in {n["metadata"]["name"] for n in nodes}


async def test_node_name_selector_and_affinity(env: Env) -> None:
    api = env.api
    target = env.cluster.nodes[1]
    await api.create("pods", pod("selected", nodeSelector={"kubernetes.io/hostname": target}), namespace=NS)
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [target]}
                        ]
                    }
                ]
            }
        }
    }
    await api.create("pods", pod("affine", affinity=affinity), namespace=NS)
    for name in ("selected", "affine"):
        running = await wait_for(api, "pods", name, NS, pod_ready)
        assert running is not None and running["spec"]["nodeName"] == target

    await api.create("pods", pod("nowhere", nodeSelector={"disk": "ssd"}), namespace=NS)
    await wait_for(api, "pods", "nowhere", NS, scheduled_false("didn't match Pod's node affinity/selector"))
    event = await wait_for_event(api, NS, "FailedScheduling", "nowhere")
    assert event["message"] == "0/3 nodes are available: 3 didn't match Pod's node affinity/selector."
    # a node that gains the label lets the Pod run
    await api.patch("nodes", target, {"metadata": {"labels": {"disk": "ssd"}}})
    running = await wait_for(api, "pods", "nowhere", NS, pod_ready)
    assert running is not None and running["spec"]["nodeName"] == target


async def test_cordoned_and_failed_nodes_get_no_pods(env: Env) -> None:
    api = env.api
    first, second, third = env.cluster.nodes
    await env.cluster.cordon_node(first)
    await env.cluster.fail_node(second)
    failed = await api.get("nodes", second)
    ready = next(c for c in failed["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    cordoned = await api.get("nodes", first)
    assert cordoned["spec"]["unschedulable"] is True
    for index in range(3):
        await api.create("pods", pod(f"p{index}"), namespace=NS)
    for index in range(3):
        running = await wait_for(api, "pods", f"p{index}", NS, pod_ready)
        assert running is not None and running["spec"]["nodeName"] == third
    await env.cluster.uncordon_node(first)
    await api.create("pods", pod("after-uncordon"), namespace=NS)
    running = await wait_for(api, "pods", "after-uncordon", NS, pod_ready)
    assert running is not None and running["spec"]["nodeName"] == first


async def test_failing_a_node_makes_its_pods_not_ready(env: Env) -> None:
    api = env.api
    node = env.cluster.nodes[0]
    await api.create("pods", pod("victim", nodeName=node), namespace=NS)
    await wait_for(api, "pods", "victim", NS, pod_ready)
    await env.cluster.fail_node(node)
    not_ready = await wait_for(api, "pods", "victim", NS, lambda p: p is not None and not pod_ready(p))
    assert not_ready is not None and not_ready["spec"]["nodeName"] == node
