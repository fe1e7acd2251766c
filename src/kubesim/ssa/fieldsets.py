"""Objects flattened into field sets (leaves and list-item members, keyed by FieldsV1 paths) and the comparison of
two of them (added, removed, modified): what ownership is computed from.

``compare(Flat(old), Flat(new))`` is the definition; :func:`diff` computes the same comparison by walking both
objects together and flattening only the subtrees that differ, so a write costs what it changed, not the size of
the object."""

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


_MISSING = object()


def _scalar(value: Any) -> bool:
    return not isinstance(value, dict | list)


class _Differ:
    """The walk behind :func:`diff`; every case it does not handle itself is flattened as :class:`Flat` would."""

    def __init__(self, list_keys: ListKeys) -> None:
        self.list_keys = list_keys
        self.result = Comparison(set(), set(), set())

    def _flat(self, value: Any, names: tuple[str, ...], path: Path) -> Flat:
        flat = Flat(None, self.list_keys, strict=False)
        flat._value(value, names, path)
        return flat

    def _compare_flat(self, old: Any, new: Any, names: tuple[str, ...], path: Path) -> None:
        part = compare(self._flat(old, names, path), self._flat(new, names, path))
        self.result.added |= part.added
        self.result.removed |= part.removed
        self.result.modified |= part.modified

    def root(self, old: Any, new: Any) -> None:
        old = old if isinstance(old, dict) else {}
        new = new if isinstance(new, dict) else {}
        for key in old.keys() | new.keys():
            if key in _IGNORED_TOP:
                continue
            before, after = old.get(key, _MISSING), new.get(key, _MISSING)
            if key == "metadata" and (isinstance(before, dict) or isinstance(after, dict)):
                if not all(isinstance(side, dict) or side is _MISSING for side in (before, after)):
                    # one side's metadata is not an object: flatten both as the Flat constructor would
                    self._compare_flat_top(before, after)
                    continue
                self._fields(_meta(before), _meta(after), ("metadata",), ("f:metadata",))
            elif before is _MISSING:
                self.result.added |= self._flat(after, (key,), (f"f:{key}",)).paths
            elif after is _MISSING:
                self.result.removed |= self._flat(before, (key,), (f"f:{key}",)).paths
            else:
                self.value(before, after, (key,), (f"f:{key}",))

    def _compare_flat_top(self, before: Any, after: Any) -> None:
        sides = []
        for value in (before, after):
            flat = Flat(None, self.list_keys, strict=False)
            if isinstance(value, dict):
                meta = _meta(value)
                if meta:
                    flat._map(meta, ("metadata",), ("f:metadata",))
            elif value is not _MISSING:
                flat._value(value, ("metadata",), ("f:metadata",))
            sides.append(flat)
        part = compare(sides[0], sides[1])
        self.result.added |= part.added
        self.result.removed |= part.removed
        self.result.modified |= part.modified

    def _fields(self, old: dict[str, Any], new: dict[str, Any], names: tuple[str, ...], path: Path) -> None:
        """The members of two maps flattened at ``names``/``path`` (map fields or list-map items)."""
        for key, before in old.items():
            after = new.get(key, _MISSING)
            if after is _MISSING:
                self.result.removed |= self._flat(before, (*names, key), (*path, f"f:{key}")).paths
            elif before is after:
                continue
            elif _scalar(before) and _scalar(after):
                if not json_equal(before, after):
                    self.result.modified.add((*path, f"f:{key}"))
            else:
                self.value(before, after, (*names, key), (*path, f"f:{key}"))
        for key, after in new.items():
            if key not in old:
                self.result.added |= self._flat(after, (*names, key), (*path, f"f:{key}")).paths

    def value(self, old: Any, new: Any, names: tuple[str, ...], path: Path) -> None:
        if old is new:
            return
        if type(old) is dict and type(new) is dict and old and new and not is_atomic_map(self.list_keys, names):
            self._fields(old, new, names, path)
            return
        if type(old) is list and type(new) is list:
            list_type = self.list_keys(names)
            if list_type.kind == "map":
                if self._map_list(old, new, list_type, names, path):
                    return
            elif list_type.kind == "atomic":
                if not json_equal(old, new):
                    self.result.modified.add(path)
                return
            elif json_equal(old, new):
                return
        elif _leaf(old, self.list_keys, names) and _leaf(new, self.list_keys, names):
            if not json_equal(old, new):
                self.result.modified.add(path)
            return
        self._compare_flat(old, new, names, path)

    def _map_list(self, old: list[Any], new: list[Any], list_type: ListType, names: tuple[str, ...],
                  path: Path) -> bool:
        """Items matched by key; False (nothing recorded) when the lists need :class:`Flat`'s own handling
        (items that are not objects, unhashable key values, duplicate keys)."""
        old_items, new_items = _keyed(old, list_type), _keyed(new, list_type)
        if old_items is None or new_items is None:
            return False
        for key, before in old_items.items():
            after = new_items.get(key)
            if after is None:
                item_path = (*path, item_key(before, list_type, names, strict=False))
                self.result.removed |= self._flat_item(before, names, item_path)
            elif before is not after and not json_equal(before, after):
                self._fields(before, after, names, (*path, item_key(after, list_type, names, strict=False)))
        for key, after in new_items.items():
            if key not in old_items:
                item_path = (*path, item_key(after, list_type, names, strict=False))
                self.result.added |= self._flat_item(after, names, item_path)
        return True

    def _flat_item(self, item: dict[str, Any], names: tuple[str, ...], item_path: Path) -> set[Path]:
        flat = Flat(None, self.list_keys, strict=False)
        flat.items.add(item_path)
        flat._map(item, names, item_path)
        return flat.paths


def _meta(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if k not in _IGNORED_METADATA}


def _leaf(value: Any, list_keys: ListKeys, names: tuple[str, ...]) -> bool:
    """Whether :class:`Flat` records ``value`` as one leaf at its path."""
    if isinstance(value, dict):
        return not value or is_atomic_map(list_keys, names)
    if isinstance(value, list):
        return list_keys(names).kind == "atomic"
    return True


def _keyed(items: list[Any], list_type: ListType) -> dict[Any, dict[str, Any]] | None:
    """List-map items by their key values (the types count, as in the canonical JSON of ``item_key``)."""
    defaults = dict(list_type.key_defaults)
    out: dict[Any, dict[str, Any]] = {}
    for item in items:
        if not isinstance(item, dict):
            return None
        parts: list[Any] = []
        for name in list_type.keys:
            value = item.get(name)
            if value is None:
                value = defaults.get(name, _MISSING)
            if not isinstance(value, str | int | float | bool) and value is not _MISSING:
                return None
            parts.append((type(value), repr(value) if isinstance(value, float) else value))
        key = tuple(parts)
        if key in out:
            return None
        out[key] = item
    return out


def diff(old: Any, new: Any, list_keys: ListKeys) -> Comparison:
    """``compare(Flat(old, list_keys, strict=False), Flat(new, list_keys, strict=False))``, computed by walking both
    objects together: subtrees that are the same object, or equal leaves and list items, are not flattened."""
    differ = _Differ(list_keys)
    differ.root(old, new)
    return differ.result
