"""CSI Controller service: provisioning decisions for listener volumes (behaviour.md "Provisioning", "Pinning").

Nothing is stored: the volume is fully described by the PVC annotations, which become the volume context, and by
the optional topology pin. That makes CreateVolume idempotent by construction and DeleteVolume a no-op (the
per-volume Listener is owned by the PV and garbage-collected with it).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import grpc

from csi_proto import csi_pb2, csi_pb2_grpc
from listener_operator.constants import DRIVER_NAME, TOPOLOGY_KEY_HOSTNAME
from listener_operator.csi_server.errors import (
    ClaimListenerWithoutClass,
    CsiError,
    MissingArgument,
    UnsupportedVolume,
    VolumeNotFound,
    csi_rpc,
    error_chain,
    get_optional,
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
from listener_operator.messages import brief
from listener_operator.names import is_dns1123_subdomain
from operator_runtime.api import KubeApi
from operator_runtime.kinds import PV, PVC
from operator_runtime.objects import mapping, meta, object_reference

__all__ = ["PARAM_PVC_NAME", "PARAM_PVC_NAMESPACE", "ControllerService"]

log = logging.getLogger(__name__)

# Added by the external-provisioner when started with --extra-create-metadata (behaviour.md "Provisioning").
PARAM_PVC_NAME = "csi.storage.k8s.io/pvc/name"
PARAM_PVC_NAMESPACE = "csi.storage.k8s.io/pvc/namespace"

_Context = grpc.aio.ServicerContext[Any, Any]
#: How many volumes this process provisioned are remembered until the provisioner has written their PVs.
PROVISIONED_MEMORY = 1024


def check_volume_capabilities(capabilities: Any, *, field: str) -> None:
    """At least one capability is required, and only filesystem ("mount") volumes exist here."""
    if not capabilities:
        raise MissingArgument(f"{field} is required")
    unsupported = unsupported_capability(capabilities)
    if unsupported:
        raise UnsupportedVolume(f"{field}: {unsupported}")


def unsupported_capability(capabilities: Any) -> str | None:
    """Why one of ``capabilities`` cannot be served (only filesystem volumes exist here), or None."""
    for capability in capabilities:
        if capability.HasField("block"):
            return "block volumes are not supported; listener volumes are filesystem volumes"
    return None


def pv_volume_context(pv: Mapping[str, Any], volume_id: str) -> dict[str, str] | None:
    """The volume context of ``pv`` if it is the volume ``volume_id`` of this driver, else None."""
    csi = mapping(mapping(pv, "spec"), "csi")
    if csi.get("driver") != DRIVER_NAME or csi.get("volumeHandle") != volume_id:
        return None
    return {str(k): str(v) for k, v in mapping(csi, "volumeAttributes").items()}


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
    """CreateVolume / DeleteVolume / ValidateVolumeCapabilities / ControllerGetCapabilities; every other RPC is
    UNIMPLEMENTED (behaviour.md "Controller service")."""

    def __init__(self, api: KubeApi, events: EventPublisher | None = None) -> None:
        self._api = api
        self._events = events
        # volume id -> context of the volumes this process answered CreateVolume for, the most recent last: they
        # exist before the provisioner has written their PV (behaviour.md "Controller service")
        self._provisioned: OrderedDict[str, dict[str, str]] = OrderedDict()

    @csi_rpc
    async def ValidateVolumeCapabilities(self, request: csi_pb2.ValidateVolumeCapabilitiesRequest,
                                         context: _Context) -> csi_pb2.ValidateVolumeCapabilitiesResponse:
        if not request.volume_id:
            raise MissingArgument("volume_id is required")
        if not request.volume_capabilities:
            raise MissingArgument("volume_capabilities is required")
        volume_context = await self._volume_context(request.volume_id)
        response = csi_pb2.ValidateVolumeCapabilitiesResponse
        unsupported = unsupported_capability(request.volume_capabilities)
        if unsupported:
            return response(message=unsupported)
        if request.volume_context and dict(request.volume_context) != volume_context:
            return response(message=f"volume_context differs from the context of volume {request.volume_id}")
        return response(confirmed=response.Confirmed(volume_context=request.volume_context,
                                                     volume_capabilities=request.volume_capabilities,
                                                     parameters=request.parameters))

    async def _volume_context(self, volume_id: str) -> dict[str, str]:
        """The context of this driver's volume ``volume_id``: one this process provisioned, or its PV's."""
        remembered = self._provisioned.get(volume_id)
        if remembered is not None:
            return remembered
        if not is_dns1123_subdomain(volume_id):
            raise VolumeNotFound(f"volume {brief(volume_id)} does not exist: volume ids of this driver are "
                                 "PersistentVolume names")
        pv = await get_optional(f"PersistentVolume {volume_id}", self._api.get(PV, volume_id))
        found = pv_volume_context(pv, volume_id) if pv is not None else None
        if found is None:
            raise VolumeNotFound(f"volume {volume_id} does not exist: no PersistentVolume {volume_id} of driver "
                                 f"{DRIVER_NAME}")
        return found

    def _remember(self, volume_id: str, volume_context: dict[str, str]) -> None:
        self._provisioned[volume_id] = volume_context
        self._provisioned.move_to_end(volume_id)
        while len(self._provisioned) > PROVISIONED_MEMORY:
            self._provisioned.popitem(last=False)

    @csi_rpc
    async def ControllerGetCapabilities(self, request: csi_pb2.ControllerGetCapabilitiesRequest,
                                        context: _Context) -> csi_pb2.ControllerGetCapabilitiesResponse:
        rpc = csi_pb2.ControllerServiceCapability.RPC
        # ValidateVolumeCapabilities has no capability of its own: every controller plugin serves it
        return csi_pb2.ControllerGetCapabilitiesResponse(capabilities=[
            csi_pb2.ControllerServiceCapability(rpc=rpc(type=rpc.CREATE_DELETE_VOLUME)),
        ])

    @csi_rpc
    async def DeleteVolume(self, request: csi_pb2.DeleteVolumeRequest, context: _Context
                           ) -> csi_pb2.DeleteVolumeResponse:
        if not request.volume_id:
            raise MissingArgument("volume_id is required")
        self._provisioned.pop(request.volume_id, None)
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
        self._remember(request.name, annotations)
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
