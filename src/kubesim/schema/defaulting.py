"""Schema ``default``s applied to a custom object as the apiserver applies them (after pruning, before
validation), including the removal of nulls a non-nullable field may not hold."""

from __future__ import annotations

from typing import Any

from kubesim.jsonvalues import json_clone
from kubesim.schema import Schema, properties_of


def apply_defaults(obj: dict[str, Any], schema: Schema, *, copy: bool = True) -> dict[str, Any]:
    """Return a copy of ``obj`` (``obj`` itself with ``copy=False``) with schema ``default``s applied as the
    apiserver does.

    A default fills a field that is absent, or null while not ``nullable``; a ``nullable`` field explicitly null
    keeps its null. A non-nullable null without a default is dropped. Defaults apply recursively, also inside
    values that were just defaulted, inside map values and list items — but never create a missing parent object.
    """
    result = json_clone(obj) if copy else obj
    _prune_non_nullable_nulls(result, schema)
    _default(result, schema)
    return result


def _default(value: Any, s: Any) -> None:
    if not isinstance(s, dict):
        return
    if isinstance(value, dict):
        properties = properties_of(s)
        for name, prop in properties.items():
            if not isinstance(prop, dict) or "default" not in prop or prop["default"] is None:
                continue
            if name not in value or _is_non_nullable_null(value[name], prop):
                value[name] = json_clone(prop["default"])
        additional = s.get("additionalProperties")
        for name in value:
            if name in properties:
                _default(value[name], properties[name])
            elif isinstance(additional, dict):
                if _is_non_nullable_null(value[name], additional) and additional.get("default") is not None:
                    value[name] = json_clone(additional["default"])
                _default(value[name], additional)
    elif isinstance(value, list):
        items = s.get("items")
        if not isinstance(items, dict):
            return
        for i in range(len(value)):
            if _is_non_nullable_null(value[i], items) and items.get("default") is not None:
                value[i] = json_clone(items["default"])
            _default(value[i], items)


def _is_non_nullable_null(value: Any, s: Schema) -> bool:
    return value is None and not s.get("nullable")


def _prune_non_nullable_nulls(value: Any, s: Any) -> None:
    if not isinstance(s, dict):
        return
    if isinstance(value, dict):
        properties = properties_of(s)
        additional = s.get("additionalProperties")
        for name in list(value):
            child_schema = properties.get(name, additional if isinstance(additional, dict) else None)
            if not isinstance(child_schema, dict):
                continue
            child = value[name]
            if child is None and not child_schema.get("nullable") and child_schema.get("default") is None:
                del value[name]
            else:
                _prune_non_nullable_nulls(child, child_schema)
    elif isinstance(value, list):
        for item in value:
            _prune_non_nullable_nulls(item, s.get("items"))
