"""CSI Controller service: provisioning decisions for listener volumes (behaviour.md "Provisioning", "Pinning").

Nothing is stored: the volume is fully described by the PVC annotations, which become the volume context, and by
the optional topology pin. That makes CreateVolume idempotent by construction and DeleteVolume a no-op (the
per-volume Listener is owned by the PV and garbage-collected with it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import grpc

from csi_proto import csi_pb2, csi_pb2_grpc
from listener_operator.constants import TOPOLOGY_KEY_HOSTNAME
from listener_operator.csi_server.errors import (
    ClaimListenerWithoutClass,
    CsiError,
    MissingArgument,
    UnsupportedVolume,
    csi_rpc,
    error_chain,
    get_required,
)
from listener_operator.csi_server.reporting import EventPublisher, publish_warning
from listener_operator.csi_server.volume_context import (
    ListenerSelector,
    check_object_name,
    decode_selector,
    required_object,
)
from listener_operator.kinds import LISTENER, LISTENER_CLASS
from operator_runtime.api import KubeApi
from operator_runtime.kinds import PVC
from operator_runtime.objects import mapping, meta, object_reference

__all__ = ["PARAM_PVC_NAME", "PARAM_PVC_NAMESPACE", "ControllerService"]

log = logging.getLogger(__name__)

# Added by the external-provisioner when started with --extra-create-metadata (behaviour.md "Provisioning").
PARAM_PVC_NAME = "csi.storage.k8s.io/pvc/name"
PARAM_PVC_NAMESPACE = "csi.storage.k8s.io/pvc/namespace"

_Context = grpc.aio.ServicerContext[Any, Any]


def check_volume_capabilities(capabilities: Any, *, field: str) -> None:
    """At least one capability is required, and only filesystem ("mount") volumes exist here."""
    if not capabilities:
        raise MissingArgument(f"{field} is required")
    for capability in capabilities:
        if capability.HasField("block"):
            raise UnsupportedVolume(f"{field}: block volumes are not supported; listener volumes are filesystem "
                                    "volumes")


def pins_node_ports(listener_class: Mapping[str, Any]) -> bool:
    """Only NodePort classes with ``pinnedNodePorts`` pin their volumes to a node (behaviour.md "Pinning")."""
    spec = mapping(listener_class, "spec")
    return spec.get("serviceType") == "NodePort" and bool(spec.get("pinnedNodePorts"))


def pinned_topology(requirements: csi_pb2.TopologyRequirement) -> list[csi_pb2.Topology]:
    """The node pin: the first preferred segment with our key (the scheduler's node comes first), else none."""
    candidates = list(requirements.preferred) or list(requirements.requisite)
    for topology in candidates:
        if topology.segments.get(TOPOLOGY_KEY_HOSTNAME):
            return [csi_pb2.Topology(segments={TOPOLOGY_KEY_HOSTNAME: topology.segments[TOPOLOGY_KEY_HOSTNAME]})]
    return []


class ControllerService(csi_pb2_grpc.ControllerServicer):  # type: ignore[misc]
    """CreateVolume / DeleteVolume / ControllerGetCapabilities; every other RPC is UNIMPLEMENTED
    (behaviour.md "Controller service")."""

    def __init__(self, api: KubeApi, events: EventPublisher | None = None) -> None:
        self._api = api
        self._events = events

    @csi_rpc
    async def ControllerGetCapabilities(self, request: csi_pb2.ControllerGetCapabilitiesRequest,
                                        context: _Context) -> csi_pb2.ControllerGetCapabilitiesResponse:
        rpc = csi_pb2.ControllerServiceCapability.RPC
        return csi_pb2.ControllerGetCapabilitiesResponse(capabilities=[
            csi_pb2.ControllerServiceCapability(rpc=rpc(type=rpc.CREATE_DELETE_VOLUME)),
        ])

    @csi_rpc
    async def DeleteVolume(self, request: csi_pb2.DeleteVolumeRequest, context: _Context
                           ) -> csi_pb2.DeleteVolumeResponse:
        if not request.volume_id:
            raise MissingArgument("volume_id is required")
        return csi_pb2.DeleteVolumeResponse()

    @csi_rpc
    async def CreateVolume(self, request: csi_pb2.CreateVolumeRequest, context: _Context
                           ) -> csi_pb2.CreateVolumeResponse:
        if not request.name:
            raise MissingArgument("name is required")
        check_volume_capabilities(request.volume_capabilities, field="volume_capabilities")
        pvc_namespace, pvc_name = required_object(
            request.parameters, PARAM_PVC_NAMESPACE, PARAM_PVC_NAME, "PersistentVolumeClaim", source="parameters",
            hint="run the external-provisioner with --extra-create-metadata")
        # a missing PVC is no user error here: the provisioner only asks for claims that exist (or just went away)
        pvc = await get_required(f"PersistentVolumeClaim {pvc_namespace}/{pvc_name}",
                                 self._api.get(PVC, pvc_name, pvc_namespace), user_error_if_missing=False)
        annotations = {str(k): str(v) for k, v in meta(pvc).annotations.items()}
        source = f"PersistentVolumeClaim {pvc_namespace}/{pvc_name}"
        pvc_ref = object_reference(pvc)
        try:
            selector = decode_selector(annotations, source)
            class_name = await self._class_name(selector, pvc_namespace, source)
            listener_class = await get_required(f"ListenerClass {class_name}",
                                                self._api.get(LISTENER_CLASS, class_name), context=source)
        except CsiError as error:
            if error.user_error:
                await publish_warning(self._events, pvc_ref, reason="InvalidListenerVolume", note=error_chain(error),
                                      action="Provision")
            raise
        topology: list[csi_pb2.Topology] = []
        if pins_node_ports(listener_class):
            topology = pinned_topology(request.accessibility_requirements)
            if not topology:
                # the volume works, but its address will move with the Pod: tell the person who asked for a pin
                note = (f"ListenerClass {class_name} pins node ports, but the provisioner sent no "
                        f"{TOPOLOGY_KEY_HOSTNAME} topology (is the external-provisioner running with "
                        "--feature-gates=Topology=true?): the volume is not pinned to a node")
                log.warning("%s: %s", source, note)
                await publish_warning(self._events, pvc_ref, reason="ListenerVolumeNotPinned", note=note,
                                      action="Provision")
        return csi_pb2.CreateVolumeResponse(volume=csi_pb2.Volume(
            volume_id=request.name,
            capacity_bytes=0,
            volume_context=annotations,
            accessible_topology=topology,
        ))

    async def _class_name(self, selector: ListenerSelector, namespace: str, source: str) -> str:
        if selector.mode == "class":
            return selector.value
        listener = await get_required(f"Listener {namespace}/{selector.value}",
                                      self._api.get(LISTENER, selector.value, namespace), context=source)
        class_name = mapping(listener, "spec").get("className")
        if not class_name:
            raise ClaimListenerWithoutClass(f"{source}: Listener {namespace}/{selector.value} has no spec.className")
        return check_object_name("ListenerClass", str(class_name),
                                 f"Listener {namespace}/{selector.value} spec.className")
