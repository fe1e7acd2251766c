"""``BoundedCache``: a mapping that keeps at most a fixed number of entries, dropping the least recently used.

The site controller remembers small things per object it has seen (parsed label selectors, the Events it has said,
the CA certificates of issuer Secrets by version, redemptions, bindings): each such memory is a ``BoundedCache``, so
that a cluster with ever new objects never grows it without end; an entry dropped is only computed or said again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["DEFAULT_LIMIT", "BoundedCache"]

#: The entries a cache keeps unless told otherwise.
DEFAULT_LIMIT = 4096

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``limit`` entries; reading or writing an entry makes it the most recently used, and a new entry beyond
    the limit drops the least recently used one."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError("a bounded cache keeps at least one entry")
        self.limit = limit
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The entry of ``key`` (now the most recently used), or None."""
        if key not in self._entries:
            return None
        self._entries.move_to_end(key)
        return self._entries[key]

    def put(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def add(self, key: K, value: V) -> bool:
        """Remember ``key`` and say whether it is new (a memory of things done once: ``if cache.add(k, True)``)."""
        new = key not in self._entries
        self.put(key, value)
        return new

    def pop(self, key: K) -> V | None:
        return self._entries.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)
