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


def test_enum_values() -> None:
    mode = csi_pb2.VolumeCapability.AccessMode
    assert mode.MULTI_NODE_MULTI_WRITER == 5
    assert mode.SINGLE_NODE_WRITER == 1
    service = csi_pb2.PluginCapability.Service
    assert service.CONTROLLER_SERVICE == 1
    assert service.VOLUME_ACCESSIBILITY_CONSTRAINTS == 2
    assert csi_pb2.ControllerServiceCapability.RPC.CREATE_DELETE_VOLUME == 1
    assert csi_pb2.NodeServiceCapability.RPC.STAGE_UNSTAGE_VOLUME == 1


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
