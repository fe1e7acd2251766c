"""Link-state routing between routers (pure): the advertisements routers flood to each other, the database each
router keeps of them, shortest paths by summed link cost (Dijkstra), and the routes to routing keys that follow.

Every router advertises, with a sequence number that only grows, its site, its outgoing links that are up (to which
router, at which cost, by which link name) and, per routing key, the connector targets and listeners it has. A
router keeps the newest advertisement of every router it can reach through control channels (in either direction)
and drops the others. Data flows along a link's direction only (the router that dials a link's access opens every
connection over it), so paths are computed on the directed graph of up links; the control channels connect both
ways, so which routers are "in the network" is decided on the undirected graph.

Routes: for each routing key with connectors at other reachable routers, and for each of this router's links that
is the first hop of a shortest path to one of them, the smallest path cost via that link (upstream's ``balanced``
forwarding values a remote candidate by the cost to the destination router, per next hop). Every router forwards
along its own shortest paths over the same database, so routes have no loops once the databases agree.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from .config import MAX_NAME, RemoteRoute

__all__ = [
    "MAX_ADVERT_KEYS",
    "Advert",
    "AdvertLink",
    "LinkStateDb",
    "Path",
    "ServiceEntry",
    "SiteInfo",
    "connected_routers",
    "remote_routes",
    "shortest_paths",
]

MAX_ADVERT_KEYS = 100_000
MAX_NAMES = 10_000


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class SiteInfo(_Wire):
    id: str = Field(min_length=1, max_length=253)
    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = Field(default=None, max_length=253)


class AdvertLink(_Wire):
    """An outgoing link of the advertising router that is up."""

    to: str = Field(min_length=1, max_length=253)          # remote router id
    cost: int = Field(ge=1, le=2**31 - 1)
    name: str = Field(min_length=1, max_length=MAX_NAME)  # the link's name at the advertising router


class ServiceEntry(_Wire):
    """A routing key at the advertising router: its connector targets and listeners there."""

    key: str = Field(min_length=1, max_length=MAX_NAME)
    connectors: tuple[str, ...] = Field(default=(), max_length=MAX_NAMES)
    listeners: tuple[str, ...] = Field(default=(), max_length=MAX_NAMES)


class Advert(_Wire):
    router: str = Field(min_length=1, max_length=253)
    site: SiteInfo
    seq: int = Field(ge=0)
    links: tuple[AdvertLink, ...] = Field(default=(), max_length=10_000)
    peers: tuple[str, ...] = Field(default=(), max_length=10_000)   # routers with an up link to this one
    services: tuple[ServiceEntry, ...] = Field(default=(), max_length=MAX_ADVERT_KEYS)

    def service_map(self) -> dict[str, ServiceEntry]:
        return {s.key: s for s in self.services}


@dataclass
class LinkStateDb:
    """The newest advertisement of each router (this router's own included)."""

    adverts: dict[str, Advert] = field(default_factory=dict)

    def offer(self, advert: Advert) -> bool:
        """Keep ``advert`` if it is newer than what is known of its router; True when kept (flood it on)."""
        known = self.adverts.get(advert.router)
        if known is not None and known.seq >= advert.seq:
            return False
        self.adverts[advert.router] = advert
        return True

    def purge(self, keep: Iterable[str]) -> list[str]:
        """Drop the advertisements of routers not in ``keep``; returns the dropped router ids."""
        keep_set = set(keep)
        gone = [r for r in self.adverts if r not in keep_set]
        for r in gone:
            del self.adverts[r]
        return gone


def connected_routers(adverts: Mapping[str, Advert], self_id: str) -> set[str]:
    """Routers joined to ``self_id`` by up links in either direction (the routers of its network). A link counts
    only when both ends say it is up (the dialler lists it in ``links``, the other end lists the dialler in
    ``peers``): the last advertisement of a router that was cut off (which nobody replaces) cannot keep it in."""
    neighbours: dict[str, set[str]] = {}
    for ad in adverts.values():
        for link in ad.links:
            other = adverts.get(link.to)
            if other is not None and ad.router in other.peers:
                neighbours.setdefault(ad.router, set()).add(link.to)
                neighbours.setdefault(link.to, set()).add(ad.router)
    seen = {self_id}
    todo = [self_id]
    while todo:
        for n in neighbours.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


@dataclass(frozen=True)
class Path:
    cost: int
    first_link: str     # the name of this router's link the path starts with


def shortest_paths(adverts: Mapping[str, Advert], self_id: str) -> dict[str, Path]:
    """Cheapest path from ``self_id`` to every router reachable along up links (directed), with the first link.

    Ties between equal-cost paths are broken by the first link's name, so the choice is stable."""
    best: dict[str, Path] = {}
    me = adverts.get(self_id)
    if me is None:
        return best
    heap: list[tuple[int, str, str]] = []
    for link in me.links:
        heapq.heappush(heap, (link.cost, link.name, link.to))
    while heap:
        cost, first, node = heapq.heappop(heap)
        if node in best or node == self_id:
            continue
        ad = adverts.get(node)
        if ad is None:
            continue    # a router whose advertisement we do not have yet: not usable
        best[node] = Path(cost, first)
        for link in ad.links:
            if link.to not in best and link.to != self_id:
                heapq.heappush(heap, (cost + link.cost, first, link.to))
    return best


def remote_routes(adverts: Mapping[str, Advert], self_id: str) -> tuple[RemoteRoute, ...]:
    """Routes to routing keys with connectors at other routers: per key and first link, the cheapest path cost."""
    paths = shortest_paths(adverts, self_id)
    best: dict[tuple[str, str], int] = {}
    for router, path in paths.items():
        for service in adverts[router].services:
            if service.connectors:
                k = (service.key, path.first_link)
                best[k] = min(path.cost, best.get(k, path.cost))
    return tuple(RemoteRoute(routing_key=key, link=link, cost=cost) for (key, link), cost in sorted(best.items()))
