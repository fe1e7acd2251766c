"""Where each kind lives on the API server: :class:`ResourceInfo`, and the built-in kinds our operators use.

One descriptor per kind, written once; an operator adds its own custom kinds next to these (e.g.
``listener_operator.kinds``). Paths are built here, with every name percent-encoded, so a hostile object name can
never change which URL a request goes to.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

__all__ = [
    "CONFIG_MAP",
    "CRD",
    "DEPLOYMENT",
    "ENDPOINT_SLICE",
    "EVENT",
    "LEASE",
    "NAMESPACE",
    "NODE",
    "POD",
    "PV",
    "PVC",
    "ROLE",
    "ROLE_BINDING",
    "SECRET",
    "SERVICE",
    "SERVICE_ACCOUNT",
    "ResourceInfo",
]


@dataclass(frozen=True)
class ResourceInfo:
    """A kind's ``apiVersion``, ``kind``, plural resource name and scope."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def base_path(self) -> str:
        return f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        parts = [self.base_path]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{_segment(namespace)}")
        parts.append(self.plural)
        if name is not None:
            parts.append(_segment(name))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


def _segment(value: str) -> str:
    """Percent-encode a path segment so that hostile names cannot change the URL."""
    if not value or value in (".", ".."):
        raise ValueError(f"invalid object name or namespace {value!r}")
    return quote(value, safe="")


NAMESPACE = ResourceInfo("v1", "Namespace", "namespaces", namespaced=False)
NODE = ResourceInfo("v1", "Node", "nodes", namespaced=False)
POD = ResourceInfo("v1", "Pod", "pods", namespaced=True)
SERVICE = ResourceInfo("v1", "Service", "services", namespaced=True)
CONFIG_MAP = ResourceInfo("v1", "ConfigMap", "configmaps", namespaced=True)
SECRET = ResourceInfo("v1", "Secret", "secrets", namespaced=True)
SERVICE_ACCOUNT = ResourceInfo("v1", "ServiceAccount", "serviceaccounts", namespaced=True)
DEPLOYMENT = ResourceInfo("apps/v1", "Deployment", "deployments", namespaced=True)
ROLE = ResourceInfo("rbac.authorization.k8s.io/v1", "Role", "roles", namespaced=True)
ROLE_BINDING = ResourceInfo("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", namespaced=True)
PV = ResourceInfo("v1", "PersistentVolume", "persistentvolumes", namespaced=False)
PVC = ResourceInfo("v1", "PersistentVolumeClaim", "persistentvolumeclaims", namespaced=True)
ENDPOINT_SLICE = ResourceInfo("discovery.k8s.io/v1", "EndpointSlice", "endpointslices", namespaced=True)
LEASE = ResourceInfo("coordination.k8s.io/v1", "Lease", "leases", namespaced=True)
EVENT = ResourceInfo("events.k8s.io/v1", "Event", "events", namespaced=True)
CRD = ResourceInfo("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions",
                   namespaced=False)
