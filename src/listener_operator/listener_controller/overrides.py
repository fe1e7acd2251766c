"""Deep merge of override objects over a generated Service (behaviour.md "Overrides").

Upstream merges typed Kubernetes structs with k8s-openapi's generated ``DeepMerge``; we merge plain dicts, so the
per-field strategies that the Rust types carry are written down here as a small table (:data:`SERVICE_MERGE`):

- maps merge per key, except maps Kubernetes declares atomic (``spec.selector``), which are replaced whole;
- a scalar (or a type change) in the override replaces the base; ``null`` in the override leaves the base alone
  (in Rust a ``None`` field means "not set");
- list-maps merge item by item on their keys: ``spec.ports`` by ``port`` (k8s-openapi's key for ServicePort),
  ``metadata.ownerReferences`` by ``uid``, ``status.conditions`` by ``type``; unmatched items are appended;
- list-sets (``metadata.finalizers``) gain the missing items;
- every other list is atomic: the override replaces it.

Strategic merge patch would be similar but is not the same (directives, different keys for ports), hence our own.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Path = tuple[str, ...]
ITEM = "[]"  # path segment for "any element of this list"


@dataclass(frozen=True)
class MergeStrategy:
    """Where the kind deviates from "maps granular, lists atomic"."""

    list_map_keys: Mapping[Path, tuple[str, ...]] = field(default_factory=dict)
    list_sets: frozenset[Path] = frozenset()
    atomic_maps: frozenset[Path] = frozenset()


SERVICE_MERGE = MergeStrategy(
    list_map_keys={
        ("metadata", "ownerReferences"): ("uid",),
        ("spec", "ports"): ("port",),
        ("status", "conditions"): ("type",),
    },
    list_sets=frozenset({("metadata", "finalizers")}),
    atomic_maps=frozenset({("spec", "selector")}),
)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any],
               strategy: MergeStrategy = SERVICE_MERGE) -> dict[str, Any]:
    """A new dict: ``override`` merged over ``base``. Neither input is modified."""
    merged = _merge_value(copy.deepcopy(dict(base)), override, (), strategy)
    assert isinstance(merged, dict)
    return merged


def _merge_value(base: Any, override: Any, path: Path, strategy: MergeStrategy) -> Any:
    if override is None:
        return base
    if isinstance(override, Mapping) and isinstance(base, dict) and path not in strategy.atomic_maps:
        for key, value in override.items():
            if value is not None:
                base[key] = _merge_value(base.get(key), value, (*path, key), strategy)
        return base
    if isinstance(override, Sequence) and not isinstance(override, str) and isinstance(base, list):
        if path in strategy.list_map_keys:
            return _merge_list_map(base, override, strategy.list_map_keys[path], path, strategy)
        if path in strategy.list_sets:
            return base + [_without_nulls(item) for item in override if item not in base]
    return _without_nulls(override)


def _without_nulls(value: Any) -> Any:
    """A deep copy without null map entries: a null field in an override means "not set", as in upstream."""
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return copy.deepcopy(value)


def _merge_list_map(base: list[Any], override: Sequence[Any], keys: tuple[str, ...], path: Path,
                    strategy: MergeStrategy) -> list[Any]:
    def key_of(item: Any) -> tuple[Any, ...] | None:
        return tuple(item.get(k) for k in keys) if isinstance(item, Mapping) else None

    for item in override:
        item_key = key_of(item)
        match = next((i for i, existing in enumerate(base)
                      if item_key is not None and key_of(existing) == item_key), None)
        if match is None:
            base.append(_without_nulls(item))
        else:
            base[match] = _merge_value(base[match], item, (*path, ITEM), strategy)
    return base
