"""The declarative router configuration: what the site controller writes (ConfigMap key ``router.json``) and what
the router adaptor reads, as JSON. ``parse_config(text)`` validates it fully or raises ``ConfigError`` naming every
bad field; nothing from an invalid document is applied.

Version 1. Sections ``routerAccess``, ``links`` and ``remoteRoutes`` belong to service network part 2 (mutual-TLS
router access, links with costs, routes to remote sites); they are part of the format now so that part 2 only adds
fields, and they must be empty until a router implements them.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from .errors import ConfigError, truncate
from .names import haproxy_id

__all__ = [
    "CONFIG_VERSION",
    "Connector",
    "Listener",
    "MetricsEndpoint",
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
    """The site this router belongs to (Site UID and name; only reported, never rendered into HAProxy)."""

    id: str = Field(min_length=1, max_length=253)
    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = Field(default=None, max_length=253)


class MetricsEndpoint(_Model):
    """HAProxy's own HTTP endpoint: Prometheus exporter on ``/metrics``, ``/healthz``."""

    host: str = ""
    port: int = Field(ge=1, le=65535)


class RouterSettings(_Model):
    metrics: MetricsEndpoint | None = None
    reserved_ports: tuple[int, ...] = ()          # ports no Listener may use (router access, metrics, ...)
    connect_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    max_connections: int | None = Field(default=None, ge=1, le=10_000_000)
    threads: int | None = Field(default=None, ge=1, le=64)
    old_worker_grace_seconds: int | None = Field(default=None, ge=1, le=2_000_000)  # hard-stop-after


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


class Listener(_Model):
    """A router frontend (Skupper ``tcpListener``): accepts connections for ``routingKey`` while it has a target."""

    name: str = Name
    routing_key: str = Name
    host: str = ""                        # an IP address; "" = all interfaces
    port: int = Field(ge=1, le=65535)
    tls_profile: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)
    authenticate_peer: bool = False       # require a client certificate signed by the profile's CA
    observer: Observer | None = None      # accepted; HTTP observation is not implemented


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


class RouterConfig(_Model):
    version: int
    site: Site
    router: RouterSettings = RouterSettings()
    tls_profiles: tuple[TlsProfile, ...] = ()
    listeners: tuple[Listener, ...] = ()
    connectors: tuple[Connector, ...] = ()
    # service network part 2 (must be empty for now)
    router_access: tuple[dict[str, Any], ...] = ()
    links: tuple[dict[str, Any], ...] = ()
    remote_routes: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_defaults=False, indent=2)


def is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


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
            haproxy_id(value)
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


def _check_part2(config: RouterConfig) -> list[str]:
    return [f"{field}: not supported by this router yet (service network part 2); must be empty"
            for field, value in (("routerAccess", config.router_access), ("links", config.links),
                                 ("remoteRoutes", config.remote_routes)) if value]


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
    problems = _check_names(config) + _check_ports(config) + _check_part2(config)
    if problems:
        raise ConfigError(problems)
    return config


def with_bind_host(config: RouterConfig, host: str) -> RouterConfig:
    """``config`` with ``host`` bound where it says "all interfaces" (Listeners and the metrics endpoint with host
    ""): what a router Pod does with its Pod IP. ``host`` must be an IP address."""
    if not is_ip_address(host):
        raise ConfigError([f"bind host: {truncate(host)} is not an IP address"])
    listeners = tuple(x if x.host else x.model_copy(update={"host": host}) for x in config.listeners)
    router = config.router
    if router.metrics is not None and not router.metrics.host:
        router = router.model_copy(update={"metrics": router.metrics.model_copy(update={"host": host})})
    return config.model_copy(update={"listeners": listeners, "router": router})
