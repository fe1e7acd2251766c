"""Cache transforms: what a reflector keeps of each object it receives (kube-rs's reflector ``modify``,
controller-runtime's cache ``TransformFunc``).

A cache that holds whole objects pays for fields nobody reads: ``metadata.managedFields`` alone is often larger
than the rest of an object, and a Node carries images, conditions and capacity a controller never looks at. A
transform runs once per object on arrival (list and watch) and returns what is stored instead.

:func:`project` builds a transform from a declaration of the fields to keep, written next to the code that reads
them::

    NODE_FIELDS = project({"metadata": {"name": KEEP, "resourceVersion": KEEP}, "status": {"addresses": KEEP}})

A mapping keeps the listed keys (recursing into their values), :data:`KEEP` keeps a value whole, and a one-element
list ``[spec]`` keeps a list, each item projected by ``spec``. ``apiVersion`` and ``kind`` are always kept.
Strings in the result are interned and small containers shared (namespaces, node names, label maps, port lists,
conditions repeat across thousands of objects): cached objects are read-only, so this is safe.
(:func:`operator_runtime.applied.owned_fields_cache` is the transform for objects whose managedFields a no-write
check reads.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from .objects import JsonDict

__all__ = ["KEEP", "Fields", "Transform", "intern_strings", "project"]

Transform = Callable[[JsonDict], JsonDict]

#: Keep this value as it is.
KEEP = True

Fields = Mapping[str, Any]  # key -> KEEP | Fields | [Fields]

_ALWAYS = ("apiVersion", "kind")


#: Small containers seen lately, by content: equal ones in different objects are one object in memory.
_SHARED: dict[Any, Any] = {}
_SHARED_MAX = 4096
#: Containers of at most this many values (counting nested ones) are shared.
_SMALL = 12


def _interned(value: Any) -> Any:
    """``value`` rebuilt with its strings interned and its small containers shared (see :func:`_intern`)."""
    return _intern(value)[0]


def _intern(value: Any) -> tuple[Any, Any, int]:
    """(the rebuilt value, a key identifying its content when it is small, its size). Equal small containers
    (``{"ready": true}``, a Listener's ports, a label map) from thousands of objects become one shared object:
    cached objects are read-only, so sharing is safe. The key keeps JSON's distinctions (``1``, ``1.0`` and
    ``true`` differ) and the order of keys."""
    kind = type(value)
    if kind is str:
        text = sys.intern(value)
        return text, text, 1
    if kind is dict:
        out: dict[str, Any] = {}
        keys: list[Any] | None = []
        size = 1
        for name, child in value.items():
            name = sys.intern(name) if type(name) is str else name
            out[name], child_key, child_size = _intern(child)
            size += child_size
            if keys is not None and child_key is not None and size <= _SMALL:
                keys.append((name, child_key))
            else:
                keys = None
        return _shared(("d", tuple(keys)), out, size) if keys is not None else (out, None, size)
    if kind is list:
        items: list[Any] = []
        item_keys: list[Any] | None = []
        size = 1
        for child in value:
            item, child_key, child_size = _intern(child)
            items.append(item)
            size += child_size
            if item_keys is not None and child_key is not None and size <= _SMALL:
                item_keys.append(child_key)
            else:
                item_keys = None
        return _shared(("l", tuple(item_keys)), items, size) if item_keys is not None else (items, None, size)
    return value, (kind, repr(value) if kind is float else value), 1


def _shared(key: Any, value: Any, size: int) -> tuple[Any, Any, int]:
    known = _SHARED.get(key)
    if known is not None:
        return known, key, size
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()  # objects keep what they share; the table starts over
    _SHARED[key] = value
    return value, key, size


def _project(value: Any, spec: Any) -> Any:
    if spec is KEEP:
        return _interned(value)
    if isinstance(spec, list):
        if not isinstance(value, list):
            return _interned(value)  # not the shape declared: kept, so readers see (and reject) what was sent
        return [_project(item, spec[0]) for item in value]
    if not isinstance(value, dict):
        return _interned(value)
    return {key: _project(value[key], child) for key, child in spec.items() if key in value}


def intern_strings(obj: JsonDict) -> JsonDict:
    """The whole object, its strings interned (for caches that must keep every field)."""
    result: JsonDict = _interned(obj)
    return result


def project(fields: Fields) -> Transform:
    """A transform keeping only ``fields`` (see the module docstring for the declaration)."""
    _check(fields, ())
    spec = dict(fields)
    for key in _ALWAYS:
        spec.setdefault(key, KEEP)

    def transform(obj: JsonDict) -> JsonDict:
        result: JsonDict = _project(obj, spec)
        return result

    return transform


def _check(spec: Any, path: tuple[str, ...]) -> None:
    where = ".".join(path) or "the root"
    if spec is KEEP:
        return
    if isinstance(spec, list):
        if len(spec) != 1:
            raise ValueError(f"field declaration at {where}: a list declares its items with exactly one entry")
        _check(spec[0], path)
        return
    if not isinstance(spec, Mapping):
        raise ValueError(f"field declaration at {where}: expected KEEP, a mapping or [item declaration]")
    for key, child in spec.items():
        _check(child, (*path, str(key)))
