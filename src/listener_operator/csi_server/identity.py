"""CSI Identity service, served in both modes (behaviour.md "Identity service")."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.wrappers_pb2 import BoolValue

from csi_proto import csi_pb2, csi_pb2_grpc
from listener_operator import __version__
from listener_operator.constants import DRIVER_NAME

__all__ = ["IdentityService"]

_Context = grpc.aio.ServicerContext[Any, Any]


class IdentityService(csi_pb2_grpc.IdentityServicer):  # type: ignore[misc]
    """Names the driver and advertises the controller service and topology support.

    The capabilities are the same in node mode: kubelet and the registrar only read the name there, and the
    external-provisioner (controller mode) needs ``VOLUME_ACCESSIBILITY_CONSTRAINTS`` to pass topology for pinning.
    """

    async def GetPluginInfo(self, request: csi_pb2.GetPluginInfoRequest, context: _Context
                            ) -> csi_pb2.GetPluginInfoResponse:
        return csi_pb2.GetPluginInfoResponse(name=DRIVER_NAME, vendor_version=__version__)

    async def GetPluginCapabilities(self, request: csi_pb2.GetPluginCapabilitiesRequest, context: _Context
                                    ) -> csi_pb2.GetPluginCapabilitiesResponse:
        service = csi_pb2.PluginCapability.Service
        return csi_pb2.GetPluginCapabilitiesResponse(capabilities=[
            csi_pb2.PluginCapability(service=service(type=service.CONTROLLER_SERVICE)),
            csi_pb2.PluginCapability(service=service(type=service.VOLUME_ACCESSIBILITY_CONSTRAINTS)),
        ])

    async def Probe(self, request: csi_pb2.ProbeRequest, context: _Context) -> csi_pb2.ProbeResponse:
        return csi_pb2.ProbeResponse(ready=BoolValue(value=True))
