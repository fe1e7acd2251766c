"""How a custom object's lists and maps merge under server-side apply, read from the schema's
``x-kubernetes-list-type``/``x-kubernetes-list-map-keys``/``x-kubernetes-map-type``."""

from __future__ import annotations

from typing import Any

from kubesim.schema import Schema
from kubesim.ssa.listtypes import ATOMIC, ListKeys, ListType, TypedKeys

# ObjectMeta's list semantics (from its Go markers), which a CRD schema never spells out.
_METADATA_LIST_TYPES = {
    ("metadata", "finalizers"): ListType("set"),
    ("metadata", "ownerReferences"): ListType("map", ("uid",)),
    ("metadata", "managedFields"): ATOMIC,
}


def list_keys_from_schema(schema: Schema) -> ListKeys:
    """How each list of a custom object merges under server-side apply, from ``x-kubernetes-list-type``.

    The returned callable takes a list's path (field names from the root, list indices omitted, map keys
    included) and answers ``atomic`` for anything undeclared, as the apiserver does for CRDs.
    """
    cache: dict[tuple[str, ...], ListType] = {}
    map_cache: dict[tuple[str, ...], bool] = {}

    def lookup(path: tuple[str, ...]) -> ListType:
        if path in _METADATA_LIST_TYPES:
            return _METADATA_LIST_TYPES[path]
        if path not in cache:
            cache[path] = _list_type_at(schema, path)
        return cache[path]

    def atomic_map(path: tuple[str, ...]) -> bool:
        if path not in map_cache:
            node = _node_at(schema, path)
            map_cache[path] = isinstance(node, dict) and node.get("x-kubernetes-map-type") == "atomic"
        return map_cache[path]

    return TypedKeys(lookup, atomic_map)


def _node_at(schema: Schema, path: tuple[str, ...]) -> Any:
    """The schema node of the field at `path` (list items stepped through), or None if undeclared."""
    node: Any = schema
    for name in path:
        while isinstance(node, dict) and node.get("type") == "array":
            node = node.get("items")
        if not isinstance(node, dict):
            return None
        properties = node.get("properties")
        if isinstance(properties, dict) and name in properties:
            node = properties[name]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    return node


def _list_type_at(schema: Schema, path: tuple[str, ...]) -> ListType:
    node = _node_at(schema, path)
    if not isinstance(node, dict):
        return ATOMIC
    kind = node.get("x-kubernetes-list-type")
    if kind == "set":
        return ListType("set")
    if kind == "map":
        keys = tuple(k for k in node.get("x-kubernetes-list-map-keys") or [] if isinstance(k, str))
        return ListType("map", keys)
    return ATOMIC
