"""The network view: which routing keys have listeners and connectors, at which site. ``Matched`` and the
``hasMatching*`` fields of statuses, and the per-Pod keys of ``exposePodsByName``, are read from it
(skupper-listener.md §5.10).

This is the seam between the two parts of the service network. In part 1 each site's record is composed from its
own router document (:func:`site_record`), so a Listener matches when a Connector of the same routing key in its
own namespace has at least one target; :class:`LocalNetworkView` holds those records. Part 2 feeds the records of
remote sites (learned over the links) into the same view, and nothing that reads it changes.

A key "has a connector" at a site when the router there has at least one target for it (upstream counts router
CONNECTOR records, one per target), and "has a listener" when a router listener entity exists for it: the status
then agrees with what the data plane does (the router accepts on a Listener only while its key has a target).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["LocalNetworkView", "NetworkSnapshot", "NetworkView", "ServiceRecord", "SiteRecord", "site_record"]


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
class SiteRecord:
    """One site as the network knows it (Site ``status.network`` entries)."""

    id: str
    name: str
    namespace: str
    platform: str = "kubernetes"
    version: str = ""
    services: tuple[ServiceRecord, ...] = field(default=())

    def service(self, key: str) -> ServiceRecord | None:
        return next((s for s in self.services if s.routing_key == key), None)

    def as_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name, "namespace": self.namespace,
                               "platform": self.platform}
        if self.version:
            out["version"] = self.version
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
    """The network as one site sees it at one moment: its own record (first) and those of the other sites."""

    sites: tuple[SiteRecord, ...]

    def _services(self) -> Iterable[ServiceRecord]:
        for record in self.sites:
            yield from record.services

    def has_connector(self, routing_key: str) -> bool:
        """A connector target for ``routing_key`` exists somewhere in the network."""
        return any(s.routing_key == routing_key and s.connectors for s in self._services())

    def has_listener(self, routing_key: str) -> bool:
        """A listener for ``routing_key`` exists somewhere in the network."""
        return any(s.routing_key == routing_key and s.listeners for s in self._services())

    def pod_targets(self, routing_key: str) -> list[str]:
        """Suffixes ``x`` of keys ``<routing_key>.x`` that have a connector (exposePodsByName), sorted."""
        prefix = routing_key + "."
        return sorted({s.routing_key[len(prefix):] for s in self._services()
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
