"""Router network statuses for the site controller's tests: the document a router reports (``{"op":"network"}``, the
router Pod's key of ``skupper-network-status``; docs/service-network-router.md, "Network status"), built from what a
test says the network is: the routers this router knows (``RouterView``: its site, its up links, its keys) and this
router's own links (``LinkState``).

Every link a test lists is up at both ends, and only routers joined to this one by links (either direction) are in
its network. The documents carry no ``linksCarryBothWays`` (the format's default, false: links carry connections
from the dialing side), so a test says which way a link goes by who lists it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

STATUS_VERSION = 1


@dataclass(frozen=True)
class Site:
    id: str
    name: str
    namespace: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, **({"namespace": self.namespace} if self.namespace else {})}


@dataclass(frozen=True)
class RouterView:
    """A router of the network: ``links`` its up links (name, remote router, cost), ``services`` per routing key its
    connector targets (``connector@target``) and listeners."""

    router: str
    site: Site
    links: tuple[tuple[str, str, int], ...] = ()
    services: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class LinkState:
    """One of this router's links as its status lists it."""

    name: str
    cost: int
    up: bool = False
    remote_router: str | None = None
    remote_site: Site | None = None
    reason: str = "not connected yet"
    since: float = field(default=0.0)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "up": self.up, "cost": self.cost, "reason": None if self.up else self.reason,
                "remoteRouter": self.remote_router,
                "remoteSite": self.remote_site.as_json() if self.remote_site else None, "since": self.since}


def _members(me: str, routers: dict[str, RouterView]) -> set[str]:
    """The routers joined to ``me`` by links in either direction."""
    neighbours: dict[str, set[str]] = {}
    for view in routers.values():
        for _, to, _ in view.links:
            if to in routers:
                neighbours.setdefault(view.router, set()).add(to)
                neighbours.setdefault(to, set()).add(view.router)
    seen, todo = {me}, [me]
    while todo:
        for n in neighbours.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def network_status(me: str, site: Site, routers: Sequence[RouterView], links: Sequence[LinkState] = ()
                   ) -> dict[str, Any]:
    """The status router ``me`` (of ``site``) reports when it knows ``routers`` (itself included) and has ``links``."""
    by_id = {r.router: r for r in routers}
    members = _members(me, by_id)
    sites: dict[str, dict[str, Any]] = {}
    services: dict[str, dict[str, tuple[set[str], set[str]]]] = {}
    for router in sorted(members):
        view = by_id.get(router)
        if view is None:
            continue
        entry = sites.setdefault(view.site.id, {**view.site.as_json(), "routers": [], "links": []})
        entry["routers"].append(router)
        for key, connectors, listeners in view.services:
            c, li = services.setdefault(view.site.id, {}).setdefault(key, (set(), set()))
            c.update(connectors)
            li.update(listeners)
        for name, to, cost in view.links:
            remote = by_id.get(to)
            if to in members:
                entry["links"].append({"name": name, "remoteRouter": to, "cost": cost,
                                       "remoteSiteId": remote.site.id if remote else None,
                                       "remoteSiteName": remote.site.name if remote else None})
    for site_id, entry in sites.items():
        entry["links"].sort(key=lambda x: (x["name"], x["remoteRouter"]))
        entry["services"] = [{"routingKey": key, "connectors": sorted(c), "listeners": sorted(li)}
                             for key, (c, li) in sorted(services.get(site_id, {}).items())]
    return {"version": STATUS_VERSION, "router": me, "site": site.as_json(),
            "sites": sorted(sites.values(), key=lambda s: (s["id"] != site.id, s["name"], s["id"])),
            "links": [x.as_json() for x in sorted(links, key=lambda x: x.name)], "incoming": [], "routes": []}
