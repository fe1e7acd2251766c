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
Strings in the result are interned (namespaces, node names, label values repeat across thousands of objects).
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


def _interned(value: Any) -> Any:
    """``value`` with its strings (keys and values) interned; containers rebuilt."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {sys.intern(k) if isinstance(k, str) else k: _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    return value


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
