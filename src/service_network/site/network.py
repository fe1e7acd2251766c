"""The network view: which routing keys have listeners and connectors, at which site. ``Matched`` and the
``hasMatching*`` fields of statuses, and the per-Pod keys of ``exposePodsByName``, are read from it
(skupper-listener.md §5.10).

This is the seam between the two parts of the service network. Each site's own record is composed from its own
router document (:func:`site_record`); :class:`LocalNetworkView` (part 1, one site alone) adds nothing to it, and
``netstatus.RouterStatusView`` (part 2) adds the sites its routers learned over the links, which sites data can
flow to and from (``reaches``/``reached_by``: links carry connections from the site that dials them to the site
that accepts them), and its routers' links as they report them.

A key "has a connector" at a site when the router there has at least one target for it (upstream counts router
CONNECTOR records, one per target), and "has a listener" when a router listener entity exists for it: the status
then agrees with what the data plane does (the router accepts on a Listener only while its key has a target).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["LinkRecord", "LinkReport", "LocalNetworkView", "NetworkSnapshot", "NetworkView", "ServiceRecord",
           "SiteRecord", "site_record"]


@dataclass(frozen=True)
class ServiceRecord:
    """A routing key at one site: names of its connector targets and listener entities there."""

    routing_key: str
    connectors: tuple[str, ...] = ()
    listeners: tuple[str, ...] = ()

    def as_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"routingKey": self.routing_key}
        if self.connectors:
            out["connectors"] = list(self.connectors)
        if self.listeners:
            out["listeners"] = list(self.listeners)
        return out


@dataclass(frozen=True)
class LinkRecord:
    """A link of a site (Site ``status.network[].links``): from that site to ``remote_site_*``."""

    name: str
    remote_site_id: str | None = None
    remote_site_name: str | None = None
    operational: bool = False

    def as_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "operational": self.operational}
        if self.remote_site_id:
            out["remoteSiteId"] = self.remote_site_id
        if self.remote_site_name:
            out["remoteSiteName"] = self.remote_site_name
        return out


@dataclass(frozen=True)
class LinkReport:
    """One of this site's router links as a router of the site reports it (its ``links[]`` network status)."""

    name: str
    up: bool
    reason: str | None = None
    remote_site_id: str | None = None
    remote_site_name: str | None = None
    router: str = ""
    #: what the router refused or overrode of what came over this link (the router's ``warnings``)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class SiteRecord:
    """One site as the network knows it (Site ``status.network`` entries)."""

    id: str
    name: str
    namespace: str
    platform: str = "kubernetes"
    version: str = ""
    services: tuple[ServiceRecord, ...] = field(default=())
    links: tuple[LinkRecord, ...] = field(default=())

    def service(self, key: str) -> ServiceRecord | None:
        return next((s for s in self.services if s.routing_key == key), None)

    def as_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name, "namespace": self.namespace,
                               "platform": self.platform}
        if self.version:
            out["version"] = self.version
        if self.links:
            out["links"] = [link.as_status() for link in self.links]
        if self.services:
            out["services"] = [s.as_status() for s in self.services]
        return out


def site_record(site_id: str, name: str, namespace: str, version: str, document: Mapping[str, Any]) -> SiteRecord:
    """The record of a site, from its router document (dict form, as written to the ConfigMap)."""
    connectors: dict[str, list[str]] = {}
    listeners: dict[str, list[str]] = {}
    for con in document.get("connectors") or []:
        for target in con.get("targets") or []:
            connectors.setdefault(str(con["routingKey"]), []).append(
                f"{con['name']}@{target.get('name') or target.get('host')}")
    for lst in document.get("listeners") or []:
        listeners.setdefault(str(lst["routingKey"]), []).append(str(lst["name"]))
    keys = sorted(set(connectors) | set(listeners))
    services = tuple(ServiceRecord(k, tuple(sorted(connectors.get(k, ()))), tuple(sorted(listeners.get(k, ()))))
                     for k in keys)
    return SiteRecord(id=site_id, name=name, namespace=namespace, version=version, services=services)


@dataclass(frozen=True)
class NetworkSnapshot:
    """The network as one site sees it at one moment: its own record (first) and those of the other sites.

    ``reaches``: ids of the sites this site's connections can be carried to (itself included); ``reached_by``: ids
    of the sites whose connections can be carried to this one. None: every site (one site alone, or tests).
    ``links``: this site's links as its routers report them. ``imported``: routing keys upstream routers serve
    through this site's routers' AMQP links (connectors of upstream's sites, which send no site records)."""

    sites: tuple[SiteRecord, ...]
    reaches: frozenset[str] | None = None
    reached_by: frozenset[str] | None = None
    links: tuple[LinkReport, ...] = ()
    imported: frozenset[str] = frozenset()

    def _services(self, among: frozenset[str] | None) -> Iterable[ServiceRecord]:
        for i, record in enumerate(self.sites):
            if i == 0 or among is None or record.id in among:
                yield from record.services

    def has_connector(self, routing_key: str) -> bool:
        """A connector target for ``routing_key`` exists at a site this site's connections reach (here included):
        what the router needs to accept on a Listener; a key upstream's routers serve through our AMQP links counts."""
        return routing_key in self.imported or any(
            s.routing_key == routing_key and s.connectors for s in self._services(self.reaches))

    def has_listener(self, routing_key: str) -> bool:
        """A listener for ``routing_key`` exists at a site whose connections reach this one (here included)."""
        return any(s.routing_key == routing_key and s.listeners for s in self._services(self.reached_by))

    def pod_targets(self, routing_key: str) -> list[str]:
        """Suffixes ``x`` of keys ``<routing_key>.x`` that have a connector at a site this site's connections reach
        (exposePodsByName), sorted."""
        prefix = routing_key + "."
        return sorted({s.routing_key[len(prefix):] for s in self._services(self.reaches)
                       if s.routing_key.startswith(prefix) and len(s.routing_key) > len(prefix) and s.connectors})


class NetworkView(Protocol):
    """The sites of the network of each local site. The controller asks for a snapshot with the record it is
    composing for the local site, and publishes the record once written (part 2 sends it to linked sites)."""

    def snapshot(self, namespace: str, local: SiteRecord) -> NetworkSnapshot:
        """The network of the site in ``namespace``, with ``local`` as that site's own record."""
        ...

    def publish(self, namespace: str, record: SiteRecord | None) -> bool:
        """The site in ``namespace`` now has ``record`` (None: it has no active site); True when it changed."""
        ...


class LocalNetworkView:
    """Part 1's view: no links yet, so every site is a network of its own."""

    def __init__(self) -> None:
        self._records: dict[str, SiteRecord] = {}

    def snapshot(self, namespace: str, local: SiteRecord) -> NetworkSnapshot:
        return NetworkSnapshot((local,))

    def publish(self, namespace: str, record: SiteRecord | None) -> bool:
        if self._records.get(namespace) == record:
            return False
        if record is None:
            self._records.pop(namespace, None)
        else:
            self._records[namespace] = record
        return True
