"""Where the kinds the CSI services read and write live on the API server (for the dict-based ``KubeApi``)."""

from __future__ import annotations

from lightkube.resources.core_v1 import Node, PersistentVolume, PersistentVolumeClaim, Pod

from listener_operator.crd.resources import Listener, ListenerClass, PodListeners
from operator_runtime.api import ResourceInfo, resource_info

__all__ = ["LISTENER", "LISTENER_CLASS", "NODE", "POD", "POD_LISTENERS", "PV", "PVC"]

PV: ResourceInfo = resource_info(PersistentVolume)
PVC: ResourceInfo = resource_info(PersistentVolumeClaim)
POD: ResourceInfo = resource_info(Pod)
NODE: ResourceInfo = resource_info(Node)
LISTENER: ResourceInfo = resource_info(Listener)
LISTENER_CLASS: ResourceInfo = resource_info(ListenerClass)
POD_LISTENERS: ResourceInfo = resource_info(PodListeners)
