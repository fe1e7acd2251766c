"""How a list or map merges under server-side apply: ``ListType`` (atomic, set, or map by keys) and ``ListKeys``,
the lookup from a field's path to its type (``TypedKeys`` also knows which maps are atomic)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class ListType:
    """How a list merges: ``atomic`` (replaced whole), ``set`` (by value) or ``map`` (by ``keys``).

    ``key_defaults`` gives values for key fields an item may omit (Service/container port ``protocol`` is
    ``TCP``), so ``{port: 80}`` in an apply matches the live ``{port: 80, protocol: TCP}``.
    """

    kind: Literal["atomic", "set", "map"]
    keys: tuple[str, ...] = ()
    key_defaults: tuple[tuple[str, Any], ...] = ()


ATOMIC = ListType("atomic")
SET = ListType("set")

# Maps a list's path (field names from the object root, list indices omitted) to its merge strategy.
ListKeys = Callable[[tuple[str, ...]], ListType]


class TypedKeys:
    """A `ListKeys` that also knows which maps are atomic (`atomic_map(path)`)."""

    def __init__(self, lists: Callable[[tuple[str, ...]], ListType], atomic_maps: Callable[[tuple[str, ...]], bool]) -> None:
        self._lists = lists
        self._atomic_maps = atomic_maps

    def __call__(self, path: tuple[str, ...]) -> ListType:
        return self._lists(path)

    def atomic_map(self, path: tuple[str, ...]) -> bool:
        return self._atomic_maps(path)


def is_atomic_map(list_keys: ListKeys, path: tuple[str, ...]) -> bool:
    """Whether the map at `path` is atomic for these keys (plain `ListKeys` callables have none)."""
    return isinstance(list_keys, TypedKeys) and list_keys.atomic_map(path)


def all_atomic(path: tuple[str, ...]) -> ListType:
    return ATOMIC
