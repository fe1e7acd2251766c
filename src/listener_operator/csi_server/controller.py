"""CSI Controller service: provisioning decisions for listener volumes (LO §6.2-§6.5).

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
from listener_operator.csi_server.errors import KUBE_ERRORS, CsiError, api_error_code, csi_rpc, error_chain
from listener_operator.csi_server.kinds import LISTENER, LISTENER_CLASS, PVC
from listener_operator.csi_server.reporting import EventPublisher, object_reference, publish_warning
from listener_operator.csi_server.volume_context import ListenerSelector, check_object_name, decode_selector
from listener_operator.runtime.api import JsonDict, KubeApi

__all__ = ["PARAM_PVC_NAME", "PARAM_PVC_NAMESPACE", "ControllerService"]

log = logging.getLogger(__name__)

# Added by the external-provisioner when started with --extra-create-metadata (LO §2.4, §6.3).
PARAM_PVC_NAME = "csi.storage.k8s.io/pvc/name"
PARAM_PVC_NAMESPACE = "csi.storage.k8s.io/pvc/namespace"

_Context = grpc.aio.ServicerContext[Any, Any]


def check_volume_capabilities(capabilities: Any, *, field: str) -> None:
    """At least one capability is required, and only filesystem ("mount") volumes exist here."""
    if not capabilities:
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, f"{field} is required")
    for capability in capabilities:
        if capability.HasField("block"):
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"{field}: block volumes are not supported; listener volumes are filesystem volumes")


def pinned_topology(listener_class: Mapping[str, Any], requirements: csi_pb2.TopologyRequirement
                    ) -> list[csi_pb2.Topology]:
    """The node pin of LO §6.4: only NodePort classes with ``pinnedNodePorts``; the scheduler's node comes first."""
    spec = listener_class.get("spec") or {}
    if spec.get("serviceType") != "NodePort" or not spec.get("pinnedNodePorts"):
        return []
    candidates = list(requirements.preferred) or list(requirements.requisite)
    for topology in candidates:
        if topology.segments.get(TOPOLOGY_KEY_HOSTNAME):
            return [csi_pb2.Topology(segments={TOPOLOGY_KEY_HOSTNAME: topology.segments[TOPOLOGY_KEY_HOSTNAME]})]
    log.warning("ListenerClass %s pins node ports, but CreateVolume carried no %s topology: volume not pinned",
                (listener_class.get("metadata") or {}).get("name"), TOPOLOGY_KEY_HOSTNAME)
    return []


class ControllerService(csi_pb2_grpc.ControllerServicer):  # type: ignore[misc]
    """CreateVolume / DeleteVolume / ControllerGetCapabilities; every other RPC is UNIMPLEMENTED (LO §6.2)."""

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
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "volume_id is required")
        return csi_pb2.DeleteVolumeResponse()

    @csi_rpc
    async def CreateVolume(self, request: csi_pb2.CreateVolumeRequest, context: _Context
                           ) -> csi_pb2.CreateVolumeResponse:
        if not request.name:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "name is required")
        check_volume_capabilities(request.volume_capabilities, field="volume_capabilities")
        pvc_name = request.parameters.get(PARAM_PVC_NAME)
        pvc_namespace = request.parameters.get(PARAM_PVC_NAMESPACE)
        if not pvc_name or not pvc_namespace:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"parameters {PARAM_PVC_NAME} and {PARAM_PVC_NAMESPACE} are required "
                           "(run the external-provisioner with --extra-create-metadata)")
        check_object_name("PersistentVolumeClaim", pvc_name, f"parameter {PARAM_PVC_NAME}")
        check_object_name("Namespace", pvc_namespace, f"parameter {PARAM_PVC_NAMESPACE}")
        pvc = await self._get_pvc(pvc_namespace, pvc_name)
        annotations = {str(k): str(v) for k, v in ((pvc.get("metadata") or {}).get("annotations") or {}).items()}
        source = f"PersistentVolumeClaim {pvc_namespace}/{pvc_name}"
        pvc_ref = object_reference(pvc)
        try:
            selector = decode_selector(annotations, source)
            class_name = await self._class_name(selector, pvc_namespace, source)
            listener_class = await self._get_class(class_name, source)
        except CsiError as error:
            if error.user_error:
                await publish_warning(self._events, pvc_ref, reason="InvalidListenerVolume", note=error_chain(error),
                                      action="Provision")
            raise
        topology = pinned_topology(listener_class, request.accessibility_requirements)
        return csi_pb2.CreateVolumeResponse(volume=csi_pb2.Volume(
            volume_id=request.name,
            capacity_bytes=0,
            volume_context=annotations,
            accessible_topology=topology,
        ))

    async def _get_pvc(self, namespace: str, name: str) -> JsonDict:
        try:
            return await self._api.get(PVC, name, namespace)
        except KUBE_ERRORS as error:
            raise CsiError(grpc.StatusCode.UNAVAILABLE,
                           f"failed to get PersistentVolumeClaim {namespace}/{name}") from error

    async def _class_name(self, selector: ListenerSelector, namespace: str, source: str) -> str:
        if selector.mode == "class":
            return selector.value
        try:
            listener = await self._api.get(LISTENER, selector.value, namespace)
        except KUBE_ERRORS as error:
            missing = api_error_code(error) == 404
            raise CsiError(grpc.StatusCode.UNAVAILABLE,
                           f"{source}: Listener {namespace}/{selector.value} "
                           f"{'not found' if missing else 'could not be read'}", user_error=missing) from error
        class_name = (listener.get("spec") or {}).get("className")
        if not class_name:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"{source}: Listener {namespace}/{selector.value} has no spec.className")
        return check_object_name("ListenerClass", str(class_name),
                                 f"Listener {namespace}/{selector.value} spec.className")

    async def _get_class(self, name: str, source: str) -> JsonDict:
        try:
            return await self._api.get(LISTENER_CLASS, name)
        except KUBE_ERRORS as error:
            missing = api_error_code(error) == 404
            raise CsiError(grpc.StatusCode.UNAVAILABLE,
                           f"{source}: ListenerClass {name} {'not found' if missing else 'could not be read'}",
                           user_error=missing) from error
