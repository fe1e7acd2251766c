"""Kubernetes objects shipped with the operator as YAML (CSIDriver, StorageClass).

They are data files rather than Python dicts so that the demo, the tests and a later Helm chart read the same text.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

__all__ = ["CSI_DRIVER_FILE", "STORAGE_CLASS_FILE", "csi_deployment_objects", "csi_driver", "load_manifest",
           "storage_class"]

CSI_DRIVER_FILE = "csidriver.yaml"
STORAGE_CLASS_FILE = "storageclass.yaml"


def load_manifest(file_name: str) -> list[dict[str, Any]]:
    """The objects of one YAML file shipped in this package (empty documents skipped)."""
    text = resources.files("listener_operator.manifests").joinpath(file_name).read_text(encoding="utf-8")
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    for obj in objects:
        if not isinstance(obj, dict) or "apiVersion" not in obj or "kind" not in obj:
            raise ValueError(f"{file_name} contains a document that is not a Kubernetes object")
    return objects


def _single(file_name: str) -> dict[str, Any]:
    objects = load_manifest(file_name)
    if len(objects) != 1:
        raise ValueError(f"{file_name} must contain exactly one object, found {len(objects)}")
    return objects[0]


def csi_driver() -> dict[str, Any]:
    """The ``storage.k8s.io/v1`` CSIDriver ``listeners.stackable.tech`` (behaviour.md "CSIDriver")."""
    return _single(CSI_DRIVER_FILE)


def storage_class() -> dict[str, Any]:
    """The ``storage.k8s.io/v1`` StorageClass ``listeners.stackable.tech`` (behaviour.md "StorageClass")."""
    return _single(STORAGE_CLASS_FILE)


def csi_deployment_objects() -> list[dict[str, Any]]:
    """The cluster-scoped objects the CSI driver needs: the CSIDriver and the StorageClass, in apply order."""
    return [csi_driver(), storage_class()]
