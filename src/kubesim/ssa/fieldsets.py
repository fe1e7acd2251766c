"""Objects flattened into field sets (leaves and list-item members, keyed by FieldsV1 paths) and the comparison of
two of them (added, removed, modified): what ownership is computed from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.jsonvalues import json_equal
from kubesim.ssa.fieldsv1 import Path, canonical_json
from kubesim.ssa.listtypes import ListKeys, ListType, is_atomic_map

# Identity/bookkeeping fields nobody owns.
_IGNORED_METADATA = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "managedFields",
        "creationTimestamp",
        "generation",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    }
)

_IGNORED_TOP = frozenset({"apiVersion", "kind"})


def item_key(item: Mapping[str, Any], list_type: ListType, names: tuple[str, ...], *, strict: bool) -> str:
    defaults = dict(list_type.key_defaults)
    key: dict[str, Any] = {}
    for name in list_type.keys:
        if name in item and item[name] is not None:
            key[name] = item[name]
        elif name in defaults:
            key[name] = defaults[name]
        elif strict:
            raise ValueError(
                f".{'.'.join(names)}: list item {canonical_json(item)} is missing key field {name!r}"
            )
    return f"k:{canonical_json(key)}"


class Flat:
    """Leaves (path -> value) and list-item members of one object."""

    def __init__(self, obj: Any, list_keys: ListKeys, *, strict: bool) -> None:
        self.leaves: dict[Path, Any] = {}
        self.items: set[Path] = set()
        self.list_keys = list_keys
        self.strict = strict
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key in _IGNORED_TOP:
                    continue
                if key == "metadata" and isinstance(value, dict):
                    meta = {k: v for k, v in value.items() if k not in _IGNORED_METADATA}
                    if meta:
                        self._map(meta, ("metadata",), ("f:metadata",))
                    continue
                self._value(value, (key,), (f"f:{key}",))

    @property
    def paths(self) -> set[Path]:
        return set(self.leaves) | self.items

    def _map(self, node: Mapping[str, Any], names: tuple[str, ...], path: Path) -> None:
        for key, value in node.items():
            self._value(value, (*names, key), (*path, f"f:{key}"))

    def _value(self, value: Any, names: tuple[str, ...], path: Path) -> None:
        if isinstance(value, dict):
            if value and not is_atomic_map(self.list_keys, names):
                self._map(value, names, path)
            else:
                self.leaves[path] = value
        elif isinstance(value, list):
            list_type = self.list_keys(names)
            if list_type.kind == "set":
                for item in value:
                    if isinstance(item, dict | list):
                        raise ValueError(
                            f".{'.'.join(names)}: a set list may only hold scalars, got {item!r}"
                        )
                    item_path = (*path, f"v:{canonical_json(item)}")
                    if self.strict and item_path in self.leaves:
                        raise ValueError(f".{'.'.join(names)}: duplicate set entry {canonical_json(item)}")
                    self.leaves[item_path] = item
            elif list_type.kind == "map":
                for item in value:
                    if not isinstance(item, dict):
                        raise ValueError(f".{'.'.join(names)}: list items must be objects, got {item!r}")
                    item_path = (*path, item_key(item, list_type, names, strict=self.strict))
                    if self.strict and item_path in self.items:
                        raise ValueError(f".{'.'.join(names)}: duplicate entries for key {item_path[-1][2:]}")
                    self.items.add(item_path)
                    self._map(item, names, item_path)
            else:
                self.leaves[path] = value
        else:
            self.leaves[path] = value


@dataclass
class Comparison:
    added: set[Path]
    removed: set[Path]
    modified: set[Path]

    @property
    def changed(self) -> set[Path]:
        return self.added | self.modified


def compare(old: Flat, new: Flat) -> Comparison:
    old_paths, new_paths = old.paths, new.paths
    modified = {
        p for p in old.leaves.keys() & new.leaves.keys() if not json_equal(old.leaves[p], new.leaves[p])
    }
    return Comparison(new_paths - old_paths, old_paths - new_paths, modified)
