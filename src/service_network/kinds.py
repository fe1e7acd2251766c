"""Where the ``skupper.io/v2alpha1`` kinds live on the API server."""

from __future__ import annotations

from operator_runtime.kinds import ResourceInfo

from .constants import GROUP_VERSION, OBSERVABILITY_GROUP_VERSION

SITE = ResourceInfo(GROUP_VERSION, "Site", "sites", namespaced=True)
LISTENER = ResourceInfo(GROUP_VERSION, "Listener", "listeners", namespaced=True)
CONNECTOR = ResourceInfo(GROUP_VERSION, "Connector", "connectors", namespaced=True)
ROUTER_ACCESS = ResourceInfo(GROUP_VERSION, "RouterAccess", "routeraccesses", namespaced=True)
LINK = ResourceInfo(GROUP_VERSION, "Link", "links", namespaced=True)
ACCESS_GRANT = ResourceInfo(GROUP_VERSION, "AccessGrant", "accessgrants", namespaced=True)
ACCESS_TOKEN = ResourceInfo(GROUP_VERSION, "AccessToken", "accesstokens", namespaced=True)
ATTACHED_CONNECTOR = ResourceInfo(GROUP_VERSION, "AttachedConnector", "attachedconnectors", namespaced=True)
ATTACHED_CONNECTOR_BINDING = ResourceInfo(GROUP_VERSION, "AttachedConnectorBinding", "attachedconnectorbindings",
                                          namespaced=True)
MULTI_KEY_LISTENER = ResourceInfo(GROUP_VERSION, "MultiKeyListener", "multikeylisteners", namespaced=True)
CERTIFICATE = ResourceInfo(GROUP_VERSION, "Certificate", "certificates", namespaced=True)
SECURED_ACCESS = ResourceInfo(GROUP_VERSION, "SecuredAccess", "securedaccesses", namespaced=True)
NETWORK_OBSERVER = ResourceInfo(OBSERVABILITY_GROUP_VERSION, "NetworkObserver", "networkobservers", namespaced=True)
