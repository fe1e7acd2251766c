"""Finer lifecycle behaviour: inline CSI volumes, Immediate binding, Retain, ordered start, no needless writes."""

from __future__ import annotations

import json
import shutil
from typing import Any

import grpc
from clusterhelpers import Env, pod_ready, short_state_dir, wait_for, wait_for_event
from test_statefulset_csi import statefulset

from kubesim.cluster.csi.testdriver import SimpleCsiDriver, deploy
from kubesim.sim import KubeSim

NS = "default"


def _pod(name: str, volumes: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}], "volumes": volumes, **spec},
    }


async def test_inline_csi_volume_is_published_as_ephemeral(env: Env) -> None:
    api = env.api
    inline = {"name": "inline", "csi": {"driver": env.driver.name, "volumeAttributes": {"size": "small"}}}
    await api.create("pods", _pod("inl", [inline], serviceAccountName="robot"), namespace=NS)
    running = await wait_for(api, "pods", "inl", NS, pod_ready)
    assert running is not None
    [request] = env.driver.calls_of("NodePublishVolume")
    assert request.volume_id.startswith("csi-")
    assert request.volume_context["size"] == "small"
    assert request.volume_context["csi.storage.k8s.io/ephemeral"] == "true"
    assert request.volume_context["csi.storage.k8s.io/serviceAccount.name"] == "robot"
    target = (
        env.cluster.kubelet_dir(running["spec"]["nodeName"])
        / "pods"
        / running["metadata"]["uid"]
        / "volumes"
        / "kubernetes.io~csi"
        / "inline"
        / "mount"
    )
    assert request.target_path == str(target)
    assert json.loads((target / "context.json").read_text())["volume_id"] == request.volume_id


async def test_inline_volume_of_a_persistent_only_driver_fails_to_mount(env: Env) -> None:
    api = env.api
    await api.patch(
        "csidrivers.storage.k8s.io", env.driver.name, {"spec": {"volumeLifecycleModes": ["Persistent"]}}
    )
    inline = {"name": "inline", "csi": {"driver": env.driver.name}}
    await api.create("pods", _pod("inl2", [inline]), namespace=NS)
    event = await wait_for_event(api, NS, "FailedMount", "inl2")
    assert 'volume mode "Ephemeral" not supported by driver' in event["message"]
    assert not pod_ready(await api.get("pods", "inl2", NS))


async def test_immediate_binding_provisions_first_and_pins_the_pod(env: Env) -> None:
    api = env.api
    await api.create(
        "storageclasses.storage.k8s.io",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "now"},
            "provisioner": env.driver.name,
            "volumeBindingMode": "Immediate",
            "reclaimPolicy": "Retain",
        },
    )
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "early", "namespace": NS},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "now",
            "resources": {"requests": {"storage": "5Mi"}},
        },
    }
    await api.create("persistentvolumeclaims", claim, namespace=NS)
    bound = await wait_for(
        api,
        "persistentvolumeclaims",
        "early",
        NS,
        lambda c: bool(c) and c.get("status", {}).get("phase") == "Bound",
    )
    assert bound is not None
    assert "volume.kubernetes.io/selected-node" not in bound["metadata"].get("annotations", {})
    [request] = env.driver.calls_of("CreateVolume")
    key = f"topology.{env.driver.name}/node"
    assert sorted(t.segments[key] for t in request.accessibility_requirements.requisite) == env.cluster.nodes
    pv = await api.get("persistentvolumes", bound["spec"]["volumeName"])
    pinned = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][
        0
    ]
    await api.create(
        "pods", _pod("user", [{"name": "d", "persistentVolumeClaim": {"claimName": "early"}}]), namespace=NS
    )
    running = await wait_for(api, "pods", "user", NS, pod_ready)
    assert running is not None and running["spec"]["nodeName"] == pinned

    # Retain: the claim goes, the PV stays Released and the driver keeps the volume
    await api.delete("pods", "user", NS)
    await wait_for(api, "pods", "user", NS, lambda p: p is None)
    await api.delete("persistentvolumeclaims", "early", NS)
    released = await wait_for(
        api,
        "persistentvolumes",
        pv["metadata"]["name"],
        None,
        lambda p: bool(p) and p.get("status", {}).get("phase") == "Released",
    )
    assert released is not None
    assert env.driver.calls_of("DeleteVolume") == []


async def test_ordered_ready_waits_for_the_previous_pod(env: Env) -> None:
    api = env.api
    env.driver.fail_node_publish(3, grpc.StatusCode.UNAVAILABLE, "not yet")
    await api.create("statefulsets.apps", statefulset("ord", 2), namespace=NS)
    event = await wait_for_event(api, NS, "FailedMount", "ord-0")
    assert "not yet" in event["message"]
    pods, _ = await api.list("pods", NS)
    assert [p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("ord-")] == ["ord-0"]
    await wait_for(
        api,
        "statefulsets.apps",
        "ord",
        NS,
        lambda s: bool(s) and s.get("status", {}).get("readyReplicas") == 2,
    )
    first = await api.get("pods", "ord-0", NS)
    second = await api.get("pods", "ord-1", NS)
    assert first["metadata"]["creationTimestamp"] <= second["metadata"]["creationTimestamp"]


async def test_running_pods_are_not_rewritten_without_a_change(env: Env) -> None:
    api = env.api
    await api.create("pods", _pod("steady", [{"name": "tmp", "emptyDir": {}}]), namespace=NS)
    running = await wait_for(api, "pods", "steady", NS, pod_ready)
    assert running is not None
    version = running["metadata"]["resourceVersion"]
    # unrelated changes make every kubelet re-examine its Pods; nothing about this Pod changed
    for index in range(3):
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"noise-{index}", "namespace": NS},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "sim",
                "resources": {"requests": {"storage": "1"}},
            },
        }
        await api.create("persistentvolumeclaims", claim, namespace=NS)
    # a Pod created afterwards going Running proves the kubelets processed the noise before it
    await api.create("pods", _pod("marker", [], nodeName=running["spec"]["nodeName"]), namespace=NS)
    await wait_for(api, "pods", "marker", NS, pod_ready)
    assert (await api.get("pods", "steady", NS))["metadata"]["resourceVersion"] == version


async def test_namespace_deletion_unpublishes_and_removes_pods(env: Env) -> None:
    api = env.api
    await api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    volume = {
        "name": "v",
        "ephemeral": {
            "volumeClaimTemplate": {
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "sim",
                    "resources": {"requests": {"storage": "1"}},
                }
            }
        },
    }
    pod = _pod("worker", [volume])
    pod["metadata"]["namespace"] = "team"
    await api.create("pods", pod, namespace="team")
    running = await wait_for(api, "pods", "worker", "team", pod_ready)
    assert running is not None
    assert "kubesim.io/kubelet" in running["metadata"]["finalizers"]
    await api.delete("namespaces", "team")
    await wait_for(api, "namespaces", "team", None, lambda n: n is None)
    assert [r.volume_id for r in env.driver.calls_of("NodeUnpublishVolume")] == [
        r.volume_id for r in env.driver.calls_of("NodePublishVolume")
    ]


async def test_statefulset_template_change_rolls_pods_from_the_highest_ordinal(env: Env) -> None:
    api = env.api
    await api.create("statefulsets.apps", statefulset("roll", 3), namespace=NS)
    await wait_for(
        api,
        "statefulsets.apps",
        "roll",
        NS,
        lambda s: bool(s) and s.get("status", {}).get("readyReplicas") == 3,
    )
    before = {o: await api.get("pods", f"roll-{o}", NS) for o in range(3)}
    old_revision = (await api.get("statefulsets.apps", "roll", NS))["status"]["updateRevision"]
    patch = {"spec": {"template": {"metadata": {"labels": {"app": "roll", "version": "2"}}}}}
    await api.patch("statefulsets.apps", "roll", patch, namespace=NS)
    done = await wait_for(
        api,
        "statefulsets.apps",
        "roll",
        NS,
        lambda s: (
            bool(s)
            and s.get("status", {}).get("updateRevision") not in (None, old_revision)
            and s["status"].get("updatedReplicas") == 3
            and s["status"].get("readyReplicas") == 3
            and s["status"].get("currentRevision") == s["status"].get("updateRevision")
        ),
    )
    assert done is not None
    after = {o: await api.get("pods", f"roll-{o}", NS) for o in range(3)}
    for ordinal in range(3):
        assert after[ordinal]["metadata"]["uid"] != before[ordinal]["metadata"]["uid"]
        assert after[ordinal]["metadata"]["labels"]["version"] == "2"
        assert after[ordinal]["spec"]["nodeName"] == before[ordinal]["spec"]["nodeName"]
    # replaced one at a time from the top: roll-2 first, roll-0 last
    created = [after[o]["metadata"]["creationTimestamp"] for o in (2, 1, 0)]
    assert created == sorted(created)
    unpublished = [r.target_path for r in env.driver.calls_of("NodeUnpublishVolume")]
    order = [
        next(i for i, p in enumerate(unpublished) if before[o]["metadata"]["uid"] in p) for o in (2, 1, 0)
    ]
    assert order == sorted(order)


async def test_kubelet_waits_for_a_claim_through_watches_not_retries() -> None:
    """A Pod bound by ``nodeName`` to a claim that does not exist yet starts as soon as the claim is bound. The
    mount backoff is far longer than the test's timeout, so only watch events can bring the kubelet back."""
    state = short_state_dir()
    driver = SimpleCsiDriver()
    slow_retries = {"mount_backoff": (60.0, 60.0), "provision_backoff": (60.0, 60.0)}
    try:
        async with KubeSim(nodes=2, state_dir=state, tls=False, **slow_retries) as sim:
            assert sim.cluster is not None
            await deploy(sim.cluster, driver, binding_mode="Immediate")
            claim_source = {"name": "d", "persistentVolumeClaim": {"claimName": "late"}}
            await sim.api.create("pods", _pod("early", [claim_source], nodeName="node-2"), namespace=NS)
            await wait_for(
                sim.api,
                "pods",
                "early",
                NS,
                lambda p: bool(p) and "kubesim.io/kubelet" in (p["metadata"].get("finalizers") or []),
            )
            claim = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "late", "namespace": NS},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "sim",
                    "resources": {"requests": {"storage": "1"}},
                },
            }
            await sim.api.create("persistentvolumeclaims", claim, namespace=NS)
            running = await wait_for(sim.api, "pods", "early", NS, pod_ready)
            assert running is not None and running["spec"]["nodeName"] == "node-2"
            [publish] = driver.calls_of("NodePublishVolume")
            assert "/node-2/pods/" in publish.target_path
    finally:
        await driver.stop()
        shutil.rmtree(state, ignore_errors=True)
