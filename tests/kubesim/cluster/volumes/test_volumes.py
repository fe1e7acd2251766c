"""Volumes: generic ephemeral claims, provisioning and mount failures, reclaiming, claim lifetimes."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

import grpc
from clusterhelpers import FAST_RETRIES, Env, pod_ready, short_state_dir, wait_for, wait_for_event
from test_statefulset_csi import statefulset

from kubesim.cluster.csi.testdriver import SimpleCsiDriver, deploy
from kubesim.sim import KubeSim

NS = "default"


def ephemeral_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}],
            "volumes": [
                {
                    "name": "scratch",
                    "ephemeral": {
                        "volumeClaimTemplate": {
                            "metadata": {"labels": {"role": "scratch"}},
                            "spec": {
                                "accessModes": ["ReadWriteMany"],
                                "storageClassName": "sim",
                                "resources": {"requests": {"storage": "1"}},
                            },
                        }
                    },
                }
            ],
        },
    }


async def test_ephemeral_claim_lives_and_dies_with_its_pod(env: Env) -> None:
    api = env.api
    await api.create("pods", ephemeral_pod("eph"), namespace=NS)
    running = await wait_for(api, "pods", "eph", NS, pod_ready)
    assert running is not None
    pvc = await api.get("persistentvolumeclaims", "eph-scratch", NS)
    [owner] = pvc["metadata"]["ownerReferences"]
    assert (
        owner["kind"] == "Pod" and owner["uid"] == running["metadata"]["uid"] and owner["controller"] is True
    )
    assert pvc["metadata"]["labels"] == {"role": "scratch"}
    pv_name = pvc["spec"]["volumeName"]
    [publish] = [r for r in env.driver.calls_of("NodePublishVolume") if r.volume_id == pv_name]
    assert publish.volume_context["csi.storage.k8s.io/ephemeral"] == "false"
    assert publish.volume_capability.access_mode.mode == 5  # MULTI_NODE_MULTI_WRITER

    await api.delete("pods", "eph", NS)
    await wait_for(api, "pods", "eph", NS, lambda p: p is None)
    await wait_for(api, "persistentvolumeclaims", "eph-scratch", NS, lambda p: p is None)
    await wait_for(api, "persistentvolumes", pv_name, None, lambda p: p is None)
    assert [r.volume_id for r in env.driver.calls_of("DeleteVolume")] == [pv_name]
    assert [r.volume_id for r in env.driver.calls_of("NodeUnpublishVolume")] == [pv_name]


async def test_create_volume_failures_are_retried_and_reported(env: Env) -> None:
    api = env.api
    env.driver.fail_create_volume(2, grpc.StatusCode.UNAVAILABLE, "backend is warming up")
    await api.create("pods", ephemeral_pod("retry"), namespace=NS)
    running = await wait_for(api, "pods", "retry", NS, pod_ready)
    assert running is not None
    event = await wait_for_event(api, NS, "ProvisioningFailed", "retry-scratch")
    assert event["type"] == "Warning"
    assert event["message"] == (
        'failed to provision volume with StorageClass "sim": rpc error: code = Unavailable desc = backend is warming up'
    )
    assert event["count"] == 2
    assert len(env.driver.calls_of("CreateVolume")) >= 3
    pvc = await api.get("persistentvolumeclaims", "retry-scratch", NS)
    assert pvc["status"]["phase"] == "Bound"


async def test_node_publish_failures_become_failed_mount_events(env: Env) -> None:
    api = env.api
    env.driver.fail_node_publish(1, grpc.StatusCode.UNAVAILABLE, "listener has no addresses yet")
    await api.create("pods", ephemeral_pod("mnt"), namespace=NS)
    running = await wait_for(api, "pods", "mnt", NS, pod_ready)
    assert running is not None
    event = await wait_for_event(api, NS, "FailedMount", "mnt")
    pv_name = (await api.get("persistentvolumeclaims", "mnt-scratch", NS))["spec"]["volumeName"]
    assert event["message"] == (
        f'MountVolume.SetUp failed for volume "{pv_name}" : '
        "rpc error: code = Unavailable desc = listener has no addresses yet"
    )
    assert event["source"]["host"] == running["spec"]["nodeName"]


async def test_statefulset_claims_outlive_pods_and_scale_down(env: Env) -> None:
    api = env.api
    await api.create("statefulsets.apps", statefulset("zk", 3), namespace=NS)
    await wait_for(
        api,
        "statefulsets.apps",
        "zk",
        NS,
        lambda s: bool(s) and s.get("status", {}).get("readyReplicas") == 3,
    )
    await api.patch("statefulsets.apps", "zk", {"spec": {"replicas": 1}}, namespace=NS)
    await wait_for(api, "pods", "zk-2", NS, lambda p: p is None)
    await wait_for(api, "pods", "zk-1", NS, lambda p: p is None)
    sts = await wait_for(
        api, "statefulsets.apps", "zk", NS, lambda s: bool(s) and s.get("status", {}).get("replicas") == 1
    )
    assert sts is not None and sts["status"]["readyReplicas"] == 1
    for ordinal in range(3):
        pvc = await api.get("persistentvolumeclaims", f"data-zk-{ordinal}", NS)
        assert pvc["status"]["phase"] == "Bound"
        assert pvc["metadata"]["annotations"]["example.com/note"] == "kept"
        assert pvc["metadata"]["labels"] == {"app": "zk"}
    await api.delete("statefulsets.apps", "zk", NS)
    await wait_for(api, "pods", "zk-0", NS, lambda p: p is None)
    claims, _ = await api.list("persistentvolumeclaims", NS)
    assert {c["metadata"]["name"] for c in claims} >= {"data-zk-0", "data-zk-1", "data-zk-2"}

    # deleting a claim with reclaim policy Delete removes the volume through the driver
    pv_name = (await api.get("persistentvolumeclaims", "data-zk-2", NS))["spec"]["volumeName"]
    await api.delete("persistentvolumeclaims", "data-zk-2", NS)
    await wait_for(api, "persistentvolumes", pv_name, None, lambda p: p is None)
    assert pv_name in [r.volume_id for r in env.driver.calls_of("DeleteVolume")]
    assert pv_name not in env.driver.state.volumes


async def test_statefulset_claim_retention_policy_delete(env: Env) -> None:
    """whenScaled: Delete removes the claims of scaled-down Pods; whenDeleted: Delete removes the rest with the set."""
    api = env.api
    body = statefulset("kafka", 3)
    body["spec"]["persistentVolumeClaimRetentionPolicy"] = {"whenScaled": "Delete", "whenDeleted": "Delete"}
    await api.create("statefulsets.apps", body, namespace=NS)
    sts = await wait_for(
        api,
        "statefulsets.apps",
        "kafka",
        NS,
        lambda s: bool(s) and s.get("status", {}).get("readyReplicas") == 3,
    )
    assert sts is not None
    for ordinal in range(3):
        pvc = await api.get("persistentvolumeclaims", f"data-kafka-{ordinal}", NS)
        assert [(r["kind"], r["uid"]) for r in pvc["metadata"]["ownerReferences"]] == [
            ("StatefulSet", sts["metadata"]["uid"])
        ]
    scaled_pv = (await api.get("persistentvolumeclaims", "data-kafka-2", NS))["spec"]["volumeName"]

    await api.patch("statefulsets.apps", "kafka", {"spec": {"replicas": 2}}, namespace=NS)
    await wait_for(api, "persistentvolumeclaims", "data-kafka-2", NS, lambda c: c is None)
    await wait_for(api, "persistentvolumes", scaled_pv, None, lambda p: p is None)
    assert scaled_pv in [r.volume_id for r in env.driver.calls_of("DeleteVolume")]
    for ordinal in range(2):  # Pods in range keep their claims
        pvc = await api.get("persistentvolumeclaims", f"data-kafka-{ordinal}", NS)
        assert pvc["status"]["phase"] == "Bound"

    await api.delete("statefulsets.apps", "kafka", NS)
    for ordinal in range(2):
        await wait_for(api, "persistentvolumeclaims", f"data-kafka-{ordinal}", NS, lambda c: c is None)


async def test_statefulset_claim_retention_when_scaled_only(env: Env) -> None:
    """whenScaled: Delete alone: the set never owns the claims, so they outlive it; scaled-down ones go."""
    api = env.api
    body = statefulset("nifi", 2)
    body["spec"]["persistentVolumeClaimRetentionPolicy"] = {"whenScaled": "Delete", "whenDeleted": "Retain"}
    await api.create("statefulsets.apps", body, namespace=NS)
    await wait_for(
        api,
        "statefulsets.apps",
        "nifi",
        NS,
        lambda s: bool(s) and s.get("status", {}).get("readyReplicas") == 2,
    )
    assert "ownerReferences" not in (await api.get("persistentvolumeclaims", "data-nifi-1", NS))["metadata"]
    await api.patch("statefulsets.apps", "nifi", {"spec": {"replicas": 1}}, namespace=NS)
    await wait_for(api, "persistentvolumeclaims", "data-nifi-1", NS, lambda c: c is None)
    await api.delete("statefulsets.apps", "nifi", NS)
    await wait_for(api, "pods", "nifi-0", NS, lambda p: p is None)
    kept = await api.get("persistentvolumeclaims", "data-nifi-0", NS)
    assert kept["status"]["phase"] == "Bound"


async def test_claim_for_unregistered_driver_waits(env: Env) -> None:
    api = env.api
    await api.create(
        "storageclasses.storage.k8s.io",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "other"},
            "provisioner": "other.example.com",
            "volumeBindingMode": "Immediate",
        },
    )
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "waiting", "namespace": NS},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "other",
            "resources": {"requests": {"storage": "1"}},
        },
    }
    await api.create("persistentvolumeclaims", claim, namespace=NS)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "user", "namespace": NS},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "waiting"}}],
        },
    }
    await api.create("pods", pod, namespace=NS)
    event = await wait_for_event(api, NS, "FailedScheduling", "user")
    assert "pod has unbound immediate PersistentVolumeClaims" in event["message"]
    assert (await api.get("persistentvolumeclaims", "waiting", NS)).get("status", {}).get("phase") != "Bound"


async def test_a_pod_whose_claim_fails_to_provision_shows_the_claims_error(tmp_path: Any) -> None:
    """Not the stale "waiting for ephemeral volume controller" message: the Pod says which claim failed and why
    (kube-scheduler's VolumeBinding PreBind error), as kubectl describe shows it (TLS: kubectl sends its token)."""
    state = short_state_dir()
    driver = SimpleCsiDriver()
    try:
        async with KubeSim(nodes=1, state_dir=state, **FAST_RETRIES) as sim:
            assert sim.cluster is not None
            await deploy(sim.cluster, driver)
            driver.fail_create_volume(1000, grpc.StatusCode.INVALID_ARGUMENT, "annotation x is not valid")
            await sim.api.create("pods", ephemeral_pod("broken"), namespace=NS)
            expected = ('running PreBind plugin "VolumeBinding": binding volumes: provisioning failed for PVC '
                        '"broken-scratch": rpc error: code = InvalidArgument desc = annotation x is not valid')

            def says_why(pod: Any) -> bool:
                conditions = (pod or {}).get("status", {}).get("conditions") or []
                return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message") == expected
                           for c in conditions)

            pending = await wait_for(sim.api, "pods", "broken", NS, says_why)
            assert pending is not None and pending["status"]["phase"] == "Pending"
            kubectl = Path(sys.executable).parent / "kubectl"
            proc = await asyncio.create_subprocess_exec(
                str(kubectl), "--kubeconfig", str(sim.kubeconfig_path), "--cache-dir", str(tmp_path / "cache"),
                "describe", "pod", "broken", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, err.decode()
            described = " ".join(out.decode().split())
            assert 'FailedScheduling' in described and 'provisioning failed for PVC "broken-scratch"' in described
            assert "annotation x is not valid" in described, described
            await driver.stop()
    finally:
        await driver.stop()
        shutil.rmtree(state, ignore_errors=True)
