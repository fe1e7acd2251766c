"""Counters that survive router restarts (pure).

A router's traffic report carries counters since that router process started (its ``instance``). When a report
arrives with a new instance, the last values of the old one are added to a base, so the totals an observer shows
keep growing across restarts and lose only what the old instance counted after its last report (at most one report
interval). Routers are forgotten least-recently-reported first beyond ``max_routers``, so a stranger that keeps
inventing router names cannot grow this without bound.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Totals"]

Key = tuple[str, ...]


@dataclass
class _Router:
    instance: int
    last: dict[Key, int] = field(default_factory=dict)
    base: dict[Key, int] = field(default_factory=dict)


class Totals:
    """Per router: counter values by key, carried across the router's restarts."""

    def __init__(self, max_routers: int = 1024) -> None:
        self.max_routers = max_routers
        self._routers: OrderedDict[str, _Router] = OrderedDict()

    def update(self, router: str, instance: int, counters: Mapping[Key, int]) -> None:
        """Takes a report's counters. Values from an older instance than the one kept are ignored."""
        kept = self._routers.get(router)
        if kept is None:
            kept = _Router(instance=instance)
            self._routers[router] = kept
        elif instance < kept.instance:
            return
        elif instance > kept.instance:
            for key, value in kept.last.items():
                kept.base[key] = kept.base.get(key, 0) + value
            kept.instance = instance
            kept.last = {}
        kept.last = {key: max(0, int(v)) for key, v in counters.items()}
        self._routers.move_to_end(router)
        while len(self._routers) > self.max_routers:
            self._routers.popitem(last=False)

    def get(self, router: str, key: Key) -> int:
        kept = self._routers.get(router)
        if kept is None:
            return 0
        return kept.base.get(key, 0) + kept.last.get(key, 0)

    def keys(self, router: str) -> set[Key]:
        kept = self._routers.get(router)
        if kept is None:
            return set()
        return set(kept.base) | set(kept.last)

    def routers(self) -> list[str]:
        return list(self._routers)
