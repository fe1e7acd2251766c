"""A system site (a site on a Linux host, no Kubernetes), composed (pure): its resources as read from
``input/resources/`` (and the Links its redeemed tokens gave, in ``runtime/resources/``) -> the router document and
each resource's status.

The same checks as on Kubernetes apply (:mod:`service_network.site.bindings`, :mod:`service_network.site.links`);
what differs is where things are: a Listener binds ``host:port`` on this host (``host`` an IP address, ``localhost``
or ``0.0.0.0``), a Connector dials ``host:port`` (a selector means nothing without Pods), TLS material is files
(``<certs>/<name>/ca.crt, tls.crt, tls.key``). Router access is a RouterAccess resource (upstream's system sites
have no Service to make): its ``inter-router`` role, and its ``edge`` role when it lists one (as upstream's system
sites offer it, ``internal/nonkube``), each a ``routerAccess`` entry of the router document.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from operator_runtime.objects import JsonDict, mapping, meta

from ..router.config import CONFIG_VERSION, parse_config
from ..router.errors import ConfigError
from ..site.bindings import BindingError, SecretInfo, check_connector, check_listener
from ..site.links import LinkState, compose_links
from ..site.status import ConditionState, error, ready
from .resources import KINDS

__all__ = ["AccessPlan", "SystemPlan", "compose_system", "router_access"]

#: where a system site's router access keeps its server certificate (unless the RouterAccess names its own)
SERVER_CREDENTIALS = "skupper-site-server"
INTER_ROUTER_PORT = 55671
EDGE_PORT = 45671


@dataclass(frozen=True)
class AccessPlan:
    """The router access a RouterAccess asks for: where it binds and the names its server certificate carries."""

    name: str
    host: str
    port: int
    credentials: str
    names: tuple[str, ...]          # subjectAlternativeNames and the bind host (when not 0.0.0.0)
    edge_port: int | None = None    # the ``edge`` role's port, when the RouterAccess lists that role

    def roles(self) -> list[tuple[str, int]]:
        """The roles offered, each with its port: ``inter-router``, then ``edge`` when listed."""
        return [("inter-router", self.port), *([("edge", self.edge_port)] if self.edge_port is not None else [])]


@dataclass
class SystemPlan:
    document: JsonDict | None                     # the router document (None: no Site)
    states: dict[tuple[str, str], ConditionState] = field(default_factory=dict)    # (kind, name) -> state
    problems: list[str] = field(default_factory=list)   # files that could not be used, a second Site, ...
    access: AccessPlan | None = None
    links: list[LinkState] = field(default_factory=list)   # each Link's document entries
    site_name: str = ""


def _bind_host(host: str) -> str | None:
    if host == "localhost":
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def _profile(name: str, certs: Mapping[str, Path]) -> JsonDict:
    directory = certs[name]
    return {"name": name, "files": {"ca": str(directory / "ca.crt"), "cert": str(directory / "tls.crt"),
                                    "key": str(directory / "tls.key")}}


def _port_ok(port: object) -> bool:
    return isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535


def router_access(resources: Sequence[JsonDict]) -> tuple[AccessPlan | None, dict[tuple[str, str], ConditionState]]:
    """The first RouterAccess (by name) as an :class:`AccessPlan`, and the states of all of them."""
    states: dict[tuple[str, str], ConditionState] = {}
    plan = None
    for obj in sorted((r for r in resources if r.get("kind") == "RouterAccess"), key=lambda o: meta(o).name):
        name = meta(obj).name
        if plan is not None:
            states[("RouterAccess", name)] = error(f"only one RouterAccess per site is supported; {plan.name} is "
                                                   f"in use")
            continue
        spec = mapping(obj, "spec")
        roles = [r for r in spec.get("roles") or [] if isinstance(r, Mapping)]
        role = next((r for r in roles if r.get("name") == "inter-router"), None)
        if role is None:
            states[("RouterAccess", name)] = error("no role inter-router: only inter-router access is supported")
            continue
        port = role.get("port") or INTER_ROUTER_PORT
        edge = next((r for r in roles if r.get("name") == "edge"), None)
        edge_port = None if edge is None else edge.get("port") or EDGE_PORT
        host = _bind_host(str(spec.get("bindHost") or "0.0.0.0"))
        if host is None or not _port_ok(port) or (edge_port is not None and not _port_ok(edge_port)):
            states[("RouterAccess", name)] = error("bindHost must be an IP address of this host (or localhost) and "
                                                   "the inter-router and edge ports 1-65535")
            continue
        if edge_port == port:
            states[("RouterAccess", name)] = error(f"the inter-router and edge roles both ask for port {port}")
            continue
        extra = [str(n) for n in spec.get("subjectAlternativeNames") or [] if isinstance(n, str) and n]
        names = tuple(sorted({*extra, *([host] if host != "0.0.0.0" else [])}))
        if not names:
            states[("RouterAccess", name)] = error("a RouterAccess binding 0.0.0.0 needs subjectAlternativeNames: "
                                                   "the names remote sites reach it by")
            continue
        credentials = str(spec.get("tlsCredentials") or SERVER_CREDENTIALS)
        plan = AccessPlan(name, host, int(port), credentials, names,
                          None if edge_port is None else int(edge_port))
        states[("RouterAccess", name)] = ready()
    return plan, states


def compose_system(site_id: str, namespace: str, resources: Sequence[JsonDict],
                   certs: Mapping[str, Path], cert_keys: Mapping[str, frozenset[str]]) -> SystemPlan:
    """The router document of a system site. ``certs``: TLS credential name -> its directory; ``cert_keys``: the
    files each holds (``ca.crt``, ``tls.crt``, ``tls.key``)."""
    by_kind: dict[str, list[JsonDict]] = {k: [] for k in KINDS}
    for obj in resources:
        by_kind[str(obj.get("kind"))].append(obj)
    plan = SystemPlan(None)
    sites = by_kind["Site"]
    if not sites:
        plan.problems.append("no Site in input/resources: a system site needs one")
        return plan
    site = sites[0]
    for extra in sites[1:]:
        plan.states[("Site", meta(extra).name)] = error(f"An active site already exists ({meta(site).name})")
    plan.states[("Site", meta(site).name)] = ready()
    plan.site_name = meta(site).name
    secrets = {name: SecretInfo("kubernetes.io/tls", keys) for name, keys in cert_keys.items()}
    profiles: dict[str, JsonDict] = {}
    listeners: list[JsonDict] = []
    connectors: list[JsonDict] = []
    ports: dict[tuple[str, int], str] = {}
    for obj in by_kind["Listener"]:
        name = meta(obj).name
        try:
            spec = check_listener({**obj, "spec": {**mapping(obj, "spec"), "host": "system"}})
        except BindingError as e:
            plan.states[("Listener", name)] = error(str(e))
            continue
        host = _bind_host(str(mapping(obj, "spec").get("host") or ""))
        if host is None:
            plan.states[("Listener", name)] = error("host must be an IP address of this host (or localhost) on a "
                                                    "system site")
            continue
        if (host, spec.port) in ports:
            plan.states[("Listener", name)] = error(f"Listener {ports[(host, spec.port)]} with host {host} and port "
                                                    f"{spec.port} already exists")
            continue
        if spec.tls_credentials:
            if spec.tls_credentials not in certs:
                plan.states[("Listener", name)] = error(f"TLS credentials {spec.tls_credentials!r} not found in "
                                                        f"input/certs")
                continue
            profiles[spec.tls_credentials] = _profile(spec.tls_credentials, certs)
        ports[(host, spec.port)] = name
        plan.states[("Listener", name)] = ready()
        listeners.append({"name": name, "routingKey": spec.routing_key, "host": host, "port": spec.port,
                          "tlsProfile": spec.tls_credentials or None})
    for obj in by_kind["Connector"]:
        name = meta(obj).name
        try:
            cspec = check_connector(obj)
        except BindingError as e:
            plan.states[("Connector", name)] = error(str(e))
            continue
        if not cspec.host:
            plan.states[("Connector", name)] = error("a Connector of a system site needs spec.host (a selector "
                                                     "selects Pods, which a host does not have)")
            continue
        if cspec.tls_credentials:
            if cspec.tls_credentials not in certs:
                plan.states[("Connector", name)] = error(f"TLS credentials {cspec.tls_credentials!r} not found in "
                                                         f"input/certs")
                continue
            profiles[cspec.tls_credentials] = _profile(cspec.tls_credentials, certs)
        plan.states[("Connector", name)] = ready()
        connectors.append({"name": name, "routingKey": cspec.routing_key, "port": cspec.port,
                           "tlsProfile": cspec.tls_credentials or None,
                           "useClientCert": bool(cspec.use_client_cert and cspec.tls_credentials),
                           "verifyHostname": bool(cspec.verify_hostname),
                           "targets": [{"host": cspec.host, "name": cspec.host}]})
    link_docs: list[JsonDict] = []
    plan.links = compose_links(by_kind["Link"], secrets)
    for state in plan.links:
        plan.states[("Link", meta(state.obj).name)] = state.configured
        for entry in state.entries:
            profiles[str(entry["tlsProfile"])] = _profile(str(entry["tlsProfile"]), certs)
            link_docs.append(entry)
    access, access_states = router_access(resources)
    plan.states.update(access_states)
    access_docs: list[JsonDict] = []
    if access is not None:
        plan.access = access
        if {"ca.crt", "tls.crt", "tls.key"} <= cert_keys.get(access.credentials, frozenset()):
            profiles[access.credentials] = _profile(access.credentials, certs)
            access_docs.extend({"name": access.name, "role": role, "host": access.host, "port": port,
                                "tlsProfile": access.credentials} for role, port in access.roles())
        else:
            plan.states[("RouterAccess", access.name)] = error(
                f"TLS credentials {access.credentials!r} (ca.crt, tls.crt, tls.key) not found")
    document = {
        "version": CONFIG_VERSION,
        "site": {"id": site_id, "name": meta(site).name, "namespace": namespace},
        "tlsProfiles": [profiles[k] for k in sorted(profiles)],
        "listeners": sorted(listeners, key=lambda d: str(d["name"])),
        "connectors": sorted(connectors, key=lambda d: str(d["name"])),
        "links": sorted(link_docs, key=lambda d: str(d["name"])),
        "routerAccess": access_docs,
    }
    try:
        parse_config(json.dumps(document))      # the router's own checks: a failure here is a bug of this module
    except ConfigError as e:                    # ... said as a problem of the site, not a traceback
        plan.problems.append(f"no router document made of input/resources: {str(e)[:500]}")
        return plan
    plan.document = document
    return plan

