"""CreateVolume against kubesim: volume context, pinning, idempotency, and clear errors with Events on the PVC."""

from __future__ import annotations

import grpc
import pytest
from csi_support import BLOCK, MOUNT, KubeCsi, expect_code, listener_class_object, pv_object, pvc_object

from csi_proto import csi_pb2
from listener_operator.constants import (
    ANNOTATION_LISTENER_CLASS,
    ANNOTATION_LISTENER_NAME,
    TOPOLOGY_KEY_HOSTNAME,
)
from listener_operator.kinds import LISTENER, LISTENER_CLASS
from operator_runtime.kinds import EVENT, PV, PVC

EVENTS = EVENT


def create_request(pvc: str, *, preferred: list[str] = (), name: str = "pvc-0001") -> csi_pb2.CreateVolumeRequest:
    return csi_pb2.CreateVolumeRequest(
        name=name, volume_capabilities=[MOUNT],
        parameters={"csi.storage.k8s.io/pvc/name": pvc, "csi.storage.k8s.io/pvc/namespace": "default"},
        accessibility_requirements=csi_pb2.TopologyRequirement(
            preferred=[csi_pb2.Topology(segments={TOPOLOGY_KEY_HOSTNAME: n}) for n in preferred],
            requisite=[csi_pb2.Topology(segments={TOPOLOGY_KEY_HOSTNAME: n}) for n in preferred]),
    )


async def pvc_event_reasons(kube: KubeCsi, pvc: str) -> list[tuple[str, str]]:
    events, _ = await kube.api.list(EVENTS, namespace="default")
    return [(e.get("reason", ""), e.get("note", "")) for e in events
            if (e.get("regarding") or {}).get("name") == pvc and (e.get("regarding") or {}).get("kind")
            == "PersistentVolumeClaim"]


async def test_class_volume_context_is_the_pvc_annotations_and_unpinned(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    annotations = {ANNOTATION_LISTENER_CLASS: "lb", "example.com/other": "kept"}
    await kube_csi.api.create(PVC, pvc_object("default", "data", annotations), "default")
    first = await kube_csi.csi.controller.CreateVolume(create_request("data", preferred=["node-b", "node-a"]))
    assert first.volume.volume_id == "pvc-0001"
    assert dict(first.volume.volume_context) == annotations
    assert list(first.volume.accessible_topology) == []
    again = await kube_csi.csi.controller.CreateVolume(create_request("data", preferred=["node-b", "node-a"]))
    assert again == first


@pytest.mark.parametrize(("service_type", "pinned", "expect_pin"), [
    ("NodePort", True, True), ("NodePort", False, False), ("LoadBalancer", True, False), ("ClusterIP", True, False),
])
async def test_pinning_only_for_pinned_node_port_classes(kube_csi: KubeCsi, service_type: str, pinned: bool,
                                                         expect_pin: bool) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("c", service_type, pinned=pinned))
    await kube_csi.api.create(PVC, pvc_object("default", "data", {ANNOTATION_LISTENER_CLASS: "c"}), "default")
    response = await kube_csi.csi.controller.CreateVolume(create_request("data", preferred=["node-b", "node-a"]))
    topology = [dict(t.segments) for t in response.volume.accessible_topology]
    assert topology == ([{TOPOLOGY_KEY_HOSTNAME: "node-b"}] if expect_pin else [])


async def test_listener_name_mode_uses_the_listeners_class(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("pinned", "NodePort", pinned=True))
    await kube_csi.api.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                         "metadata": {"name": "shared", "namespace": "default"},
                                         "spec": {"className": "pinned", "ports": []}}, "default")
    await kube_csi.api.create(PVC, pvc_object("default", "data", {ANNOTATION_LISTENER_NAME: "shared"}), "default")
    response = await kube_csi.csi.controller.CreateVolume(create_request("data", preferred=["node-c"]))
    assert [dict(t.segments) for t in response.volume.accessible_topology] == [{TOPOLOGY_KEY_HOSTNAME: "node-c"}]


@pytest.mark.parametrize("annotations", [
    {ANNOTATION_LISTENER_CLASS: "lb", ANNOTATION_LISTENER_NAME: "shared"},
    {},
])
async def test_exactly_one_selector_annotation_is_required(kube_csi: KubeCsi, annotations: dict[str, str]) -> None:
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    await kube_csi.api.create(PVC, pvc_object("default", "data", annotations), "default")
    details = await expect_code(kube_csi.csi.controller.CreateVolume(create_request("data")),
                                grpc.StatusCode.INVALID_ARGUMENT)
    assert ANNOTATION_LISTENER_CLASS in details and ANNOTATION_LISTENER_NAME in details
    assert "PersistentVolumeClaim default/data" in details
    reasons = await pvc_event_reasons(kube_csi, "data")
    assert any(reason == "InvalidListenerVolume" and ANNOTATION_LISTENER_NAME in note for reason, note in reasons)


async def test_unknown_class_is_unavailable_with_an_event(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(PVC, pvc_object("default", "data", {ANNOTATION_LISTENER_CLASS: "nope"}), "default")
    details = await expect_code(kube_csi.csi.controller.CreateVolume(create_request("data")),
                                grpc.StatusCode.UNAVAILABLE)
    assert details.startswith("PersistentVolumeClaim default/data: ListenerClass nope not found: ")
    assert [r for r, _ in await pvc_event_reasons(kube_csi, "data")] == ["InvalidListenerVolume"]


async def test_missing_listener_and_listener_without_class(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(PVC, pvc_object("default", "a", {ANNOTATION_LISTENER_NAME: "absent"}), "default")
    details = await expect_code(kube_csi.csi.controller.CreateVolume(create_request("a")),
                                grpc.StatusCode.UNAVAILABLE)
    assert details.startswith("PersistentVolumeClaim default/a: Listener default/absent not found: ")
    assert [r for r, _ in await pvc_event_reasons(kube_csi, "a")] == ["InvalidListenerVolume"]
    await kube_csi.api.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                         "metadata": {"name": "classless", "namespace": "default"},
                                         "spec": {"ports": []}}, "default")
    await kube_csi.api.create(PVC, pvc_object("default", "b", {ANNOTATION_LISTENER_NAME: "classless"}), "default")
    details = await expect_code(kube_csi.csi.controller.CreateVolume(create_request("b")),
                                grpc.StatusCode.INVALID_ARGUMENT)
    assert "has no spec.className" in details
    assert [r for r, _ in await pvc_event_reasons(kube_csi, "b")] == ["InvalidListenerVolume"]


async def test_missing_pvc_is_unavailable(kube_csi: KubeCsi) -> None:
    details = await expect_code(kube_csi.csi.controller.CreateVolume(create_request("ghost")),
                                grpc.StatusCode.UNAVAILABLE)
    assert "PersistentVolumeClaim default/ghost" in details


async def test_pinning_class_without_topology_is_not_pinned_and_says_so(kube_csi: KubeCsi) -> None:
    """A provisioner without the Topology feature sends no segments: the volume still works, unpinned, and the PVC
    gets a Warning Event explaining why its address will follow the Pod."""
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("pinned", "NodePort", pinned=True))
    await kube_csi.api.create(PVC, pvc_object("default", "data", {ANNOTATION_LISTENER_CLASS: "pinned"}), "default")
    response = await kube_csi.csi.controller.CreateVolume(create_request("data", preferred=[]))
    assert list(response.volume.accessible_topology) == []
    notes = [note for reason, note in await pvc_event_reasons(kube_csi, "data") if reason == "ListenerVolumeNotPinned"]
    assert len(notes) == 1 and "--feature-gates=Topology=true" in notes[0]


async def test_invalid_selector_value_is_refused_with_an_event(kube_csi: KubeCsi) -> None:
    await kube_csi.api.create(PVC, pvc_object("default", "data", {ANNOTATION_LISTENER_CLASS: "Not_A_Name"}), "default")
    details = await expect_code(kube_csi.csi.controller.CreateVolume(create_request("data")),
                                grpc.StatusCode.INVALID_ARGUMENT)
    assert details == (f"PersistentVolumeClaim default/data annotation {ANNOTATION_LISTENER_CLASS}: 'Not_A_Name' is "
                       "not a valid ListenerClass name (lower-case RFC 1123 subdomain)")
    assert [r for r, _ in await pvc_event_reasons(kube_csi, "data")] == ["InvalidListenerVolume"]


# -- ValidateVolumeCapabilities --------------------------------------------------------------------------------------

def validate_request(volume_id: str, *capabilities: csi_pb2.VolumeCapability,
                     context: dict[str, str] | None = None) -> csi_pb2.ValidateVolumeCapabilitiesRequest:
    return csi_pb2.ValidateVolumeCapabilitiesRequest(volume_id=volume_id, volume_capabilities=list(capabilities),
                                                     volume_context=context or {})


async def test_a_provisioned_volume_is_confirmed_for_filesystem_capabilities_and_not_for_block(
        kube_csi: KubeCsi) -> None:
    """A volume this process just provisioned (its PV not written yet) and one known by its PV are confirmed with
    exactly the capabilities asked; a block capability gets no confirmation and says why (the spec's answer for
    capabilities a volume does not support)."""
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    annotations = {ANNOTATION_LISTENER_CLASS: "lb"}
    await kube_csi.api.create(PVC, pvc_object("default", "data", annotations), "default")
    created = await kube_csi.csi.controller.CreateVolume(create_request("data", name="pvc-0002"))
    await kube_csi.api.create(PV, pv_object("pvc-0003", "default", "other", {ANNOTATION_LISTENER_NAME: "shared"}))
    controller = kube_csi.csi.controller
    for volume_id, context in (("pvc-0002", dict(created.volume.volume_context)),
                               ("pvc-0003", {ANNOTATION_LISTENER_NAME: "shared"})):
        answer = await controller.ValidateVolumeCapabilities(validate_request(volume_id, MOUNT))
        assert list(answer.confirmed.volume_capabilities) == [MOUNT], answer
        with_context = await controller.ValidateVolumeCapabilities(validate_request(volume_id, MOUNT,
                                                                                    context=context))
        assert dict(with_context.confirmed.volume_context) == context
        block = await controller.ValidateVolumeCapabilities(validate_request(volume_id, MOUNT, BLOCK))
        assert not block.HasField("confirmed")
        assert block.message == "block volumes are not supported; listener volumes are filesystem volumes"
    wrong = await controller.ValidateVolumeCapabilities(
        validate_request("pvc-0003", MOUNT, context={ANNOTATION_LISTENER_NAME: "another"}))
    assert not wrong.HasField("confirmed") and "volume_context differs" in wrong.message


async def test_an_unknown_volume_or_another_drivers_is_not_found(kube_csi: KubeCsi) -> None:
    foreign = pv_object("pvc-0004", "default", "other", {})
    foreign["spec"]["csi"]["driver"] = "ebs.csi.aws.com"
    await kube_csi.api.create(PV, foreign)
    await kube_csi.api.create(PVC, pvc_object("default", "data", {ANNOTATION_LISTENER_CLASS: "lb"}), "default")
    for volume_id in ("pvc-0004", "pvc-9999"):
        details = await expect_code(kube_csi.csi.controller.ValidateVolumeCapabilities(
            validate_request(volume_id, MOUNT)), grpc.StatusCode.NOT_FOUND)
        assert details == (f"volume {volume_id} does not exist: no PersistentVolume {volume_id} of driver "
                           "listeners.stackable.tech")
    # a deleted volume is forgotten
    await kube_csi.api.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    await kube_csi.csi.controller.CreateVolume(create_request("data", name="pvc-0005"))
    await kube_csi.csi.controller.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id="pvc-0005"))
    await expect_code(kube_csi.csi.controller.ValidateVolumeCapabilities(validate_request("pvc-0005", MOUNT)),
                      grpc.StatusCode.NOT_FOUND)
