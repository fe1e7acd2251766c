"""The ``skupper.io/v2alpha1`` CustomResourceDefinitions, generated from ``crd/models.py`` by
:mod:`operator_runtime.crdgen`, with upstream's names, scope, short names and printer columns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from operator_runtime import crdgen

from ..constants import API_GROUP, API_VERSION, OBSERVABILITY_GROUP
from .models import (
    AccessGrantSpec,
    AccessGrantStatus,
    AccessTokenSpec,
    AccessTokenStatus,
    AttachedConnectorBindingSpec,
    AttachedConnectorBindingStatus,
    AttachedConnectorSpec,
    AttachedConnectorStatus,
    CertificateSpec,
    CertificateStatus,
    ConnectorSpec,
    ConnectorStatus,
    LinkSpec,
    LinkStatus,
    ListenerSpec,
    ListenerStatus,
    MultiKeyListenerSpec,
    MultiKeyListenerStatus,
    RouterAccessSpec,
    RouterAccessStatus,
    SecuredAccessSpec,
    SecuredAccessStatus,
    SiteSpec,
    SiteStatus,
)

__all__ = ["all_crds", "crds_yaml", "installed_crds", "network_observer_crd"]


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return crdgen.structural_schema(model, optional_nullable=False)


def _column(name: str, type_: str, path: str, description: str) -> dict[str, Any]:
    return {"name": name, "type": type_, "description": description, "jsonPath": path}


_STATUS = _column("Status", "string", ".status.status", "Pending, Error or Ready")
_MESSAGE = _column("Message", "string", ".status.message", "OK, or what is missing or wrong")


def _crd(kind: str, plural: str, description: str, spec: type[BaseModel], status: type[BaseModel],
         columns: list[dict[str, Any]], short_names: tuple[str, ...] = (), spec_required: bool = False
         ) -> dict[str, Any]:
    schema = crdgen.object_schema(description, {"spec": _schema(spec), "status": _schema(status)},
                                  ["spec"] if spec_required else ())
    return crdgen.custom_resource_definition(group=API_GROUP, version=API_VERSION, kind=kind, plural=plural,
                                             singular=kind.lower(), scope="Namespaced", schema=schema, status=True,
                                             columns=columns, short_names=short_names)


def site_crd() -> dict[str, Any]:
    return _crd("Site", "sites", "A site of a service network: the router of its namespace, which the namespace's "
                "Listeners and Connectors configure. One Site per namespace is active.", SiteSpec, SiteStatus,
                [_STATUS, _column("Sites In Network", "integer", ".status.sitesInNetwork",
                                  "How many sites this site knows of"), _MESSAGE], ("st",))


def listener_crd() -> dict[str, Any]:
    return _crd("Listener", "listeners", "Accepts connections from clients in this site and forwards them to "
                "connectors with the same routing key, in this site or a linked one.", ListenerSpec, ListenerStatus,
                [_column("Routing Key", "string", ".spec.routingKey", "Matches listeners and connectors"),
                 _column("Port", "integer", ".spec.port", "The port clients connect to"),
                 _column("Host", "string", ".spec.host", "The Service clients connect to"),
                 _STATUS,
                 _column("Has Matching Connector", "boolean", ".status.hasMatchingConnector",
                         "Whether a connector with the routing key exists"),
                 _MESSAGE], ("lnr",))


def connector_crd() -> dict[str, Any]:
    return _crd("Connector", "connectors", "Opens the connections of listeners with the same routing key to a "
                "workload in this site: the Pods a selector picks, or a host.", ConnectorSpec, ConnectorStatus,
                [_column("Routing Key", "string", ".spec.routingKey", "Matches listeners and connectors"),
                 _column("Port", "integer", ".spec.port", "The port connected to"),
                 _column("Host", "string", ".spec.host", "The host connected to"),
                 _column("Selector", "string", ".spec.selector", "The Pods connected to"),
                 _STATUS,
                 _column("Has Matching Listener", "boolean", ".status.hasMatchingListener",
                         "Whether a listener with the routing key exists"),
                 _MESSAGE], ("cnr",))


def router_access_crd() -> dict[str, Any]:
    return _crd("RouterAccess", "routeraccesses", "An endpoint of this site's router that remote sites link to "
                "(mutual TLS).", RouterAccessSpec, RouterAccessStatus, [_STATUS, _MESSAGE])


def link_crd() -> dict[str, Any]:
    return _crd("Link", "links", "A link from this site's router to a remote site's router.", LinkSpec, LinkStatus,
                [_STATUS, _column("Remote Site", "string", ".status.remoteSiteName", "The site linked to"),
                 _MESSAGE], ("ln",))


def access_grant_crd() -> dict[str, Any]:
    return _crd("AccessGrant", "accessgrants", "Lets remote sites redeem access tokens for links to this site, a "
                "limited number of times within a time window.", AccessGrantSpec, AccessGrantStatus,
                [_column("Redemptions Allowed", "integer", ".spec.redemptionsAllowed", "How often tokens may be "
                         "redeemed"),
                 _column("Redemptions Made", "integer", ".status.redemptions", "How often tokens were redeemed"),
                 _column("Expiration", "string", ".status.expirationTime", "When the grant expires"),
                 _STATUS, _MESSAGE], ("grant", "gr"))


def access_token_crd() -> dict[str, Any]:
    return _crd("AccessToken", "accesstokens", "A short-lived credential, redeemed at a remote site's grant for a "
                "link to that site.", AccessTokenSpec, AccessTokenStatus,
                [_column("URL", "string", ".spec.url", "Where the token is redeemed"),
                 _column("Redeemed", "boolean", ".status.redeemed", "Whether the token was redeemed"),
                 _STATUS, _MESSAGE], ("token", "to"))


def attached_connector_crd() -> dict[str, Any]:
    return _crd("AttachedConnector", "attachedconnectors", "A connector in a workload's namespace, attached to the "
                "site of another namespace by the AttachedConnectorBinding of the same name there.",
                AttachedConnectorSpec, AttachedConnectorStatus,
                [_column("Port", "integer", ".spec.port", "The port connected to"),
                 _column("Selector", "string", ".spec.selector", "The Pods connected to"),
                 _column("Site Namespace", "string", ".spec.siteNamespace", "The namespace of the site"),
                 _STATUS], ("acnr",))


def attached_connector_binding_crd() -> dict[str, Any]:
    return _crd("AttachedConnectorBinding", "attachedconnectorbindings", "The site's side of an AttachedConnector "
                "of the same name in another namespace: the routing key it serves under.",
                AttachedConnectorBindingSpec, AttachedConnectorBindingStatus,
                [_column("Routing Key", "string", ".spec.routingKey", "Matches listeners and connectors"),
                 _column("Connector Namespace", "string", ".spec.connectorNamespace",
                         "The namespace of the AttachedConnector"),
                 _STATUS,
                 _column("Has Matching Listener", "boolean", ".status.hasMatchingListener",
                         "Whether a listener with the routing key exists")], ("acnrb",))


def multi_key_listener_crd() -> dict[str, Any]:
    return _crd("MultiKeyListener", "multikeylisteners", "Accepts connections from clients in this site and "
                "forwards them to connectors of several routing keys, by priority or by weight.",
                MultiKeyListenerSpec, MultiKeyListenerStatus,
                [_STATUS, _MESSAGE,
                 _column("HasDestination", "boolean", ".status.hasDestination",
                         "Whether a connector of one of the routing keys is reachable")], spec_required=True)


def certificate_crd() -> dict[str, Any]:
    return _crd("Certificate", "certificates", "A certificate and key in the Secret of the same name, signed by a "
                "CA, renewed before it expires.", CertificateSpec, CertificateStatus,
                [_column("CA", "string", ".spec.ca", "The CA that signs the certificate"),
                 _column("Server", "boolean", ".spec.server", "Valid for servers"),
                 _column("Client", "boolean", ".spec.client", "Valid for clients"),
                 _column("Signing", "boolean", ".spec.signing", "A CA"),
                 _STATUS,
                 _column("Expiration", "string", ".status.expiration", "When the certificate expires"),
                 _MESSAGE])


def secured_access_crd() -> dict[str, Any]:
    return _crd("SecuredAccess", "securedaccesses", "Selected Pods' ports exposed through an access type with a "
                "server certificate signed by a CA.", SecuredAccessSpec, SecuredAccessStatus, [_STATUS, _MESSAGE])


def all_crds() -> list[dict[str, Any]]:
    """Every ``skupper.io`` CRD, Site first."""
    return [site_crd(), listener_crd(), connector_crd(), router_access_crd(), link_crd(), access_grant_crd(),
            access_token_crd(), attached_connector_crd(), attached_connector_binding_crd(), multi_key_listener_crd(),
            certificate_crd(), secured_access_crd()]


def network_observer_crd() -> dict[str, Any]:
    """``networkobservers.observability.skupper.io``, as upstream's: spec and status are free-form (the spec is the
    values of upstream's network-observer chart; :mod:`service_network.networkobserver.values` checks them)."""
    free = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema = crdgen.object_schema("A network observer of the site in its namespace: the API, metrics and console of "
                                  "the network the site's router sees. The spec takes the values of upstream's "
                                  "network-observer chart.", {"spec": dict(free), "status": dict(free)}, ())
    return crdgen.custom_resource_definition(group=OBSERVABILITY_GROUP, version=API_VERSION, kind="NetworkObserver",
                                             plural="networkobservers", singular="networkobserver",
                                             scope="Namespaced", schema=schema, status=True)


def installed_crds() -> list[dict[str, Any]]:
    """What an install applies: the ``skupper.io`` CRDs, then ``observability.skupper.io``'s NetworkObserver."""
    return [*all_crds(), network_observer_crd()]


def crds_yaml() -> str:
    return crdgen.crds_yaml(installed_crds())
