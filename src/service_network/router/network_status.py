"""The network as one router sees it, for the control plane (pure): the sites of the network with their routers,
their routers' up links (the direction data flows in) and, per routing key, connectors and listeners; this router's
links (up, or down with the reason, and the remote site); the routers that linked to it; and its routes. The adaptor writes it to ``<state>/network.json`` and serves it
on ``/network`` (at most once per second, only when it changed); the site controller turns it into Site, Link,
Listener and Connector status and the ``skupper-network-status`` ConfigMap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .config import RemoteRoute
from .control import LinkStatus, Neighbour
from .linkstate import Advert, SiteInfo, connected_routers

__all__ = ["STATUS_VERSION", "network_status"]

STATUS_VERSION = 1


def network_status(adverts: Mapping[str, Advert], router_id: str, site: SiteInfo, links: Iterable[LinkStatus],
                   neighbours: Iterable[Neighbour], routes: Iterable[RemoteRoute],
                   local_keys: Iterable[str]) -> dict[str, Any]:
    """The status document (deterministic: equal inputs give equal output, so "changed" is a comparison)."""
    members = connected_routers(adverts, router_id)
    sites: dict[str, dict[str, Any]] = {}
    services: dict[str, dict[str, tuple[set[str], set[str]]]] = {}
    for router in sorted(members):
        ad = adverts.get(router)
        if ad is None:
            continue
        entry = sites.setdefault(ad.site.id, {**ad.site.model_dump(exclude_none=True), "routers": []})
        entry["routers"].append(router)
        per_key = services.setdefault(ad.site.id, {})
        for s in ad.services:
            c, li = per_key.setdefault(s.key, (set(), set()))
            c.update(s.connectors)
            li.update(s.listeners)
    for router in sorted(members):
        ad = adverts.get(router)
        if ad is None:
            continue
        for link in ad.links:
            if link.to not in members:
                continue
            remote = adverts.get(link.to)
            sites[ad.site.id].setdefault("links", []).append({
                "name": link.name, "remoteRouter": link.to, "cost": link.cost,
                "remoteSiteId": remote.site.id if remote is not None else None,
                "remoteSiteName": remote.site.name if remote is not None else None})
    for site_id, entry in sites.items():
        entry["links"] = sorted(entry.get("links", []), key=lambda x: (x["name"], x["remoteRouter"]))
        entry["services"] = [{"routingKey": key, "connectors": sorted(c), "listeners": sorted(li)}
                             for key, (c, li) in sorted(services.get(site_id, {}).items())]
    ordered = sorted(sites.values(), key=lambda s: (s["id"] != site.id, s["name"], s["id"]))
    via: dict[str, list[dict[str, Any]]] = {}
    for r in routes:
        via.setdefault(r.routing_key, []).append({"link": r.link, "cost": r.cost})
    local = set(local_keys)
    route_list = [{"routingKey": key, "local": key in local, "via": sorted(via.get(key, []), key=lambda v: v["link"])}
                  for key in sorted(local | set(via))]
    return {
        "version": STATUS_VERSION,
        "router": router_id,
        "site": site.model_dump(exclude_none=True),
        "sites": ordered,
        "links": [status.as_json() for status in sorted(links, key=lambda x: x.name)],
        "incoming": [{"router": n.router, "site": n.site.model_dump(exclude_none=True)}
                     for n in neighbours if n.link is None],
        "routes": route_list,
    }
