"""The declarative router configuration: what the site controller writes (ConfigMap key ``router.json``) and what
the router adaptor reads, as JSON. ``parse_config(text)`` validates it fully or raises ``ConfigError`` naming every
bad field; nothing from an invalid document is applied.

Version 1. Sections ``routerAccess`` (the endpoints other routers link to, one per role: ``inter-router`` and
``edge``; mutual TLS) and ``links`` (outgoing links to other routers' access, with cost and role) carry the service network across sites (docs/service-network-router.md); the router
computes its routes itself. ``remoteRoutes`` is still read (documents written for the HAProxy engine, which took
routes in the document) and checked, but nothing uses it: the adaptor hands the router an empty list.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from .errors import ConfigError, truncate
from .names import encode_name, is_ip_address

__all__ = [
    "CONFIG_VERSION",
    "Connector",
    "Link",
    "Listener",
    "MetricsEndpoint",
    "Peer",
    "RemoteRoute",
    "RouterAccess",
    "RouterConfig",
    "RouterSettings",
    "SecretRef",
    "Site",
    "Target",
    "TlsFiles",
    "TlsProfile",
    "is_ip_address",
    "parse_config",
    "with_bind_host",
]

CONFIG_VERSION = 1
MAX_NAME = 4096          # names and routing keys: any text up to this length (encoded before use)
MAX_CONFIG_BYTES = 16 * 1024 * 1024
_DNS_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?")


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True,
                              strict=True)


Name = Field(min_length=1, max_length=MAX_NAME)


class Site(_Model):
    """The site this router belongs to (Site UID and name; reported in the network status and traffic reports)."""

    id: str = Field(min_length=1, max_length=253)
    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = Field(default=None, max_length=253)


class MetricsEndpoint(_Model):
    """The router's own HTTP endpoint (as skupper-router's port 9090): ``/metrics``, ``/healthz``."""

    host: str = ""
    port: int = Field(ge=1, le=65535)


class RouterLimits(_Model):
    """What linked routers may make the router hold (docs/service-network-router.md, "Trust")."""

    keys_per_router: int = Field(default=2000, ge=1, le=1_000_000)
    routers: int = Field(default=256, ge=2, le=100_000)
    links_per_router: int = Field(default=256, ge=1, le=100_000)
    names_per_key: int = Field(default=1000, ge=1, le=1_000_000)
    handshakes: int = Field(default=256, ge=1, le=1_000_000)
    handshake_timeout_seconds: int = Field(default=10, ge=1, le=3600)


class RouterSettings(_Model):
    #: this router's identity in the network (unique network-wide); default: the site id. Two routers of one site
    #: (Site.spec.ha) get different ids, e.g. ``<site uid>/skupper-router-2``.
    id: str | None = Field(default=None, min_length=1, max_length=253)
    metrics: MetricsEndpoint | None = None
    reserved_ports: tuple[int, ...] = ()          # ports no Listener may use (router access, metrics, ...)
    connect_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    max_connections: int | None = Field(default=None, ge=1, le=10_000_000)
    threads: int | None = Field(default=None, ge=1, le=64)
    #: the copy buffer of a TLS client or target connection in bytes; default 65536
    buffer_size: int | None = Field(default=None, ge=16_384, le=1_048_576)
    #: accepted for documents written for the HAProxy engine; no effect (the router reconfigures in place)
    old_worker_grace_seconds: int | None = Field(default=None, ge=1, le=2_000_000)
    #: TLS connections per link (the router spreads streams over them); default 2
    data_connections: int | None = Field(default=None, ge=1, le=16)
    limits: RouterLimits | None = None


class TlsFiles(_Model):
    ca: str | None = Field(default=None, min_length=1, max_length=4096)
    cert: str | None = Field(default=None, min_length=1, max_length=4096)
    key: str | None = Field(default=None, min_length=1, max_length=4096)


class SecretRef(_Model):
    name: str = Field(min_length=1, max_length=253)


class TlsProfile(_Model):
    """TLS material, from files (``files``) or from a Kubernetes Secret (``secret``, resolved by the adaptor)."""

    name: str = Name
    files: TlsFiles | None = None
    secret: SecretRef | None = None

    @model_validator(mode="after")
    def _one_source(self) -> TlsProfile:
        if (self.files is None) == (self.secret is None):
            raise ValueError("exactly one of files and secret must be set")
        return self


Observer = Literal["auto", "none", "http1", "http2"]


MAX_STRATEGY_KEYS = 256


class WeightedKey(_Model):
    key: str = Name
    weight: int = Field(ge=0, le=2**32 - 1)


class Strategy(_Model):
    """Several routing keys for one listener (a MultiKeyListener): ``priority`` (the first key with a reachable
    connector takes every connection) or ``weighted`` (spread over the reachable keys by weight); exactly one."""

    priority: tuple[Annotated[str, Name], ...] | None = Field(default=None, min_length=1,
                                                              max_length=MAX_STRATEGY_KEYS)
    weighted: tuple[WeightedKey, ...] | None = Field(default=None, min_length=1, max_length=MAX_STRATEGY_KEYS)

    @model_validator(mode="after")
    def _exactly_one(self) -> Strategy:
        if (self.priority is None) == (self.weighted is None):
            raise ValueError("exactly one of priority and weighted must be set")
        keys = self.keys
        if len(set(keys)) != len(keys):
            raise ValueError("a routing key is named twice")
        return self

    @model_serializer(mode="wrap")
    def _only_the_one_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}   # the router reads a tagged enum

    @property
    def keys(self) -> tuple[str, ...]:
        return self.priority if self.priority is not None else tuple(w.key for w in self.weighted or ())


class Listener(_Model):
    """A router frontend (Skupper ``tcpListener``): accepts connections for ``routingKey`` while it has a target;
    with a ``strategy``, for its routing keys instead (``routingKey`` then only labels its metrics)."""

    name: str = Name
    routing_key: str = Name
    host: str = ""                        # an IP address; "" = all interfaces
    port: int = Field(ge=1, le=65535)
    tls_profile: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)
    authenticate_peer: bool = False       # require a client certificate signed by the profile's CA
    observer: Observer | None = None      # protocol observer (router: HTTP/1, HTTP/2 request metrics); None = auto
    strategy: Strategy | None = None


class Target(_Model):
    """One endpoint of a Connector (a Pod, or the Connector's host)."""

    host: str = Field(min_length=1, max_length=253)
    name: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)  # default: host
    process_id: str | None = Field(default=None, max_length=253)               # Pod UID, reported only

    @property
    def key(self) -> str:
        return self.name if self.name is not None else self.host


class Connector(_Model):
    """Targets for ``routingKey`` (Skupper ``tcpConnector`` entities, one per target)."""

    name: str = Name
    routing_key: str = Name
    port: int = Field(ge=1, le=65535)
    tls_profile: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)
    use_client_cert: bool = False
    verify_hostname: bool = True
    targets: tuple[Target, ...] = ()


TlsVersion = Literal["1.3", "1.2"]


AccessRole = Literal["inter-router", "edge"]


class RouterAccess(_Model):
    """An endpoint of the router that other routers link to (Skupper RouterAccess, one entry per role: role
    ``inter-router``, and ``edge`` on its own port as upstream's interior offers it to edge routers, served alike):
    mutual TLS with the site CA (TLS 1.3 unless ``minTlsVersion``); linking routers' connections join a link (docs:
    "Links")."""

    name: str = Name
    role: AccessRole = "inter-router"
    host: str = ""                        # an IP address; "" = all interfaces
    port: int = Field(default=55671, ge=1, le=65535)
    tls_profile: str = Field(min_length=1, max_length=MAX_NAME)   # server certificate + key, and the site CA
    #: lowest TLS version accepted from linking routers: "1.3" (default) or "1.2" (resumed TLS 1.2 handshakes
    #: need no key exchange: about 1.5 times the new connections per second here, see docs)
    min_tls_version: TlsVersion = "1.3"


class Link(_Model):
    """An outgoing link to another router's access (Skupper Link): where it is, the client certificate and the
    remote site's CA (``tlsProfile``), and its cost (values below 1 count as 1, as upstream)."""

    name: str = Name
    host: str = Field(min_length=1, max_length=253)    # IP or DNS name of the remote router access
    port: int = Field(default=55671, ge=1, le=65535)
    tls_profile: str = Field(min_length=1, max_length=MAX_NAME)   # client certificate + key, and the remote CA
    cost: int = Field(default=1, ge=-(2**31), le=2**31 - 1)
    #: highest TLS version offered: "1.3" (default; TLS 1.3 only) or "1.2" (TLS 1.2 only, for the connection rate)
    tls_version: TlsVersion = "1.3"
    #: the role this router links in: "inter-router" (default) or "edge" (a Site with ``spec.edge: true``)
    role: AccessRole = "inter-router"

    @model_serializer(mode="wrap")
    def _role_when_edge(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # ``role`` only when it is not the default: a document without it reads the same to a router of an earlier
        # version (which refuses unknown fields)
        out: dict[str, Any] = handler(self)
        if self.role == "inter-router":
            out.pop("role", None)
        return out

    @property
    def effective_cost(self) -> int:
        return max(1, self.cost)


#: peers a document may list (identities issued or bound by the site, and credentials not bound yet)
MAX_PEERS = 10_000


class Peer(_Model):
    """A certificate that may link to this router's access, and the identity it speaks as (docs: "Trust"):
    ``identity`` set: only as that identity (router ids ``identity`` or ``identity/<name>``), whatever its common
    name; ``identity`` None: a credential not bound yet, which binds to the first router that links with it and is
    not already known. A certificate not listed speaks as its common name."""

    certificate: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")     # SHA-256 of its public key (DER SPKI)
    identity: str | None = Field(default=None, min_length=1, max_length=253)


class RemoteRoute(_Model):
    """``routingKey`` is reachable through ``link`` at path cost ``cost``: read from documents written for the
    HAProxy engine and checked (the link must exist); the router computes its routes itself and ignores these."""

    routing_key: str = Name
    link: str = Name
    cost: int = Field(default=1, ge=1, le=2**31 - 1)


class RouterConfig(_Model):
    version: int
    site: Site
    router: RouterSettings = RouterSettings()
    tls_profiles: tuple[TlsProfile, ...] = ()
    listeners: tuple[Listener, ...] = ()
    connectors: tuple[Connector, ...] = ()
    router_access: tuple[RouterAccess, ...] = ()
    links: tuple[Link, ...] = ()
    remote_routes: tuple[RemoteRoute, ...] = ()
    peers: tuple[Peer, ...] = Field(default=(), max_length=MAX_PEERS)

    def to_json(self) -> str:
        # ``peers`` only when there are some: a document without them reads the same to a router of an earlier
        # version (which refuses unknown fields)
        return self.model_dump_json(by_alias=True, exclude_defaults=False, indent=2,
                                    exclude=None if self.peers else {"peers"})

    @property
    def router_id(self) -> str:
        return self.router.id or self.site.id


def _is_dns_name(text: str) -> bool:
    name = text[:-1] if text.endswith(".") else text
    return 0 < len(name) <= 253 and all(_DNS_LABEL.fullmatch(label) for label in name.split("."))


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def _check_names(config: RouterConfig) -> list[str]:
    problems: list[str] = []

    def encodable(path: str, value: str | None) -> None:
        if value is None:
            return
        try:
            encode_name(value)
        except ValueError as e:
            problems.append(f"{path}: {e}")

    def unique(kind: str, items: list[tuple[str, str]]) -> None:
        seen: dict[str, str] = {}
        for path, value in items:
            if value in seen:
                problems.append(f"{path}: duplicate {kind} {truncate(value)} (first at {seen[value]})")
            else:
                seen[value] = path

    profiles = {p.name for p in config.tls_profiles}
    for i, p in enumerate(config.tls_profiles):
        encodable(f"tlsProfiles[{i}].name", p.name)
    unique("TLS profile name", [(f"tlsProfiles[{i}].name", p.name) for i, p in enumerate(config.tls_profiles)])
    for i, lst in enumerate(config.listeners):
        path = f"listeners[{i}]"
        encodable(f"{path}.name", lst.name)
        encodable(f"{path}.routingKey", lst.routing_key)
        for j, key in enumerate(lst.strategy.keys if lst.strategy is not None else ()):
            encodable(f"{path}.strategy[{j}]", key)
        if lst.host and not is_ip_address(lst.host):
            problems.append(f"{path}.host: {truncate(lst.host)} is not an IP address (use \"\" for all interfaces)")
        if lst.tls_profile is not None and lst.tls_profile not in profiles:
            problems.append(f"{path}.tlsProfile: no TLS profile named {truncate(lst.tls_profile)}")
        if lst.authenticate_peer and lst.tls_profile is None:
            problems.append(f"{path}.authenticatePeer: needs a tlsProfile (with a CA)")
    unique("listener name", [(f"listeners[{i}].name", x.name) for i, x in enumerate(config.listeners)])
    for i, con in enumerate(config.connectors):
        path = f"connectors[{i}]"
        encodable(f"{path}.name", con.name)
        encodable(f"{path}.routingKey", con.routing_key)
        if con.tls_profile is not None and con.tls_profile not in profiles:
            problems.append(f"{path}.tlsProfile: no TLS profile named {truncate(con.tls_profile)}")
        if con.use_client_cert and con.tls_profile is None:
            problems.append(f"{path}.useClientCert: needs a tlsProfile")
        for j, t in enumerate(con.targets):
            if not (is_ip_address(t.host) or _is_dns_name(t.host)):
                problems.append(f"{path}.targets[{j}].host: {truncate(t.host)} is neither an IP address nor a DNS name")
            encodable(f"{path}.targets[{j}].name", t.name)
        unique("target name", [(f"{path}.targets[{j}].name", t.key) for j, t in enumerate(con.targets)])
    unique("connector name", [(f"connectors[{i}].name", x.name) for i, x in enumerate(config.connectors)])
    return problems


def _check_ports(config: RouterConfig) -> list[str]:
    problems: list[str] = []
    settings = config.router
    reserved = {p: f"router.reservedPorts ({p})" for p in settings.reserved_ports}
    if settings.metrics is not None:
        if settings.metrics.host and not is_ip_address(settings.metrics.host):
            problems.append(f"router.metrics.host: {truncate(settings.metrics.host)} is not an IP address")
        reserved[settings.metrics.port] = "router.metrics.port"
    for i, p in enumerate(settings.reserved_ports):
        if not 1 <= p <= 65535:
            problems.append(f"router.reservedPorts[{i}]: {p} is not a port number between 1 and 65535")
    binds: dict[int, list[tuple[str, str]]] = {}
    for i, lst in enumerate(config.listeners):
        path = f"listeners[{i}].port"
        if lst.port in reserved:
            problems.append(f"{path}: port {lst.port} is reserved for the router ({reserved[lst.port]})")
        for host, other in binds.get(lst.port, []):
            if not host or not lst.host or ipaddress.ip_address(host) == ipaddress.ip_address(lst.host):
                problems.append(f"{path}: port {lst.port} on {lst.host or 'all interfaces'} is already used by {other}")
                break
        if not lst.host or is_ip_address(lst.host):
            binds.setdefault(lst.port, []).append((lst.host, f"listeners[{i}]"))
    return problems


def _check_network(config: RouterConfig) -> list[str]:
    """routerAccess, links and remoteRoutes: names, addresses, profiles, ports."""
    problems: list[str] = []
    profiles = {p.name for p in config.tls_profiles}
    roles: dict[str, str] = {}
    ports: dict[int, str] = {}
    for i, acc in enumerate(config.router_access):
        path = f"routerAccess[{i}]"
        if acc.role in roles:
            problems.append(f"{path}.role: at most one {acc.role} access per router (first at {roles[acc.role]})")
        roles.setdefault(acc.role, path)
        if acc.port in ports:
            problems.append(f"{path}.port: port {acc.port} is used by {ports[acc.port]} too")
        ports.setdefault(acc.port, path)
        if acc.host and not is_ip_address(acc.host):
            problems.append(f"{path}.host: {truncate(acc.host)} is not an IP address (use \"\" for all interfaces)")
        if acc.tls_profile not in profiles:
            problems.append(f"{path}.tlsProfile: no TLS profile named {truncate(acc.tls_profile)}")
        for j, lst in enumerate(config.listeners):
            if lst.port == acc.port and (not lst.host or not acc.host or lst.host == acc.host):
                problems.append(f"listeners[{j}].port: port {lst.port} is used by the router access ({path})")
        if config.router.metrics is not None and config.router.metrics.port == acc.port:
            problems.append(f"{path}.port: port {acc.port} is used by router.metrics")
    seen: dict[str, str] = {}
    for i, link in enumerate(config.links):
        path = f"links[{i}]"
        try:
            encode_name(link.name)
        except ValueError as e:
            problems.append(f"{path}.name: {e}")
        if link.name in seen:
            problems.append(f"{path}.name: duplicate link name {truncate(link.name)} (first at {seen[link.name]})")
        seen.setdefault(link.name, path)
        if not (is_ip_address(link.host) or _is_dns_name(link.host)):
            problems.append(f"{path}.host: {truncate(link.host)} is neither an IP address nor a DNS name")
        if link.tls_profile not in profiles:
            problems.append(f"{path}.tlsProfile: no TLS profile named {truncate(link.tls_profile)}")
    for i, route in enumerate(config.remote_routes):
        path = f"remoteRoutes[{i}]"
        try:
            encode_name(route.routing_key)
        except ValueError as e:
            problems.append(f"{path}.routingKey: {e}")
        if route.link not in seen:
            problems.append(f"{path}.link: no link named {truncate(route.link)}")
    return problems


def _bad_text(value: object, path: str = "") -> list[str]:
    """Paths of strings that are not valid Unicode (lone surrogates from ``\\ud800`` escapes)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return [f"{path or '(document)'}: is not valid Unicode text (lone surrogate)"]
        return []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _bad_text(k, path) + _bad_text(v, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _bad_text(v, f"{path}[{i}]")]
    return []


def parse_config(text: str | bytes) -> RouterConfig:
    """Parse and validate a router configuration document; ``ConfigError`` lists every problem by field path."""
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError([f"(document): {len(text)} bytes is more than the limit of {MAX_CONFIG_BYTES}"])
    try:
        raw = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError([f"(document): not valid JSON: {e}"]) from None
    if not isinstance(raw, dict):
        raise ConfigError(["(document): must be a JSON object"])
    if bad := _bad_text(raw):
        raise ConfigError(bad)
    version = raw.get("version")
    if version != CONFIG_VERSION:
        if isinstance(version, int) and not isinstance(version, bool) and version > CONFIG_VERSION:
            raise ConfigError([f"version: {version} is newer than this router supports ({CONFIG_VERSION})"])
        raise ConfigError([f"version: must be {CONFIG_VERSION}, got {truncate(str(version))}"])
    try:
        config = RouterConfig.model_validate_json(text if isinstance(text, str) else text.decode("utf-8"))
    except ValidationError as e:
        raise ConfigError([f"{_loc(err['loc'])}: {err['msg']}" for err in e.errors(include_input=False)]) from None
    problems = _check_names(config) + _check_ports(config) + _check_network(config)
    if problems:
        raise ConfigError(problems)
    return config


def with_bind_host(config: RouterConfig, host: str) -> RouterConfig:
    """``config`` with ``host`` bound where it says "all interfaces" (Listeners, the router access and the metrics
    endpoint with host ""): what a router Pod does with its Pod IP. ``host`` must be an IP address."""
    if not is_ip_address(host):
        raise ConfigError([f"bind host: {truncate(host)} is not an IP address"])
    listeners = tuple(x if x.host else x.model_copy(update={"host": host}) for x in config.listeners)
    router = config.router
    if router.metrics is not None and not router.metrics.host:
        router = router.model_copy(update={"metrics": router.metrics.model_copy(update={"host": host})})
    access = tuple(x if x.host else x.model_copy(update={"host": host}) for x in config.router_access)
    return config.model_copy(update={"listeners": listeners, "router": router, "router_access": access})
