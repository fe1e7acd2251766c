"""CSI v1 protocol stubs shared by kubesim and the listener operator.

``csi.proto`` is written from the CSI specification (see its header for the version); ``csi_pb2`` (messages),
``csi_pb2_grpc`` (servicers, stubs, ``add_*Servicer_to_server``) are generated from it by
``python -m csi_proto.regenerate`` and committed.
"""

from csi_proto import csi_pb2, csi_pb2_grpc

SPEC_VERSION = "1.10.0"

__all__ = ["SPEC_VERSION", "csi_pb2", "csi_pb2_grpc"]
