"""The committed CSI stubs match csi.proto and expose the spec's wire names and numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from csi_proto import csi_pb2, csi_pb2_grpc, regenerate


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    generated = regenerate.regenerate(tmp_path)
    for fresh in generated:
        committed = regenerate.PACKAGE_DIR / fresh.name
        assert committed.read_text() == fresh.read_text(), (
            f"{committed} is stale: run `python -m csi_proto.regenerate`"
        )


def test_generated_grpc_module_imports_the_package_module() -> None:
    source = (regenerate.PACKAGE_DIR / "csi_pb2_grpc.py").read_text()
    assert "from csi_proto import csi_pb2" in source


def _full_method_names() -> set[str]:
    names = set()
    for service in csi_pb2.DESCRIPTOR.services_by_name.values():
        for method in service.methods:
            names.add(f"/{service.full_name}/{method.name}")
    return names


@pytest.mark.parametrize(
    "method",
    [
        "/csi.v1.Identity/GetPluginInfo",
        "/csi.v1.Identity/GetPluginCapabilities",
        "/csi.v1.Identity/Probe",
        "/csi.v1.Controller/CreateVolume",
        "/csi.v1.Controller/DeleteVolume",
        "/csi.v1.Controller/ControllerGetCapabilities",
        "/csi.v1.Node/NodePublishVolume",
        "/csi.v1.Node/NodeUnpublishVolume",
        "/csi.v1.Node/NodeGetInfo",
        "/csi.v1.Node/NodeGetCapabilities",
        "/csi.v1.Node/NodeStageVolume",
        "/csi.v1.Node/NodeUnstageVolume",
    ],
)
def test_full_method_names_follow_the_spec(method: str) -> None:
    assert method in _full_method_names()


def test_package_is_csi_v1() -> None:
    assert csi_pb2.DESCRIPTOR.package == "csi.v1"
    assert set(csi_pb2.DESCRIPTOR.services_by_name) == {"Identity", "Controller", "Node"}


def _field_numbers(message: Any) -> dict[str, int]:
    return {field.name: field.number for field in message.fields}


def test_create_volume_field_numbers() -> None:
    assert _field_numbers(csi_pb2.CreateVolumeRequest.DESCRIPTOR) == {
        "name": 1,
        "capacity_range": 2,
        "volume_capabilities": 3,
        "parameters": 4,
        "secrets": 5,
        "volume_content_source": 6,
        "accessibility_requirements": 7,
        "mutable_parameters": 8,
    }
    assert _field_numbers(csi_pb2.Volume.DESCRIPTOR) == {
        "capacity_bytes": 1,
        "volume_id": 2,
        "volume_context": 3,
        "content_source": 4,
        "accessible_topology": 5,
    }
    assert _field_numbers(csi_pb2.TopologyRequirement.DESCRIPTOR) == {"requisite": 1, "preferred": 2}
    assert _field_numbers(csi_pb2.Topology.DESCRIPTOR) == {"segments": 1}
    assert _field_numbers(csi_pb2.CapacityRange.DESCRIPTOR) == {"required_bytes": 1, "limit_bytes": 2}


def test_node_field_numbers() -> None:
    assert _field_numbers(csi_pb2.NodePublishVolumeRequest.DESCRIPTOR) == {
        "volume_id": 1,
        "publish_context": 2,
        "staging_target_path": 3,
        "target_path": 4,
        "volume_capability": 5,
        "readonly": 6,
        "secrets": 7,
        "volume_context": 8,
    }
    assert _field_numbers(csi_pb2.NodeUnpublishVolumeRequest.DESCRIPTOR) == {"volume_id": 1, "target_path": 2}
    assert _field_numbers(csi_pb2.NodeGetInfoResponse.DESCRIPTOR) == {
        "node_id": 1,
        "max_volumes_per_node": 2,
        "accessible_topology": 3,
    }
    assert _field_numbers(csi_pb2.VolumeCapability.DESCRIPTOR) == {"block": 1, "mount": 2, "access_mode": 3}
    assert _field_numbers(csi_pb2.VolumeCapability.MountVolume.DESCRIPTOR) == {
        "fs_type": 1,
        "mount_flags": 2,
        "volume_mount_group": 3,
    }
    assert _field_numbers(csi_pb2.NodeGetVolumeStatsRequest.DESCRIPTOR) == {
        "volume_id": 1,
        "volume_path": 2,
        "staging_target_path": 3,
    }
    assert _field_numbers(csi_pb2.NodeGetVolumeStatsResponse.DESCRIPTOR) == {
        "usage": 1,
        "volume_condition": 2,
    }
    assert _field_numbers(csi_pb2.VolumeCondition.DESCRIPTOR) == {"abnormal": 1, "message": 2}


def test_newer_v1_fields_a_peer_may_send() -> None:
    """Fields and oneof members added after v1.0 (kept at the spec's numbers so newer peers decode)."""
    assert _field_numbers(csi_pb2.PluginCapability.DESCRIPTOR) == {"service": 1, "volume_expansion": 2}
    assert _field_numbers(csi_pb2.ListVolumesResponse.Entry.DESCRIPTOR) == {"volume": 1, "status": 2}
    assert _field_numbers(csi_pb2.ListVolumesResponse.VolumeStatus.DESCRIPTOR) == {
        "published_node_ids": 1,
        "volume_condition": 2,
    }
    assert _field_numbers(csi_pb2.GetCapacityResponse.DESCRIPTOR) == {
        "available_capacity": 1,
        "maximum_volume_size": 2,
        "minimum_volume_size": 3,
    }


def test_enum_values() -> None:
    mode = csi_pb2.VolumeCapability.AccessMode
    assert dict(mode.Mode.items()) == {
        "UNKNOWN": 0,
        "SINGLE_NODE_WRITER": 1,
        "SINGLE_NODE_READER_ONLY": 2,
        "MULTI_NODE_READER_ONLY": 3,
        "MULTI_NODE_SINGLE_WRITER": 4,
        "MULTI_NODE_MULTI_WRITER": 5,
        "SINGLE_NODE_SINGLE_WRITER": 6,
        "SINGLE_NODE_MULTI_WRITER": 7,
    }
    service = csi_pb2.PluginCapability.Service
    assert dict(service.Type.items()) == {
        "UNKNOWN": 0,
        "CONTROLLER_SERVICE": 1,
        "VOLUME_ACCESSIBILITY_CONSTRAINTS": 2,
        "GROUP_CONTROLLER_SERVICE": 3,
        "SNAPSHOT_METADATA_SERVICE": 4,
    }
    assert dict(csi_pb2.PluginCapability.VolumeExpansion.Type.items()) == {
        "UNKNOWN": 0,
        "ONLINE": 1,
        "OFFLINE": 2,
    }
    controller = csi_pb2.ControllerServiceCapability.RPC
    assert controller.CREATE_DELETE_VOLUME == 1
    assert controller.PUBLISH_READONLY == 8
    assert controller.EXPAND_VOLUME == 9
    assert controller.LIST_VOLUMES_PUBLISHED_NODES == 10
    assert controller.VOLUME_CONDITION == 11
    assert controller.GET_VOLUME == 12
    assert controller.SINGLE_NODE_MULTI_WRITER == 13
    assert dict(csi_pb2.NodeServiceCapability.RPC.Type.items()) == {
        "UNKNOWN": 0,
        "STAGE_UNSTAGE_VOLUME": 1,
        "GET_VOLUME_STATS": 2,
        "EXPAND_VOLUME": 3,
        "VOLUME_CONDITION": 4,
        "SINGLE_NODE_MULTI_WRITER": 5,
        "VOLUME_MOUNT_GROUP": 6,
    }


def test_a_newer_peers_unknown_access_mode_value_survives_decoding() -> None:
    """proto3 enums are open: a mode number this file does not name still reaches the driver as a number."""
    wire = csi_pb2.VolumeCapability(
        access_mode=csi_pb2.VolumeCapability.AccessMode(
            mode=csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_MULTI_WRITER
        )
    ).SerializeToString()
    assert wire == b"\x1a\x02\x08\x07"
    future = b"\x1a\x02\x08\x09"  # mode 9: not (yet) defined
    assert csi_pb2.VolumeCapability.FromString(future).access_mode.mode == 9


def test_probe_ready_is_a_bool_wrapper() -> None:
    field = csi_pb2.ProbeResponse.DESCRIPTOR.fields_by_name["ready"]
    assert field.number == 1
    assert field.message_type is not None
    assert field.message_type.full_name == "google.protobuf.BoolValue"


def test_wire_bytes_of_a_known_message() -> None:
    """Field 4 (target_path, length-delimited) encodes as tag 0x22: a wrong number would change the bytes."""
    request = csi_pb2.NodePublishVolumeRequest(volume_id="v", target_path="/t")
    assert request.SerializeToString() == b"\x0a\x01v\x22\x02/t"


def test_grpc_registration_helpers_exist() -> None:
    for name in (
        "add_IdentityServicer_to_server",
        "add_ControllerServicer_to_server",
        "add_NodeServicer_to_server",
    ):
        assert callable(getattr(csi_pb2_grpc, name))
    for name in ("IdentityStub", "ControllerStub", "NodeStub"):
        assert hasattr(csi_pb2_grpc, name)
