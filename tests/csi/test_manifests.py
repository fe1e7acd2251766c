"""The shipped CSIDriver and StorageClass carry the settings kubelet and the provisioner depend on."""

from __future__ import annotations

from listener_operator.manifests import csi_deployment_objects, csi_driver, storage_class


def test_csi_driver_settings() -> None:
    driver = csi_driver()
    assert (driver["apiVersion"], driver["kind"], driver["metadata"]["name"]) == (
        "storage.k8s.io/v1", "CSIDriver", "listeners.stackable.tech")
    assert driver["spec"] == {"attachRequired": False, "podInfoOnMount": True, "fsGroupPolicy": "File",
                              "volumeLifecycleModes": ["Persistent", "Ephemeral"]}


def test_storage_class_waits_for_first_consumer() -> None:
    storage = storage_class()
    assert (storage["apiVersion"], storage["kind"], storage["metadata"]["name"]) == (
        "storage.k8s.io/v1", "StorageClass", "listeners.stackable.tech")
    assert storage["provisioner"] == "listeners.stackable.tech"
    assert storage["volumeBindingMode"] == "WaitForFirstConsumer"
    assert "parameters" not in storage


def test_deployment_objects_in_apply_order() -> None:
    assert [o["kind"] for o in csi_deployment_objects()] == ["CSIDriver", "StorageClass"]
