"""The routers' network status, read by the site controller (pure): the ``skupper-network-status`` ConfigMap of a
site (one key per router, written by the router Pods: docs/service-network-router.md "Network status") parsed
into :class:`RouterStatus`, merged into the site's :class:`~.network.NetworkSnapshot` (the sites of the network,
which of them this site's connections reach and which reach it, this site's links as reported), and the
:class:`RouterStatusView` the controller composes with.

A router's status is input from a Pod (and, through it, from remote routers): it is validated with size bounds, and
a key that does not parse is ignored (as if the router had not reported yet), never trusted in part.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from operator_runtime.kinds import CONFIG_MAP, ResourceInfo
from operator_runtime.objects import JsonDict, mapping, meta

from ..constants import (
    COMPONENT_ROUTER,
    LABEL_COMPONENT,
    LABEL_ROUTER_CONFIG,
    NETWORK_STATUS_NAME,
)
from .network import LinkRecord, LinkReport, LocalNetworkView, NetworkSnapshot, ServiceRecord, SiteRecord
from .resources import owner_references

__all__ = ["MAX_STATUS_BYTES", "LinkRefusal", "RouterStatus", "RouterStatusView", "StatusReader", "TargetFailure",
           "network_snapshot",
           "network_status_config_map", "parse_router_status", "status_key"]

log = logging.getLogger(__name__)

#: A router status larger than this is ignored (a ConfigMap holds at most 1 MiB anyway).
MAX_STATUS_BYTES = 1024 * 1024
_TEXT = Field(min_length=1, max_length=4096)
_ID = Field(min_length=1, max_length=253)


def status_key(router_config_map: str) -> str:
    """The key a router (named after its ConfigMap, e.g. ``skupper-router``) writes its status under."""
    return f"{router_config_map}.json"


class _In(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class _SiteId(_In):
    id: str = _ID
    name: str = _ID
    namespace: str | None = Field(default=None, max_length=253)


class _Service(_In):
    routing_key: str = _TEXT
    connectors: tuple[str, ...] = Field(default=(), max_length=100_000)
    listeners: tuple[str, ...] = Field(default=(), max_length=100_000)
    #: the upstream routers a border router of that site imports the key from (its AMQP links)
    upstream: tuple[str, ...] = Field(default=(), max_length=10_000)


class _SiteLink(_In):
    name: str = _TEXT
    remote_router: str = _ID
    remote_site_id: str | None = Field(default=None, max_length=253)
    remote_site_name: str | None = Field(default=None, max_length=253)


class _Site(_SiteId):
    routers: tuple[str, ...] = Field(default=(), max_length=64)
    services: tuple[_Service, ...] = Field(default=(), max_length=100_000)
    links: tuple[_SiteLink, ...] = Field(default=(), max_length=10_000)


class _Link(_In):
    name: str = _TEXT
    up: bool
    reason: str | None = Field(default=None, max_length=4096)
    remote_router: str | None = Field(default=None, max_length=253)
    remote_site: _SiteId | None = None
    warnings: tuple[str, ...] = Field(default=(), max_length=16)


class _SiteRef(_In):
    id: str = Field(default="", max_length=253)
    name: str = Field(default="", max_length=253)


class _Incoming(_In):
    """A link another router dialed to this one: its name, the dialing router and site, the identity it speaks as
    and its certificate's fingerprint."""

    router: str = _ID
    name: str = Field(max_length=4096)
    site: _SiteRef | None = None
    identity: str | None = Field(default=None, max_length=253)
    certificate: str | None = Field(default=None, max_length=80)


class _Refusal(_In):
    """A link this router refused for its identity (a second certificate for a linked identity, a certificate
    that is not the one recorded for it)."""

    identity: str = _ID
    certificate: str | None = Field(default=None, max_length=80)
    reason: str = Field(min_length=1, max_length=300)
    at: str | None = Field(default=None, max_length=64)


class _Unreachable(_In):
    """A connector target whose last dials failed: why, and how many in a row."""

    connector: str = _TEXT
    target: str = _TEXT
    host: str = Field(default="", max_length=253)
    port: int = Field(default=0, ge=0, le=65535)
    error: str = Field(default="", max_length=300)
    failures: int = Field(default=1, ge=0)


class _Upstream(_In):
    """Upstream's network as the router's AMQP links show it: the keys upstream routers serve (their mobile
    addresses, imported as this router's services), with the routers serving each."""

    imported: dict[str, tuple[str, ...]] = Field(default_factory=dict, max_length=100_000)


class _Status(_In):
    version: int = Field(ge=1, le=1)
    router: str = _ID
    site: _SiteId
    sites: tuple[_Site, ...] = Field(default=(), max_length=10_000)
    links: tuple[_Link, ...] = Field(default=(), max_length=10_000)
    #: True from the router (its links carry connections both ways); absent from statuses of the earlier HAProxy
    #: engine, whose links carried them only from the dialing side
    links_carry_both_ways: bool = False
    #: the listeners whose sockets are bound now (None: not reported, as by the earlier HAProxy engine)
    listening: tuple[str, ...] | None = Field(default=None, max_length=100_000)
    incoming: tuple[_Incoming, ...] = Field(default=(), max_length=10_000)
    refused: tuple[_Refusal, ...] = Field(default=(), max_length=64)
    #: connector targets whose last dials failed (absent from routers that do not report them)
    unreachable: tuple[_Unreachable, ...] = Field(default=(), max_length=100_000)
    #: upstream's routers seen through this router's AMQP links (absent from routers without any)
    upstream: _Upstream | None = None


@dataclass(frozen=True)
class TargetFailure:
    """A connector target a router could not connect to, the last ``failures`` times in a row (``error``: why)."""

    connector: str
    target: str
    host: str
    port: int
    error: str
    failures: int


@dataclass(frozen=True)
class IncomingLink:
    """A link another site's router dialed to this router: the link's name, the dialing site's name and router,
    the identity it speaks as and its certificate's fingerprint ("" when the router does not say)."""

    name: str
    remote_site: str
    remote_router: str
    identity: str = ""
    certificate: str = ""


@dataclass(frozen=True)
class LinkRefusal:
    """A link a router refused for its identity."""

    identity: str
    certificate: str
    reason: str
    at: str


@dataclass(frozen=True)
class RouterStatus:
    """One router's view: its site's id, the sites it is connected to (with their services and up links), the
    directed site edges those links make, and its own links."""

    router: str
    site_id: str
    sites: tuple[SiteRecord, ...]
    edges: frozenset[tuple[str, str]]
    links: tuple[LinkReport, ...]
    listening: frozenset[str] | None = None     # listeners bound now (None: the router does not say)
    routers: frozenset[str] = frozenset()       # every router id it knows (its own and its link-state database's)
    #: the links other routers dialed to it
    incoming: tuple[IncomingLink, ...] = ()
    refused: tuple[LinkRefusal, ...] = ()
    unreachable: tuple[TargetFailure, ...] = ()
    #: routing keys upstream routers serve through this router's AMQP links (their connectors)
    imported: frozenset[str] = frozenset()


def parse_router_status(text: str) -> RouterStatus:
    """``text`` (a router's network status JSON) as a :class:`RouterStatus`; ``ValueError`` (message at most 200
    characters of it) when it is not one."""
    if len(text) > MAX_STATUS_BYTES:
        raise ValueError(f"network status of {len(text)} bytes is larger than {MAX_STATUS_BYTES}")
    try:
        status = _Status.model_validate_json(text)
    except ValidationError as e:
        first = e.errors(include_input=False)[0]
        raise ValueError(f"invalid network status at {'.'.join(str(x) for x in first['loc'])}: "
                         f"{first['msg'][:200]}") from None
    sites = []
    edges: set[tuple[str, str]] = set()
    for site in status.sites:
        links = tuple(LinkRecord(link.name, link.remote_site_id, link.remote_site_name, True) for link in site.links)
        edges.update((site.id, link.remote_site_id) for link in site.links if link.remote_site_id)
        if status.links_carry_both_ways:
            edges.update((link.remote_site_id, site.id) for link in site.links if link.remote_site_id)
        services = tuple(ServiceRecord(s.routing_key, tuple(sorted(set(s.connectors))), tuple(sorted(set(s.listeners))))
                         for s in site.services)
        sites.append(SiteRecord(id=site.id, name=site.name, namespace=site.namespace or "", services=services,
                                links=links))
    reports = tuple(LinkReport(link.name, link.up, None if link.up else (link.reason or "down"),
                               link.remote_site.id if link.remote_site else None,
                               link.remote_site.name if link.remote_site else None, status.router,
                               tuple(w[:300] for w in link.warnings))
                    for link in status.links)
    listening = frozenset(status.listening) if status.listening is not None else None
    routers = frozenset({status.router, *(r for site in status.sites for r in site.routers)})
    incoming = tuple(IncomingLink(i.name, i.site.name if i.site else "", i.router, i.identity or "",
                                  i.certificate or "") for i in status.incoming)
    refused = tuple(LinkRefusal(r.identity, r.certificate or "", r.reason, r.at or "") for r in status.refused)
    unreachable = tuple(TargetFailure(u.connector, u.target, u.host, u.port, u.error, u.failures)
                        for u in status.unreachable)
    # keys upstream routers serve: through this router's own AMQP links, or through a border router of a site it
    # reaches (that site's advert names the upstream routers)
    imported = frozenset({*(k for k, routers in (status.upstream.imported if status.upstream else {}).items()
                            if routers),
                          *(s.routing_key for site in status.sites for s in site.services if s.upstream)})
    return RouterStatus(status.router, status.site.id, tuple(sites), frozenset(edges), reports, listening, routers,
                        incoming, refused, unreachable, imported)


def _reach(start: str, edges: Iterable[tuple[str, str]]) -> frozenset[str]:
    following: dict[str, set[str]] = {}
    for a, b in edges:
        following.setdefault(a, set()).add(b)
    seen = {start}
    todo = [start]
    while todo:
        for n in following.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return frozenset(seen)


def _merge(records: Sequence[SiteRecord]) -> SiteRecord:
    """One site as several routers report it (an HA site, or the same site seen by both our routers)."""
    first = records[0]
    if len(records) == 1:
        return first
    connectors: dict[str, set[str]] = {}
    listeners: dict[str, set[str]] = {}
    links: dict[tuple[str, str | None], LinkRecord] = {}
    for record in records:
        for s in record.services:
            connectors.setdefault(s.routing_key, set()).update(s.connectors)
            listeners.setdefault(s.routing_key, set()).update(s.listeners)
        for link in record.links:
            links.setdefault((link.name, link.remote_site_id), link)
    services = tuple(ServiceRecord(k, tuple(sorted(connectors[k])), tuple(sorted(listeners[k])))
                     for k in sorted(connectors))
    return SiteRecord(id=first.id, name=first.name, namespace=first.namespace, platform=first.platform,
                      version=first.version, services=services,
                      links=tuple(links[k] for k in sorted(links, key=lambda k: (k[0], k[1] or ""))))


def network_snapshot(local: SiteRecord, statuses: Sequence[RouterStatus]) -> NetworkSnapshot:
    """The network of the site whose own (freshly composed) record is ``local``, from its routers' statuses: the
    other sites they report (merged by id), which sites data can flow to and from (links carry connections from
    the site that dials them), and the site's links as reported. No status yet: the site alone."""
    by_site: dict[str, list[SiteRecord]] = {}
    edges: set[tuple[str, str]] = set()
    reports: list[LinkReport] = []
    imported: set[str] = set()
    for status in statuses:
        if status.site_id != local.id:
            continue                   # a status left from another incarnation of the Site: not this site's view
        edges.update(status.edges)
        imported.update(status.imported)
        reports.extend(status.links)
        for record in status.sites:
            if record.id != local.id:
                by_site.setdefault(record.id, []).append(record)
    others = sorted((_merge(records) for records in by_site.values()), key=lambda r: (r.name, r.id))
    return NetworkSnapshot((local, *others), reaches=_reach(local.id, edges),
                           reached_by=_reach(local.id, ((b, a) for a, b in edges)),
                           links=tuple(sorted(reports, key=lambda r: (r.name, r.router))),
                           imported=frozenset(imported))


class StatusReader:
    """Router statuses from ``skupper-network-status`` ConfigMaps, parsed once per text (memoised per key)."""

    def __init__(self) -> None:
        self._parsed: dict[tuple[str, str], tuple[str, RouterStatus | None]] = {}

    def statuses(self, config_map: Mapping[str, Any] | None) -> list[RouterStatus]:
        if config_map is None:
            return []
        namespace = meta(config_map).namespace
        out = []
        data = mapping(config_map, "data")
        for key in sorted(data):
            text = data[key]
            if not isinstance(text, str):
                continue
            known = self._parsed.get((namespace, key))
            if known is None or known[0] != text:
                try:
                    parsed: RouterStatus | None = parse_router_status(text)
                except ValueError as e:
                    log.warning("ConfigMap %s/%s key %s ignored: %s", namespace, NETWORK_STATUS_NAME, key[:100], e)
                    parsed = None
                known = (text, parsed)
                self._parsed[(namespace, key)] = known
            if known[1] is not None:
                out.append(known[1])
        return out

    def forget(self, namespace: str) -> None:
        for key in [k for k in self._parsed if k[0] == namespace]:
            del self._parsed[key]


class RouterStatusView(LocalNetworkView):
    """Part 2's :class:`~.network.NetworkView`: each site's network from its routers' statuses
    (``statuses(namespace)``, read from the controller's cache)."""

    def __init__(self, statuses: Callable[[str], Sequence[RouterStatus]]) -> None:
        super().__init__()
        self._statuses = statuses

    def snapshot(self, namespace: str, local: SiteRecord) -> NetworkSnapshot:
        return network_snapshot(local, self._statuses(namespace))


def network_status_config_map(site: Mapping[str, Any]) -> tuple[ResourceInfo, JsonDict]:
    """The ``skupper-network-status`` ConfigMap as the controller applies it: owned by the Site, without data (each
    router writes its own key with its own field manager, so applies never take each other's fields)."""
    return CONFIG_MAP, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": NETWORK_STATUS_NAME, "namespace": meta(site).namespace,
                     "labels": {LABEL_COMPONENT: COMPONENT_ROUTER, LABEL_ROUTER_CONFIG: "network-status"},
                     "ownerReferences": owner_references(site)},
    }
