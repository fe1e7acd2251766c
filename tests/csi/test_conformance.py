"""csi-sanity style checks that need no Kubernetes objects: identity, capabilities, required fields, refusals.

The API server behind this endpoint is unreachable, so every refusal asserted here happened before any API call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import grpc
import pytest
from csi_support import BLOCK, MOUNT, NODE_NAME, POD_INFO, CsiEndpoint, expect_code

from csi_proto import csi_pb2
from listener_operator.constants import (
    ANNOTATION_LISTENER_CLASS,
    ANNOTATION_LISTENER_NAME,
    TOPOLOGY_KEY_HOSTNAME,
)

# -- Identity ------------------------------------------------------------------------------------------------------

async def test_plugin_info(offline_csi: CsiEndpoint) -> None:
    info = await offline_csi.identity.GetPluginInfo(csi_pb2.GetPluginInfoRequest())
    assert info.name == "listeners.stackable.tech"
    assert info.vendor_version


async def test_plugin_capabilities_match_served_services(offline_csi: CsiEndpoint) -> None:
    response = await offline_csi.identity.GetPluginCapabilities(csi_pb2.GetPluginCapabilitiesRequest())
    kinds = {c.service.type for c in response.capabilities}
    service = csi_pb2.PluginCapability.Service
    assert kinds == {service.CONTROLLER_SERVICE, service.VOLUME_ACCESSIBILITY_CONSTRAINTS}
    # the advertised controller service answers
    await offline_csi.controller.ControllerGetCapabilities(csi_pb2.ControllerGetCapabilitiesRequest())


async def test_probe(offline_csi: CsiEndpoint) -> None:
    response = await offline_csi.identity.Probe(csi_pb2.ProbeRequest())
    assert response.ready.value is True


# -- Controller ----------------------------------------------------------------------------------------------------

async def test_controller_capabilities_are_create_delete_only(offline_csi: CsiEndpoint) -> None:
    response = await offline_csi.controller.ControllerGetCapabilities(csi_pb2.ControllerGetCapabilitiesRequest())
    rpc = csi_pb2.ControllerServiceCapability.RPC
    assert [c.rpc.type for c in response.capabilities] == [rpc.CREATE_DELETE_VOLUME]


@pytest.mark.parametrize("method", ["ControllerPublishVolume", "ControllerUnpublishVolume", "ListVolumes",
                                    "GetCapacity"])
async def test_unadvertised_controller_rpcs_are_unimplemented(offline_csi: CsiEndpoint, method: str) -> None:
    request_type = getattr(csi_pb2, f"{method}Request")
    await expect_code(getattr(offline_csi.controller, method)(request_type()), grpc.StatusCode.UNIMPLEMENTED)


@pytest.mark.parametrize(("request_fields", "code", "needle"), [
    ({"volume_capabilities": [MOUNT]}, grpc.StatusCode.INVALID_ARGUMENT, "volume_id is required"),
    ({"volume_id": "pvc-1"}, grpc.StatusCode.INVALID_ARGUMENT, "volume_capabilities is required"),
    ({"volume_id": "../etc", "volume_capabilities": [MOUNT]}, grpc.StatusCode.NOT_FOUND,
     "volume '../etc' does not exist: volume ids of this driver are PersistentVolume names"),
    ({"volume_id": "Pvc_1", "volume_capabilities": [BLOCK]}, grpc.StatusCode.NOT_FOUND, "does not exist"),
])
async def test_validate_volume_capabilities_refusals(offline_csi: CsiEndpoint, request_fields: Mapping[str, object],
                                                     code: grpc.StatusCode, needle: str) -> None:
    """The spec's codes for what needs no volume lookup: missing fields, ids that cannot name a volume."""
    request = csi_pb2.ValidateVolumeCapabilitiesRequest(**request_fields)
    details = await expect_code(offline_csi.controller.ValidateVolumeCapabilities(request), code)
    assert needle in details


@pytest.mark.parametrize(("request_fields", "needle"), [
    ({"volume_capabilities": [MOUNT], "parameters": {"csi.storage.k8s.io/pvc/name": "p",
                                                     "csi.storage.k8s.io/pvc/namespace": "n"}}, "name"),
    ({"name": "pvc-1", "parameters": {"csi.storage.k8s.io/pvc/name": "p",
                                      "csi.storage.k8s.io/pvc/namespace": "n"}}, "volume_capabilities"),
    ({"name": "pvc-1", "volume_capabilities": [MOUNT]}, "csi.storage.k8s.io/pvc/name"),
    ({"name": "pvc-1", "volume_capabilities": [MOUNT], "parameters": {"csi.storage.k8s.io/pvc/name": "p"}},
     "csi.storage.k8s.io/pvc/namespace"),
    ({"name": "pvc-1", "volume_capabilities": [BLOCK], "parameters": {"csi.storage.k8s.io/pvc/name": "p",
                                                                      "csi.storage.k8s.io/pvc/namespace": "n"}},
     "block volumes are not supported"),
    ({"name": "pvc-1", "volume_capabilities": [MOUNT], "parameters": {"csi.storage.k8s.io/pvc/name": "../x",
                                                                      "csi.storage.k8s.io/pvc/namespace": "n"}},
     "not a valid PersistentVolumeClaim name"),
])
async def test_create_volume_required_fields(offline_csi: CsiEndpoint, request_fields: Mapping[str, object],
                                             needle: str) -> None:
    details = await expect_code(offline_csi.controller.CreateVolume(csi_pb2.CreateVolumeRequest(**request_fields)),
                                grpc.StatusCode.INVALID_ARGUMENT)
    assert needle in details


async def test_delete_volume_requires_id_and_succeeds_for_unknown_ids(offline_csi: CsiEndpoint) -> None:
    await expect_code(offline_csi.controller.DeleteVolume(csi_pb2.DeleteVolumeRequest()),
                      grpc.StatusCode.INVALID_ARGUMENT)
    for _ in range(2):
        await offline_csi.controller.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id="pvc-never-existed"))


# -- Node ----------------------------------------------------------------------------------------------------------

async def test_node_info_reports_node_and_topology(offline_csi: CsiEndpoint) -> None:
    info = await offline_csi.node.NodeGetInfo(csi_pb2.NodeGetInfoRequest())
    assert info.node_id == NODE_NAME
    assert dict(info.accessible_topology.segments) == {TOPOLOGY_KEY_HOSTNAME: NODE_NAME}
    assert info.max_volumes_per_node > 0


async def test_node_capabilities_are_empty(offline_csi: CsiEndpoint) -> None:
    response = await offline_csi.node.NodeGetCapabilities(csi_pb2.NodeGetCapabilitiesRequest())
    assert list(response.capabilities) == []


@pytest.mark.parametrize("method", ["NodeStageVolume", "NodeUnstageVolume", "NodeGetVolumeStats"])
async def test_unadvertised_node_rpcs_are_unimplemented(offline_csi: CsiEndpoint, method: str) -> None:
    request_type = getattr(csi_pb2, f"{method}Request")
    await expect_code(getattr(offline_csi.node, method)(request_type()), grpc.StatusCode.UNIMPLEMENTED)


def publish_request(endpoint: CsiEndpoint, **overrides: object) -> csi_pb2.NodePublishVolumeRequest:
    fields: dict[str, object] = {"volume_id": "pvc-1", "target_path": endpoint.target(), "volume_capability": MOUNT,
                                 "volume_context": POD_INFO}
    fields.update(overrides)
    return csi_pb2.NodePublishVolumeRequest(**{k: v for k, v in fields.items() if v is not None})


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"volume_id": None}, "volume_id is required"),
    ({"target_path": None}, "target_path is required"),
    ({"volume_capability": None}, "volume_capability is required"),
    ({"volume_capability": BLOCK}, "block volumes are not supported"),
    ({"volume_context": {ANNOTATION_LISTENER_CLASS: "x"}}, "csi.storage.k8s.io/pod.namespace"),
    ({"volume_context": {k: v for k, v in POD_INFO.items() if k != ANNOTATION_LISTENER_CLASS}},
     f"neither {ANNOTATION_LISTENER_CLASS} nor {ANNOTATION_LISTENER_NAME}"),
    ({"volume_context": {**POD_INFO, ANNOTATION_LISTENER_NAME: "shared"}},
     f"both {ANNOTATION_LISTENER_CLASS} and {ANNOTATION_LISTENER_NAME}"),
    ({"volume_context": {**POD_INFO, ANNOTATION_LISTENER_CLASS: "../../x"}}, "not a valid ListenerClass name"),
    ({"volume_context": {**POD_INFO, "csi.storage.k8s.io/pod.name": "../web-0"}}, "not a valid Pod name"),
    ({"volume_context": {**POD_INFO, "csi.storage.k8s.io/pod.namespace": "a/b"}}, "not a valid Namespace name"),
    ({"volume_id": "../pvc-1"}, "not a valid PersistentVolume name"),
    ({"volume_context": {**POD_INFO, "csi.storage.k8s.io/ephemeral": "true"}}, "generic ephemeral volume"),
])
async def test_publish_refuses_bad_requests_before_touching_anything(
        offline_csi: CsiEndpoint, overrides: dict[str, object], needle: str) -> None:
    details = await expect_code(offline_csi.node.NodePublishVolume(publish_request(offline_csi, **overrides)),
                                grpc.StatusCode.INVALID_ARGUMENT)
    assert needle in details
    assert os.listdir(offline_csi.kubelet_dir / "pods") == []


@pytest.mark.parametrize("target", ["/etc/listener", "{kubelet}/../escape", "{kubelet}", "relative/mount"])
async def test_publish_refuses_targets_outside_the_kubelet_dir(offline_csi: CsiEndpoint, target: str) -> None:
    path = target.format(kubelet=offline_csi.kubelet_dir)
    details = await expect_code(offline_csi.node.NodePublishVolume(publish_request(offline_csi, target_path=path)),
                                grpc.StatusCode.INVALID_ARGUMENT)
    assert "target" in details
    assert sorted(os.listdir(offline_csi.kubelet_dir.parent)) == ["csi.sock", "kubelet"]


async def test_publish_refuses_a_symlinked_target_escaping_the_kubelet_dir(offline_csi: CsiEndpoint) -> None:
    outside = offline_csi.kubelet_dir.parent / "outside"
    outside.mkdir()
    pod_dir = offline_csi.kubelet_dir / "pods" / "uid-1"
    pod_dir.mkdir()
    (pod_dir / "volumes").symlink_to(outside)
    await expect_code(offline_csi.node.NodePublishVolume(publish_request(offline_csi)),
                      grpc.StatusCode.INVALID_ARGUMENT)
    assert os.listdir(outside) == []


async def test_unpublish_required_fields_and_missing_target(offline_csi: CsiEndpoint) -> None:
    await expect_code(offline_csi.node.NodeUnpublishVolume(
        csi_pb2.NodeUnpublishVolumeRequest(target_path=offline_csi.target())), grpc.StatusCode.INVALID_ARGUMENT)
    await expect_code(offline_csi.node.NodeUnpublishVolume(
        csi_pb2.NodeUnpublishVolumeRequest(volume_id="pvc-1")), grpc.StatusCode.INVALID_ARGUMENT)
    await expect_code(offline_csi.node.NodeUnpublishVolume(
        csi_pb2.NodeUnpublishVolumeRequest(volume_id="pvc-1", target_path="/etc")), grpc.StatusCode.INVALID_ARGUMENT)


async def test_unpublish_of_the_pods_directory_is_refused_and_removes_nothing(offline_csi: CsiEndpoint) -> None:
    """``<kubelet>/pods`` is inside the kubelet directory but holds every Pod's data: only kubelet's CSI volume
    layout is accepted, so nothing is removed."""
    pods = offline_csi.kubelet_dir / "pods"
    other_pod_file = pods / "uid-2" / "volumes" / "kubernetes.io~empty-dir" / "data" / "file"
    other_pod_file.parent.mkdir(parents=True)
    other_pod_file.write_text("precious")
    for target in (pods, pods / "uid-2", pods / "uid-2" / "volumes" / "kubernetes.io~empty-dir" / "data",
                   offline_csi.kubelet_dir / "other" / "mount"):
        details = await expect_code(offline_csi.node.NodeUnpublishVolume(
            csi_pb2.NodeUnpublishVolumeRequest(volume_id="pvc-1", target_path=str(target))),
            grpc.StatusCode.INVALID_ARGUMENT)
        assert "not a CSI volume directory in kubelet's layout" in details
    assert other_pod_file.read_text() == "precious"


async def test_publish_into_another_volume_plugins_directory_is_refused(offline_csi: CsiEndpoint) -> None:
    config = offline_csi.kubelet_dir / "pods" / "uid-1" / "volumes" / "kubernetes.io~configmap" / "config"
    config.mkdir(parents=True)
    (config / "app.properties").write_text("key=value")
    details = await expect_code(offline_csi.node.NodePublishVolume(
        publish_request(offline_csi, target_path=str(config))), grpc.StatusCode.INVALID_ARGUMENT)
    assert "not a CSI volume directory in kubelet's layout" in details
    assert os.listdir(config) == ["app.properties"]
    assert (config / "app.properties").read_text() == "key=value"


async def test_publish_into_another_pods_directory_is_refused(offline_csi: CsiEndpoint) -> None:
    """The volume context names the Pod (uid-1); a target in another Pod's directory is refused."""
    details = await expect_code(offline_csi.node.NodePublishVolume(
        publish_request(offline_csi, target_path=offline_csi.target(pod_uid="uid-2"))),
        grpc.StatusCode.INVALID_ARGUMENT)
    assert "not in the directory of Pod uid 'uid-1'" in details
    assert os.listdir(offline_csi.kubelet_dir / "pods") == []


async def test_unpublish_of_a_missing_target_succeeds_and_removes_an_existing_one(offline_csi: CsiEndpoint) -> None:
    target = Path(offline_csi.target())
    request = csi_pb2.NodeUnpublishVolumeRequest(volume_id="pvc-1", target_path=str(target))
    await offline_csi.node.NodeUnpublishVolume(request)
    _write(target / "file", "x")
    # The API server is unreachable: the PodListeners cleanup is best effort and does not fail the call.
    await offline_csi.node.NodeUnpublishVolume(request)
    assert "mount" not in os.listdir(target.parent)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def test_unpublish_of_a_volume_id_that_names_no_volume_is_not_found(offline_csi: CsiEndpoint) -> None:
    """A volume id that cannot be a PersistentVolume name was never published (a publish needs that PV): the spec's
    NOT_FOUND, and nothing is removed (csi-sanity's cleanup unpublishes such ids and ignores NOT_FOUND)."""
    target = offline_csi.kubelet_dir / "pods" / "uid-1" / "volumes" / "kubernetes.io~csi" / "pvc-1" / "mount"
    target.mkdir(parents=True)
    (target / "kept").write_text("")
    details = await expect_code(offline_csi.node.NodeUnpublishVolume(csi_pb2.NodeUnpublishVolumeRequest(
        volume_id="Sanity-Volume-ABC", target_path=str(target))), grpc.StatusCode.NOT_FOUND)
    assert details == ("volume 'Sanity-Volume-ABC' does not exist: volume ids of this driver are PersistentVolume "
                       "names")
    assert os.listdir(target) == ["kept"]
