"""What kubelet and the external-provisioner send to a driver: access modes and mount group per driver
capabilities, StorageClass parameters, fsType and mount options."""

from __future__ import annotations

from typing import Any

from clusterhelpers import Env, pod_ready, wait_for, wait_for_event

from csi_proto import csi_pb2
from kubesim.cluster.csi.testdriver import SimpleCsiDriver, deploy

NS = "default"
MODE = csi_pb2.VolumeCapability.AccessMode


def claim(name: str, storage_class: str, access_modes: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "accessModes": access_modes,
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }


def pod(name: str, claim_name: str, fs_group: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}],
    }
    if fs_group is not None:
        spec["securityContext"] = {"fsGroup": fs_group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


async def run_pod(
    env: Env, name: str, storage_class: str, modes: list[str], fs_group: int | None = None
) -> str:
    """Start a Pod on a new claim; returns the PV name once the Pod is Running and Ready."""
    await env.api.create("persistentvolumeclaims", claim(f"{name}-data", storage_class, modes), namespace=NS)
    await env.api.create("pods", pod(name, f"{name}-data", fs_group), namespace=NS)
    await wait_for(env.api, "pods", name, NS, pod_ready)
    pvc = await env.api.get("persistentvolumeclaims", f"{name}-data", NS)
    return str(pvc["spec"]["volumeName"])


def create_modes(driver: SimpleCsiDriver, pv_name: str) -> list[int]:
    [request] = [r for r in driver.calls_of("CreateVolume") if r.name == pv_name]
    return [c.access_mode.mode for c in request.volume_capabilities]


def publish_capability(driver: SimpleCsiDriver, pv_name: str) -> Any:
    [request] = [r for r in driver.calls_of("NodePublishVolume") if r.volume_id == pv_name]
    return request.volume_capability


async def test_single_node_modes_without_the_multi_writer_capability(env: Env) -> None:
    rwo = await run_pod(env, "rwo", "sim", ["ReadWriteOnce"], fs_group=2000)
    assert create_modes(env.driver, rwo) == [MODE.SINGLE_NODE_WRITER]
    capability = publish_capability(env.driver, rwo)
    assert capability.access_mode.mode == MODE.SINGLE_NODE_WRITER
    assert capability.mount.volume_mount_group == ""  # the driver does not offer VOLUME_MOUNT_GROUP

    rwop = await run_pod(env, "rwop", "sim", ["ReadWriteOncePod"])
    assert create_modes(env.driver, rwop) == [MODE.SINGLE_NODE_WRITER]
    assert publish_capability(env.driver, rwop).access_mode.mode == MODE.SINGLE_NODE_WRITER


async def test_multi_writer_capable_driver_gets_the_precise_modes_and_the_fs_group(env: Env) -> None:
    driver = SimpleCsiDriver("snmw.csi.kubesim.io", single_node_multi_writer=True, volume_mount_group=True)
    try:
        await deploy(env.cluster, driver, storage_class="snmw")

        rwop = await run_pod(env, "rwop", "snmw", ["ReadWriteOncePod"], fs_group=2000)
        assert create_modes(driver, rwop) == [MODE.SINGLE_NODE_SINGLE_WRITER]
        capability = publish_capability(driver, rwop)
        assert capability.access_mode.mode == MODE.SINGLE_NODE_SINGLE_WRITER
        assert capability.mount.volume_mount_group == "2000"

        rwo = await run_pod(env, "rwo", "snmw", ["ReadWriteOnce"])
        assert create_modes(driver, rwo) == [MODE.SINGLE_NODE_MULTI_WRITER]
        capability = publish_capability(driver, rwo)
        assert capability.access_mode.mode == MODE.SINGLE_NODE_MULTI_WRITER
        assert capability.mount.volume_mount_group == ""  # no fsGroup on this Pod

        # the provisioner sends one capability per claim mode; kubelet publishes with the PV's first mode
        many = await run_pod(env, "many", "snmw", ["ReadOnlyMany", "ReadWriteMany"])
        assert create_modes(driver, many) == [MODE.MULTI_NODE_READER_ONLY, MODE.MULTI_NODE_MULTI_WRITER]
        assert publish_capability(driver, many).access_mode.mode == MODE.MULTI_NODE_READER_ONLY
    finally:
        await driver.stop()


async def test_class_parameters_fs_type_and_mount_options_reach_the_driver(env: Env) -> None:
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "tuned"},
        "provisioner": env.driver.name,
        "volumeBindingMode": "WaitForFirstConsumer",
        "parameters": {
            "tier": "gold",
            "csi.storage.k8s.io/fstype": "xfs",
            "csi.storage.k8s.io/provisioner-secret-name": "creds",
        },
        "mountOptions": ["noatime"],
    }
    await env.api.create("storageclasses.storage.k8s.io", storage_class)
    pv_name = await run_pod(env, "tuned", "tuned", ["ReadWriteOnce"])
    [create] = [r for r in env.driver.calls_of("CreateVolume") if r.name == pv_name]
    assert dict(create.parameters) == {
        "tier": "gold",
        "csi.storage.k8s.io/pvc/name": "tuned-data",
        "csi.storage.k8s.io/pvc/namespace": NS,
        "csi.storage.k8s.io/pv/name": pv_name,
    }
    [capability] = create.volume_capabilities
    assert capability.mount.fs_type == "xfs"
    assert list(capability.mount.mount_flags) == ["noatime"]
    pv = await env.api.get("persistentvolumes", pv_name)
    assert pv["spec"]["csi"]["fsType"] == "xfs"
    assert pv["spec"]["mountOptions"] == ["noatime"]
    assert pv["spec"]["csi"]["volumeAttributes"]["tier"] == "gold"  # the driver's volume_context
    published = publish_capability(env.driver, pv_name)
    assert published.mount.fs_type == "xfs"
    assert list(published.mount.mount_flags) == ["noatime"]

    # a key the sidecar does not know in its reserved namespace is a configuration error, reported on the claim
    storage_class["metadata"]["name"] = "broken"
    storage_class["parameters"] = {"csi.storage.k8s.io/typo": "x"}
    await env.api.create("storageclasses.storage.k8s.io", storage_class)
    await env.api.create(
        "persistentvolumeclaims", claim("broken-data", "broken", ["ReadWriteOnce"]), namespace=NS
    )
    await env.api.create("pods", pod("broken", "broken-data"), namespace=NS)
    event = await wait_for_event(env.api, NS, "ProvisioningFailed", "broken-data")
    assert "csi.storage.k8s.io/typo" in event["message"]
    assert not [
        r
        for r in env.driver.calls_of("CreateVolume")
        if r.parameters.get("csi.storage.k8s.io/pvc/name") == "broken-data"
    ]
