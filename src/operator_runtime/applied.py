"""Decide, from the cache alone, whether a server-side apply would change anything.

A controller that writes only when something changed must compare the configuration it would apply with the
object it observed. Two things must hold for the apply to be a no-op:

1. every field in the configuration already has that value in the live object (:func:`is_subset`);
2. the field manager owns no field that the configuration no longer contains (an apply would remove it):
   :func:`stale_owned_fields` reads the manager's ``managedFields`` entry (``fieldsV1``).

Lists are compared whole (same length, item by item), and ownership inside a list is not inspected: any change of
a list shows up in check 1. Maps the kind declares atomic (a Service's ``spec.selector``) are compared for equality:
an apply replaces them whole, so an extra live key is a change. This errs on the side of writing, never on the side
of missing a change.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from .objects import JsonDict, items

Path = tuple[str, ...]

#: Maps a Service apply replaces whole (``+mapType=atomic`` in the Kubernetes API types).
SERVICE_ATOMIC_MAPS: frozenset[Path] = frozenset({("spec", "selector")})


def is_subset(desired: Any, live: Any, atomic_maps: Collection[Path] = (), path: Path = ()) -> bool:
    """True when ``live`` has every field of ``desired`` with the same value (extra live fields are fine, except
    inside the maps at ``atomic_maps``, which must be equal)."""
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return False
        if path in atomic_maps and set(live) != set(desired):
            return False
        return all(key in live and is_subset(value, live[key], atomic_maps, (*path, str(key)))
                   for key, value in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return False
        return all(is_subset(d, lv) for d, lv in zip(desired, live, strict=True))
    if isinstance(desired, bool) or isinstance(live, bool):
        return desired is live
    return bool(desired == live)


def _config_paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    if isinstance(value, Mapping) and value:
        for key, child in value.items():
            yield from _config_paths(child, (*prefix, str(key)))
    else:
        yield prefix


def _owned_paths(fields: Mapping[str, Any], prefix: Path = ()) -> Iterator[Path]:
    named = {k: v for k, v in fields.items() if k.startswith("f:")}
    if not named or any(k[:2] in ("k:", "v:", "i:") for k in fields):
        if prefix:
            yield prefix
        return
    for key, child in named.items():
        yield from _owned_paths(child if isinstance(child, Mapping) else {}, (*prefix, key[2:]))


def _pruned(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` cut where :func:`_owned_paths` stops reading: below list items, and at leaves."""
    if any(k[:2] in ("k:", "v:", "i:") for k in fields):
        return {}
    return {key: _pruned(child) if isinstance(child, Mapping) else {} for key, child in fields.items()
            if key.startswith("f:")}


#: Pruned fieldsV1 trees by shape: thousands of objects applied alike share one tree.
_SHAPES: dict[str, dict[str, Any]] = {}
_MAX_SHAPES = 1024


def owned_fields_cache(manager: str, subresource: str | None = None, *,
                       rest: Callable[[JsonDict], JsonDict] | None = None) -> Callable[[JsonDict], JsonDict]:
    """A cache transform (:mod:`.projection`) for objects :func:`apply_is_noop` will read: of ``managedFields``
    only ``manager``'s Apply entry stays, its ``fieldsV1`` cut to what :func:`stale_owned_fields` reads (owned field
    paths down to list items) and shared between objects whose trees look the same. ``rest`` transforms the object
    without its managedFields (e.g. :func:`.projection.intern_strings`)."""

    def transform(obj: JsonDict) -> JsonDict:
        metadata = obj.get("metadata")
        if not isinstance(metadata, Mapping) or "managedFields" not in metadata:
            return rest(obj) if rest is not None else obj
        out = dict(obj)
        out["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
        if rest is not None:
            out = rest(out)
        trimmed = out["metadata"]
        fields = managed_entry(obj, manager, subresource)
        if fields is not None:
            pruned = _pruned(fields)
            shape = json.dumps(pruned, sort_keys=True)
            shared = _SHAPES.get(shape)
            if shared is None:
                shared = pruned
                if len(_SHAPES) < _MAX_SHAPES:
                    _SHAPES[shape] = pruned
            entry: JsonDict = {"manager": manager, "operation": "Apply", "fieldsV1": shared}
            if subresource:
                entry["subresource"] = subresource
            trimmed["managedFields"] = [entry]
        return out

    return transform


def managed_entry(live: Mapping[str, Any], manager: str, subresource: str | None = None) -> Mapping[str, Any] | None:
    for entry in items(live, "metadata", "managedFields"):
        if (entry.get("manager") == manager and entry.get("operation") == "Apply"
                and (entry.get("subresource") or None) == subresource):
            fields = entry.get("fieldsV1")
            return fields if isinstance(fields, Mapping) else {}
    return None


def stale_owned_fields(config: Mapping[str, Any], live: Mapping[str, Any], manager: str,
                       subresource: str | None = None) -> list[Path]:
    """Field paths ``manager`` owns in ``live`` that ``config`` does not mention (an apply would remove them)."""
    owned = managed_entry(live, manager, subresource)
    if not owned:
        return []
    wanted = set(_config_paths({k: v for k, v in config.items() if k not in ("apiVersion", "kind")}))
    stale = []
    for path in _owned_paths(owned):
        if path[:1] == ("metadata",) and path[1:2] in (("name",), ("namespace",)):
            continue
        if not any(w[: len(path)] == path or path[: len(w)] == w for w in wanted):
            stale.append(path)
    return stale


def apply_is_noop(config: Mapping[str, Any], live: Mapping[str, Any] | None, manager: str,
                  subresource: str | None = None, *, atomic_maps: Collection[Path] = ()) -> bool:
    """True when applying ``config`` as ``manager`` to ``live`` would change nothing."""
    if live is None:
        return False
    body = {k: v for k, v in config.items() if k not in ("apiVersion", "kind")}
    return is_subset(body, live, atomic_maps) and not stale_owned_fields(config, live, manager, subresource)
