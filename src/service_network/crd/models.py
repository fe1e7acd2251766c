"""pydantic models of the ``skupper.io/v2alpha1`` custom resources: the single source of their CRD schemas
(``crd/generate.py``) and the parsers of their ``spec``.

Field names, types, required fields, short names and printer columns are upstream Skupper's (skupper-listener.md
§2-§4), so manifests written for Skupper apply unchanged. As upstream's Go types have ``omitempty`` fields, optional
fields are ``X | None = None`` and the CRDs are generated with ``optional_nullable=False``: an unset field is absent,
and its documented default (``redemptionsAllowed`` 1, ``expirationWindow`` 15m, ``verifyHostname`` false, ...) is
applied by the controller, not by the API server. Docstrings become the descriptions ``kubectl explain`` shows.

All twelve of upstream's kinds are here: Site, Listener, Connector (part 1); RouterAccess, Link, AccessGrant,
AccessToken (part 2); AttachedConnector, AttachedConnectorBinding, MultiKeyListener, Certificate, SecuredAccess
(part 4). ``tests/service_network/crd/test_upstream_crds.py`` holds the generated CRDs to upstream's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

__all__ = [
    "AccessGrantSpec",
    "AccessGrantStatus",
    "AccessTokenSpec",
    "AccessTokenStatus",
    "AttachedConnectorBindingSpec",
    "AttachedConnectorBindingStatus",
    "AttachedConnectorSpec",
    "AttachedConnectorStatus",
    "CertificateSpec",
    "CertificateStatus",
    "Condition",
    "ConnectorSpec",
    "ConnectorStatus",
    "Endpoint",
    "LinkSpec",
    "LinkStatus",
    "ListenerSpec",
    "ListenerStatus",
    "MultiKeyListenerSpec",
    "MultiKeyListenerStatus",
    "RouterAccessSpec",
    "RouterAccessStatus",
    "SecuredAccessSpec",
    "SecuredAccessStatus",
    "SiteSpec",
    "SiteStatus",
]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True,
                              extra="ignore")


Settings = dict[str, str]
Observer = Literal["auto", "none", "http1", "http2"]


class Condition(_Model):
    """A standard Kubernetes condition (metav1.Condition)."""

    type: str = Field(max_length=316, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                                              r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
    """The condition type: Configured, Matched, Running, Resolved, Ready, ..."""

    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""

    observed_generation: int | None = Field(default=None, ge=0, json_schema_extra={"format": "int64"})
    """The metadata.generation the condition was computed from."""

    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    """When status last changed."""

    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """Ready, Pending or Error."""

    message: str = Field(max_length=32768)
    """OK, or what is missing or wrong."""


class _Status(_Model):
    status: str | None = None
    """Pending (being set up or waiting for something), Error (see message) or Ready."""

    message: str | None = None
    """OK when Ready; otherwise the first unmet condition's message."""

    conditions: list[Condition] | None = None
    """The conditions that make up status; Ready is True when all the others are."""


class Endpoint(_Model):
    """A network endpoint (host and port) with the role it plays."""

    name: str | None = None
    """The role (inter-router, edge) or a name."""

    host: str | None = None
    """Host name or IP address."""

    port: str | None = None
    """Port number, as text."""

    group: str | None = None
    """The router group the endpoint belongs to (HA sites have two)."""


# ---- Site ---------------------------------------------------------------------------------------------------------

class SiteSpec(_Model):
    """A site: the router of this namespace and the place its Listeners and Connectors live."""

    service_account: str | None = None
    """ServiceAccount the router Pods run as. When unset, skupper-router is created with the Role it needs."""

    link_access: str | None = None
    """How remote sites may link to this one: none (default), default, or an access type such as loadbalancer or
    nodeport. Links are service network part 2."""

    default_issuer: str | None = None
    """Secret holding the CA that signs link certificates (default skupper-site-ca; part 2)."""

    edge: bool | None = None
    """Run the router in edge mode (it cannot accept links; part 2)."""

    ha: bool | None = None
    """Run two routers (part 2)."""

    settings: Settings | None = None
    """Additional settings by name."""


class LinkRecord(_Model):
    """A link of a site in the network."""

    name: str | None = None
    remote_site_id: str | None = None
    remote_site_name: str | None = None
    operational: bool | None = None


class ServiceRecord(_Model):
    """A routing key seen at a site, with the names of its connectors and listeners there."""

    routing_key: str | None = None
    connectors: list[str] | None = None
    listeners: list[str] | None = None


class SiteRecord(_Model):
    """One site of the network as this site sees it."""

    id: str | None = None
    name: str | None = None
    namespace: str | None = None
    platform: str | None = None
    version: str | None = None
    links: list[LinkRecord] | None = None
    services: list[ServiceRecord] | None = None


class ControllerInfo(_Model):
    """The controller managing this site."""

    name: str | None = None
    namespace: str | None = None
    version: str | None = None


class SiteStatus(_Status):
    """Whether the site's router is configured and running, and what the site knows of the network."""

    default_issuer: str | None = None
    """Secret of the CA in use for link certificates (part 2)."""

    controller: ControllerInfo | None = None
    """The controller managing this site."""

    endpoints: list[Endpoint] | None = None
    """Where remote sites reach this site's router (part 2)."""

    sites_in_network: int | None = None
    """How many sites this site knows of, itself included."""

    network: list[SiteRecord] | None = None
    """The sites of the network with their links and services."""


# ---- Listener and Connector ---------------------------------------------------------------------------------------

class ListenerSpec(_Model):
    """Accepts client connections at host:port in this site and forwards each one to a connector with the same
    routing key."""

    routing_key: str
    """Connections go to connectors with this routing key."""

    host: str
    """The Service that clients connect to (one Service per host; Listeners sharing a host share it, one port
    each). Must be a DNS-1035 label."""

    port: int
    """The Service port clients connect to."""

    tls_credentials: str | None = None
    """Secret (tls.crt, tls.key, optional ca.crt) with which the router terminates client TLS."""

    type: str | None = None
    """Protocol: tcp (the default and the only one supported)."""

    observer: Observer | None = None
    """Protocol observer: auto (default), none, http1 or http2. The router counts HTTP requests by method and status
    class, their latency and bytes (docs/service-network-router.md, "Protocol observers")."""

    expose_pods_by_name: bool | None = None
    """Also expose each Pod behind the routing key as its own Service, named after the Pod."""

    settings: Settings | None = None
    """Additional settings by name (not interpreted)."""


class ListenerStatus(_Status):
    """Whether the Listener is configured and has a connector to send connections to."""

    has_matching_connector: bool | None = None
    """True when at least one connector with this routing key exists."""


class ConnectorSpec(_Model):
    """Receives the connections of listeners with the same routing key and opens each one to a workload: the Pods
    a selector picks, or one host."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["selector"]}, {"required": ["host"]}]})

    routing_key: str
    """Connections of listeners with this routing key arrive here."""

    port: int
    """Port of the Pods or host to connect to."""

    selector: str | None = None
    """Label selector of the Pods (in this namespace) to connect to, e.g. app=backend. Exactly one of selector and
    host is set."""

    host: str | None = None
    """Host name or IP address to connect to, instead of Pods."""

    tls_credentials: str | None = None
    """Secret with the CA (ca.crt) the server's certificate must be signed by, and a client certificate (tls.crt,
    tls.key) for useClientCert: the router then connects with TLS."""

    use_client_cert: bool | None = None
    """Present the client certificate of tlsCredentials (mutual TLS)."""

    verify_hostname: bool | None = None
    """Check that the server's certificate names the host connected to (default false)."""

    type: str | None = None
    """Protocol: tcp (the default and the only one supported)."""

    include_not_ready_pods: bool | None = None
    """Also connect to Running Pods that are not Ready."""

    expose_pods_by_name: bool | None = None
    """Also register each Pod under routing key <routingKey>.<pod name>."""

    settings: Settings | None = None
    """Additional settings by name (not interpreted)."""


class PodDetails(_Model):
    """A Pod the connector connects to."""

    name: str | None = None
    ip: str | None = None


class ConnectorStatus(_Status):
    """Whether the Connector is configured and has a listener sending it connections."""

    has_matching_listener: bool | None = None
    """True when at least one listener with this routing key exists."""

    selected_pods: list[PodDetails] | None = None
    """The Pods connected to (selector mode)."""


# ---- part 2: RouterAccess, Link, AccessGrant, AccessToken ---------------------------------------------------------

class RouterAccessRole(_Model):
    """A role of the router endpoint and its port."""

    name: str
    """inter-router or edge (required, as upstream)."""

    port: int | None = None
    """Port (defaults: inter-router 55671, edge 45671)."""


class RouterAccessSpec(_Model):
    """An endpoint of this site's router that remote routers link to, with mutual TLS (part 2)."""

    roles: list[RouterAccessRole]
    """The roles served and their ports."""

    generate_tls_credentials: bool | None = None
    """Create the server certificate Secret (signed by issuer) when it does not exist."""

    issuer: str | None = None
    """Secret of the CA that signs the generated certificate."""

    access_type: str | None = None
    """How the endpoint is exposed: loadbalancer, nodeport, route, ..."""

    tls_credentials: str
    """Secret with the server certificate, key and the CA that client certificates must be signed by."""

    bind_host: str | None = None
    """Address the router binds."""

    subject_alternative_names: list[str] | None = None
    """Extra names for the generated certificate."""

    settings: Settings | None = None
    """Additional settings by name."""


class RouterAccessStatus(_Status):
    """Where the endpoint is reachable."""

    endpoints: list[Endpoint] | None = None
    """The resolved endpoints."""


class LinkSpec(_Model):
    """An outgoing link from this site's router to a remote site (part 2)."""

    endpoints: list[Endpoint]
    """The remote router's endpoints."""

    tls_credentials: str | None = None
    """Secret with the client certificate, key and the remote site's CA."""

    cost: int | None = None
    """Path cost of the link (values below 1 count as 1)."""

    settings: Settings | None = None
    """Additional settings by name."""


class LinkStatus(_Status):
    """Whether the link is up, and to which site."""

    remote_site_id: str | None = None
    remote_site_name: str | None = None


class AccessGrantSpec(_Model):
    """Permission for remote sites to redeem access tokens for links to this site (part 2)."""

    redemptions_allowed: int | None = None
    """How many times tokens of this grant may be redeemed (default 1)."""

    expiration_window: str | None = Field(default=None, json_schema_extra={"format": "duration"})
    """How long tokens of this grant may be redeemed (default 15m)."""

    code: str | None = Field(default=None, min_length=24)
    """The secret code tokens must present (generated when unset; at least 24 characters, the length of a
    generated one, so that it cannot be guessed)."""

    issuer: str | None = None
    """Secret of the CA that signs the certificates of redeemed tokens (default: the Site's defaultIssuer)."""

    settings: Settings | None = None
    """Additional settings by name."""


class AccessGrantStatus(_Status):
    """What a token for this grant needs, and how it has been used."""

    url: str | None = None
    """Where tokens are redeemed."""

    code: str | None = None
    """The secret code."""

    ca: str | None = None
    """The CA of the redemption service's certificate (PEM)."""

    redemptions: int | None = None
    """Redemptions so far."""

    expiration_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the grant expires."""


class AccessTokenSpec(_Model):
    """A token to redeem at a remote site's grant for a link (part 2)."""

    url: str
    """Where to redeem it."""

    code: str
    """The grant's secret code."""

    ca: str
    """The CA of the redemption service's certificate (PEM)."""

    link_cost: int | None = None
    """Cost of the link created."""

    settings: Settings | None = None
    """Additional settings by name."""


class AccessTokenStatus(_Status):
    """Whether the token has been redeemed."""

    redeemed: bool | None = None
    """True once redeemed; a token is used once."""


# ---- part 4: AttachedConnector, AttachedConnectorBinding, MultiKeyListener, Certificate, SecuredAccess ------------

class AttachedConnectorSpec(_Model):
    """A connector declared in a workload's namespace and attached to the site of another namespace, which binds it
    with an AttachedConnectorBinding of the same name: the workload joins the network without a site of its own."""

    site_namespace: str
    """The namespace of the site this connector is attached to (it holds the AttachedConnectorBinding)."""

    port: int
    """Port of the Pods to connect to."""

    selector: str
    """Label selector of the Pods (in this namespace) to connect to, e.g. app=backend."""

    tls_credentials: str | None = None
    """Secret in the site's namespace with the CA the server's certificate must be signed by (and a client
    certificate for useClientCert): the router then connects with TLS."""

    use_client_cert: bool | None = None
    """Present the client certificate of tlsCredentials (mutual TLS; default false)."""

    type: str | None = None
    """Protocol: tcp (the default and the only one supported)."""

    include_not_ready_pods: bool | None = None
    """Also connect to Running Pods that are not Ready (default false)."""

    settings: Settings | None = None
    """Additional settings by name (not interpreted)."""


class AttachedConnectorStatus(_Status):
    """Whether the site bound this connector, and the Pods it connects to."""

    selected_pods: list[PodDetails] | None = None
    """The Pods connected to."""


class AttachedConnectorBindingSpec(_Model):
    """The site's side of an AttachedConnector of the same name in another namespace: the routing key it serves
    under. Only the site's namespace decides what joins its network."""

    connector_namespace: str
    """The namespace of the AttachedConnector."""

    routing_key: str
    """Connections of listeners with this routing key go to the AttachedConnector's Pods."""

    expose_pods_by_name: bool | None = None
    """Also register each Pod under routing key <routingKey>.<pod name>."""

    settings: Settings | None = None
    """Additional settings by name (not interpreted)."""


class AttachedConnectorBindingStatus(_Status):
    """Whether the binding found its AttachedConnector, and whether a listener sends it connections."""

    has_matching_listener: bool | None = None
    """True when at least one listener in the network has this routing key."""


_ONE_STRATEGY: dict[str, JsonValue] = {"message": "exactly one of the fields in [priority weighted] must be set",
                 "rule": "[has(self.priority),has(self.weighted)].filter(x,x==true).size() == 1"}


class PriorityStrategy(_Model):
    """Every connection goes to the first routing key that has a reachable connector."""

    routing_keys: list[str] = Field(min_length=1, max_length=256, json_schema_extra={"x-kubernetes-list-type": "set"})
    """Routing keys, highest priority first."""


class WeightedStrategy(_Model):
    """Connections are spread over the reachable routing keys in proportion to their weights."""

    routing_keys: dict[str, int] = Field(json_schema_extra={"minProperties": 1, "maxProperties": 256,
                                                            "x-kubernetes-map-type": "granular"})
    """Routing keys and their weights."""


class MultiKeyStrategy(_Model):
    """How connections are spread over routing keys: priority or weighted (exactly one; it cannot change)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"message": "strategy is immutable",
         "rule": "(!has(oldSelf.priority) || has(self.priority)) && (!has(oldSelf.weighted) || has(self.weighted))"},
        _ONE_STRATEGY]})

    priority: PriorityStrategy | None = None
    """Failover: the first key with a reachable connector takes every connection."""

    weighted: WeightedStrategy | None = None
    """Spread by weight over the keys with a reachable connector."""


class MultiKeyListenerSpec(_Model):
    """Accepts client connections at host:port in this site and forwards each one to connectors of several routing
    keys, chosen by a strategy."""

    host: str
    """The Service that clients connect to (a DNS-1035 label)."""

    port: int
    """The Service port clients connect to."""

    strategy: MultiKeyStrategy
    """How connections are spread over the routing keys."""

    tls_credentials: str | None = None
    """Secret (tls.crt, tls.key, optional ca.crt) with which the router terminates client TLS."""

    require_client_cert: bool | None = None
    """Clients must present a certificate signed by tlsCredentials' ca.crt."""

    observer: Observer | None = None
    """Protocol observer: auto (default), none, http1 or http2."""

    settings: Settings | None = None
    """Additional settings by name (not interpreted)."""


class PriorityStrategyStatus(_Model):
    routing_keys_reachable: list[str]
    """The routing keys with a reachable connector, highest priority first."""


class WeightedStrategyStatus(_Model):
    routing_keys_reachable: dict[str, int] = Field(json_schema_extra={"x-kubernetes-map-type": "granular"})
    """The routing keys with a reachable connector, with their weights."""


class MultiKeyStrategyStatus(_Model):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_ONE_STRATEGY]})

    priority: PriorityStrategyStatus | None = None
    weighted: WeightedStrategyStatus | None = None


class MultiKeyListenerStatus(_Status):
    """Whether the listener is configured and which of its routing keys can be reached."""

    has_destination: bool | None = None
    """True when at least one of the strategy's routing keys has a reachable connector."""

    strategy: MultiKeyStrategyStatus | None = None
    """The reachable routing keys."""


class CertificateSpec(_Model):
    """A certificate and key kept in the Secret of the same name, signed by a CA Secret (or self-signed)."""

    ca: str
    """Secret of the CA that signs the certificate (empty: the Site's default issuer; a CA (signing) with none is
    self-signed)."""

    subject: str
    """The subject's common name."""

    hosts: list[str] | None = None
    """DNS names and IP addresses the certificate is valid for."""

    client: bool | None = None
    """Valid for TLS clients."""

    server: bool | None = None
    """Valid for TLS servers."""

    signing: bool | None = None
    """A CA that signs other certificates."""

    settings: Settings | None = None
    """Additional settings by name (not interpreted)."""


class CertificateStatus(_Status):
    """Whether the Secret holds a certificate as specified, and when it expires."""

    expiration: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the certificate expires (it is renewed before)."""


class SecuredAccessPort(_Model):
    """A port exposed by a SecuredAccess."""

    name: str
    """The Service port's name."""

    port: int
    """The port clients connect to."""

    target_port: int | None = None
    """The Pods' port (default: port)."""

    protocol: str | None = None
    """TCP (default) or UDP."""


class SecuredAccessSpec(_Model):
    """Selected Pods' ports exposed through an access type, with a server certificate from a CA."""

    selector: dict[str, str]
    """Labels of the Pods exposed."""

    ports: list[SecuredAccessPort]
    """The ports exposed."""

    issuer: str | None = None
    """Secret of the CA that signs the server certificate (default: the site CA)."""

    certificate: str | None = None
    """The Certificate (and Secret) name of the server certificate (default: the SecuredAccess' name)."""

    access_type: str | None = None
    """How the ports are exposed: loadbalancer, nodeport, local, ... (default: the controller's)."""

    settings: Settings | None = None
    """Additional settings by name (not interpreted)."""


class SecuredAccessStatus(_Status):
    """Where the ports are reachable, and the CA their certificate is signed by."""

    endpoints: list[Endpoint] | None = None
    """The resolved endpoints."""

    ca: str | None = None
    """The CA certificate (PEM) clients verify the server with."""
