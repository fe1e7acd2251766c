"""Server-side apply and ``metadata.managedFields`` (FieldsV1) bookkeeping, as the apiserver does it.

Hand-written: this is the behaviour of Kubernetes' structured-merge-diff library (field sets, ownership,
conflicts, pruning of fields a manager stops applying), which has no Python implementation.

Model: an object is flattened into a *field set* of paths. A path is a tuple of FieldsV1 elements: ``f:<name>``
(a field), ``k:<json>`` (a list-map item by its keys), ``v:<json>`` (a set item by value), ``i:<n>`` (an index).
Leaves are scalars, atomic lists, nulls and empty maps; list items are members too (FieldsV1 ``.``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kubesim.jsonvalues import json_clone, json_equal
from kubesim.patch import POD_SPEC_PREFIXES

__all__ = [
    "ATOMIC",
    "ApplyConflict",
    "ListKeys",
    "ListType",
    "apply",
    "builtin_list_keys",
    "decode_fields_v1",
    "encode_fields_v1",
    "format_path",
    "is_atomic_map",
    "record_update",
]


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

Path = tuple[str, ...]


class ApplyConflict(Exception):
    """Apply would change fields another manager owns; ``conflicts`` are ``(manager, ".field.path")`` pairs.

    The message is the apiserver's (``Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas``);
    ``causes`` are the ``FieldManagerConflict`` causes of the 409 Status body.
    """

    def __init__(self, conflicts: Sequence[tuple[str, str]], displays: Sequence[str] | None = None) -> None:
        self.conflicts = list(conflicts)
        self.displays = list(displays) if displays is not None else [json.dumps(m) for m, _ in self.conflicts]
        super().__init__(self._message())

    @property
    def causes(self) -> list[dict[str, str]]:
        return [
            {"reason": "FieldManagerConflict", "message": f"conflict with {display}", "field": path}
            for display, (_, path) in zip(self.displays, self.conflicts, strict=True)
        ]

    def _message(self) -> str:
        count = len(self.conflicts)
        if count == 1:
            return f"Apply failed with 1 conflict: conflict with {self.displays[0]}: {self.conflicts[0][1]}"
        by_manager: dict[str, list[str]] = {}
        for display, (_, path) in zip(self.displays, self.conflicts, strict=True):
            by_manager.setdefault(display, []).append(path)
        lines: list[str] = []
        for display in sorted(by_manager):
            lines.append(f"conflicts with {display}:")
            lines.extend(f"- {path}" for path in by_manager[display])
        return f"Apply failed with {count} conflicts: " + "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Built-in list types


_CONTAINER_LISTS: dict[tuple[str, ...], ListType] = {
    ("ports",): ListType("map", ("containerPort", "protocol"), (("protocol", "TCP"),)),
    ("env",): ListType("map", ("name",)),
    ("volumeMounts",): ListType("map", ("mountPath",)),
    ("volumeDevices",): ListType("map", ("devicePath",)),
    ("resizePolicy",): ATOMIC,
}

_POD_SPEC_LISTS: dict[tuple[str, ...], ListType] = {
    ("volumes",): ListType("map", ("name",)),
    ("imagePullSecrets",): ListType("map", ("name",)),
    ("hostAliases",): ListType("map", ("ip",)),
    ("topologySpreadConstraints",): ListType("map", ("topologyKey", "whenUnsatisfiable")),
    ("schedulingGates",): ListType("map", ("name",)),
    ("resourceClaims",): ListType("map", ("name",)),
}
for _containers in ("containers", "initContainers", "ephemeralContainers"):
    _POD_SPEC_LISTS[(_containers,)] = ListType("map", ("name",))
    for _sub, _lt in _CONTAINER_LISTS.items():
        _POD_SPEC_LISTS[(_containers, *_sub)] = _lt

_COMMON_LISTS: dict[tuple[str, ...], ListType] = {
    ("metadata", "finalizers"): SET,
    ("metadata", "ownerReferences"): ListType("map", ("uid",)),
    ("status", "conditions"): ListType("map", ("type",)),
}

_KIND_LISTS: dict[str, dict[tuple[str, ...], ListType]] = {
    "Service": {("spec", "ports"): ListType("map", ("port", "protocol"), (("protocol", "TCP"),))},
    "Pod": {("status", "podIPs"): ListType("map", ("ip",)), ("status", "hostIPs"): ListType("map", ("ip",))},
    "CSINode": {("spec", "drivers"): ListType("map", ("name",))},
    "ServiceAccount": {("secrets",): ListType("map", ("name",))},
}


# Maps (and structs) marked +mapType=atomic / +structType=atomic in k8s.io/api: owned and replaced as one value.
_POD_SPEC_ATOMIC_MAPS: frozenset[tuple[str, ...]] = frozenset({("nodeSelector",)})
_KIND_ATOMIC_MAPS: dict[str, frozenset[tuple[str, ...]]] = {
    "Service": frozenset({("spec", "selector")}),
    "Deployment": frozenset({("spec", "selector")}),
    "StatefulSet": frozenset({("spec", "selector")}),
    "DaemonSet": frozenset({("spec", "selector")}),
    "ReplicaSet": frozenset({("spec", "selector")}),
    "PersistentVolumeClaim": frozenset({("spec", "selector")}),
}


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


def builtin_list_keys(api_version: str, kind: str | None = None) -> ListKeys:
    """List types of built-in ``kind`` (``builtin_list_keys(kind)`` works too); unknown lists are atomic.

    The result also answers `atomic_map(path)` for the kind's atomic maps (Service ``spec.selector``, label
    selectors of workloads, ``nodeSelector``)."""
    if kind is None:
        kind = api_version
    table = dict(_COMMON_LISTS)
    table.update(_KIND_LISTS.get(kind, {}))
    atomic = set(_KIND_ATOMIC_MAPS.get(kind, frozenset()))
    for prefix in POD_SPEC_PREFIXES.get(kind, ()):
        for path, list_type in _POD_SPEC_LISTS.items():
            table[prefix + path] = list_type
        atomic |= {prefix + path for path in _POD_SPEC_ATOMIC_MAPS}

    def lookup(path: tuple[str, ...]) -> ListType:
        return table.get(path, ATOMIC)

    return TypedKeys(lookup, atomic.__contains__)


def _all_atomic(path: tuple[str, ...]) -> ListType:
    return ATOMIC


# ---------------------------------------------------------------------------------------------------------------
# Paths and FieldsV1


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def format_path(path: Path) -> str:
    """Render a path as the apiserver does in conflict messages: ``.spec.ports[port=80,protocol="TCP"].name``."""
    out: list[str] = []
    for element in path:
        kind, _, rest = element.partition(":")
        if kind == "f":
            out.append(f".{rest}")
        elif kind == "k":
            key = json.loads(rest)
            out.append("[" + ",".join(f"{k}={_canonical(key[k])}" for k in sorted(key)) + "]")
        elif kind == "v":
            out.append(f"[={rest}]")
        else:
            out.append(f"[{rest}]")
    return "".join(out)


def decode_fields_v1(tree: Any, where: str = "fieldsV1") -> set[Path]:
    """FieldsV1 JSON tree -> set of member paths (``k:``/``v:`` keys re-canonicalised)."""
    paths: set[Path] = set()

    def walk(node: Any, prefix: Path) -> None:
        if not isinstance(node, dict):
            raise ValueError(f"{where}: expected an object at {format_path(prefix) or 'the root'}")
        if not node and prefix:
            paths.add(prefix)
        for key, child in node.items():
            if key == ".":
                if prefix:
                    paths.add(prefix)
                continue
            kind, sep, rest = key.partition(":")
            if not sep or kind not in ("f", "k", "v", "i"):
                raise ValueError(f"{where}: invalid field element {key!r}")
            if kind in ("k", "v"):
                try:
                    parsed = json.loads(rest)
                except json.JSONDecodeError:
                    raise ValueError(f"{where}: invalid JSON in field element {key!r}") from None
                if kind == "k" and not isinstance(parsed, dict):
                    raise ValueError(f"{where}: key element {key!r} must hold a JSON object")
                key = f"{kind}:{_canonical(parsed)}"
            walk(child, (*prefix, key))

    walk(tree, ())
    return paths


def encode_fields_v1(paths: Iterable[Path]) -> dict[str, Any]:
    """Set of member paths -> FieldsV1 JSON tree (``.`` marks a member that also has children)."""
    root: dict[str, Any] = {}
    members: set[Path] = set()
    for path in paths:
        node = root
        for element in path:
            node = node.setdefault(element, {})
        members.add(path)

    def render(node: dict[str, Any], prefix: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if node and prefix in members:
            out["."] = {}
        for key in sorted(node):
            out[key] = render(node[key], (*prefix, key))
        return out

    return render(root, ())


# ---------------------------------------------------------------------------------------------------------------
# Flattening objects into field sets

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


def _item_key(item: Mapping[str, Any], list_type: ListType, names: tuple[str, ...], *, strict: bool) -> str:
    defaults = dict(list_type.key_defaults)
    key: dict[str, Any] = {}
    for name in list_type.keys:
        if name in item and item[name] is not None:
            key[name] = item[name]
        elif name in defaults:
            key[name] = defaults[name]
        elif strict:
            raise ValueError(
                f".{'.'.join(names)}: list item {_canonical(item)} is missing key field {name!r}"
            )
    return f"k:{_canonical(key)}"


class _Flat:
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
                    item_path = (*path, f"v:{_canonical(item)}")
                    if self.strict and item_path in self.leaves:
                        raise ValueError(f".{'.'.join(names)}: duplicate set entry {_canonical(item)}")
                    self.leaves[item_path] = item
            elif list_type.kind == "map":
                for item in value:
                    if not isinstance(item, dict):
                        raise ValueError(f".{'.'.join(names)}: list items must be objects, got {item!r}")
                    item_path = (*path, _item_key(item, list_type, names, strict=self.strict))
                    if self.strict and item_path in self.items:
                        raise ValueError(f".{'.'.join(names)}: duplicate entries for key {item_path[-1][2:]}")
                    self.items.add(item_path)
                    self._map(item, names, item_path)
            else:
                self.leaves[path] = value
        else:
            self.leaves[path] = value


@dataclass
class _Comparison:
    added: set[Path]
    removed: set[Path]
    modified: set[Path]

    @property
    def changed(self) -> set[Path]:
        return self.added | self.modified


def _compare(old: _Flat, new: _Flat) -> _Comparison:
    old_paths, new_paths = old.paths, new.paths
    modified = {
        p for p in old.leaves.keys() & new.leaves.keys() if not json_equal(old.leaves[p], new.leaves[p])
    }
    return _Comparison(new_paths - old_paths, old_paths - new_paths, modified)


# ---------------------------------------------------------------------------------------------------------------
# managedFields entries


@dataclass
class _Entry:
    manager: str
    operation: str
    subresource: str | None
    api_version: str
    time: str | None
    fields: set[Path] = field(default_factory=set)

    @property
    def identity(self) -> tuple[str, str, str | None]:
        return (self.manager, self.operation, self.subresource)

    def display(self) -> str:
        """How the apiserver names this manager in conflict messages."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == "Update":
            text += f" using {self.api_version}"
            if self.time:
                text += f" at {self.time}"
        return text

    def encode(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
        }
        if self.time is not None:
            entry["time"] = self.time
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = encode_fields_v1(self.fields)
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry


def _decode_entries(managed: Any) -> list[_Entry]:
    if managed is None:
        return []
    if not isinstance(managed, list):
        raise ValueError("metadata.managedFields must be a list")
    entries: list[_Entry] = []
    seen: set[tuple[str, str, str | None]] = set()
    for index, raw in enumerate(managed):
        where = f"metadata.managedFields[{index}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{where} must be an object")
        manager, operation = raw.get("manager", ""), raw.get("operation")
        if not isinstance(manager, str):
            raise ValueError(f"{where}.manager must be a string")
        if operation not in ("Apply", "Update"):
            raise ValueError(f"{where}.operation must be Apply or Update, got {operation!r}")
        if raw.get("fieldsType", "FieldsV1") != "FieldsV1":
            raise ValueError(f"{where}.fieldsType must be FieldsV1")
        subresource = raw.get("subresource") or None
        entry = _Entry(
            manager=manager,
            operation=operation,
            subresource=subresource if isinstance(subresource, str) else None,
            api_version=str(raw.get("apiVersion", "")),
            time=raw.get("time") if isinstance(raw.get("time"), str) else None,
            fields=decode_fields_v1(raw.get("fieldsV1") or {}, f"{where}.fieldsV1"),
        )
        if entry.identity in seen:
            # Duplicate entries (hand-written managedFields) merge, as the apiserver keys them by identity.
            existing = next(e for e in entries if e.identity == entry.identity)
            existing.fields |= entry.fields
            continue
        seen.add(entry.identity)
        entries.append(entry)
    return entries


def _store_entries(obj: dict[str, Any], entries: list[_Entry]) -> None:
    meta = obj.setdefault("metadata", {})
    # The apiserver's order: Apply entries before Update ones, then oldest first, then by manager.
    kept = sorted(
        (e for e in entries if e.fields),
        key=lambda e: (e.operation, e.time or "", e.manager, e.api_version, e.subresource or ""),
    )
    live = [e.encode() for e in kept]
    if live:
        meta["managedFields"] = live
    else:
        meta.pop("managedFields", None)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _without_managed_fields(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    if not obj:
        return {}
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


# ---------------------------------------------------------------------------------------------------------------
# Merging (apply)

_MISSING = object()


class _Merger:
    def __init__(self, list_keys: ListKeys) -> None:
        self.list_keys = list_keys

    def merge(self, live: Any, config: Any, names: tuple[str, ...]) -> Any:
        if isinstance(config, dict) and not is_atomic_map(self.list_keys, names):
            out = json_clone(live) if isinstance(live, dict) else {}
            for key, value in config.items():
                if value is None:
                    out.pop(key, None)
                else:
                    out[key] = self.merge(out.get(key, _MISSING), value, (*names, key))
            return out
        if isinstance(config, list) and isinstance(live, list):
            list_type = self.list_keys(names)
            if list_type.kind == "set":
                return self._ordered(live, config, _canonical, lambda _live, cfg: json_clone(cfg))
            if list_type.kind == "map":

                def key_of(item: Any) -> str:
                    return _item_key(item, list_type, names, strict=False) if isinstance(item, dict) else ""

                return self._ordered(live, config, key_of, lambda lv, cfg: self.merge(lv, cfg, names))
        if isinstance(config, list) and self.list_keys(names).kind == "map":
            return [self.merge(_MISSING, item, names) for item in config]
        return json_clone(config)

    @staticmethod
    def _ordered(
        live: list[Any],
        config: list[Any],
        key_of: Callable[[Any], str],
        merge_item: Callable[[Any, Any], Any],
    ) -> list[Any]:
        """Shared items follow the applied order; live-only items keep their place among them."""
        live_keys = [key_of(item) for item in live]
        config_keys = [key_of(item) for item in config]
        live_by_key = dict(zip(live_keys, live, strict=True))
        wanted = set(config_keys)
        out: list[Any] = []
        used: set[str] = set()
        li = ri = 0
        while li < len(live) or ri < len(config):
            if li < len(live) and live_keys[li] in used:
                li += 1
            elif li < len(live) and live_keys[li] not in wanted:
                out.append(json_clone(live[li]))
                li += 1
            elif ri < len(config):
                key = config_keys[ri]
                if key in live_by_key:
                    out.append(merge_item(live_by_key[key], config[ri]))
                    used.add(key)
                else:
                    out.append(merge_item(_MISSING, config[ri]))
                ri += 1
            else:
                li += 1
        return out


def _prune(obj: dict[str, Any], remove: set[Path], keep: set[Path], list_keys: ListKeys) -> None:
    """Delete ``remove`` paths from ``obj`` (in place) unless something under them is kept; containers that
    become empty this way go too, unless someone owns them."""
    keep_prefixes = {p[:i] for p in keep for i in range(1, len(p) + 1)}

    def delete(node: Any, path: Path, names: tuple[str, ...], done: Path) -> None:
        element, rest = path[0], path[1:]
        kind, _, text = element.partition(":")
        here = (*done, element)
        if kind == "f":
            if not isinstance(node, dict) or text not in node:
                return
            if not rest:
                del node[text]
                return
            child = node[text]
            was_filled = bool(child) if isinstance(child, dict | list) else False
            delete(child, rest, (*names, text), here)
            if was_filled and child in ({}, []) and here not in keep_prefixes:
                del node[text]
            return
        if not isinstance(node, list):
            return
        if kind == "v":
            value = json.loads(text)
            node[:] = [item for item in node if not json_equal(item, value)]
            return
        if kind == "i":
            index = int(text)
            if 0 <= index < len(node) and not rest:
                del node[index]
            elif 0 <= index < len(node):
                delete(node[index], rest, names, here)
            return
        list_type = list_keys(names)
        for index, item in enumerate(node):
            if isinstance(item, dict) and _item_key(item, list_type, names, strict=False) == element:
                if rest:
                    delete(item, rest, names, here)
                else:
                    del node[index]
                return

    for path in sorted(remove, key=len):
        if path not in keep_prefixes:
            delete(obj, path, (), ())


def _reduce_config(
    config: Mapping[str, Any], subresource: str | None, ignore_fields: Iterable[tuple[str, ...]]
) -> dict[str, Any]:
    """Drop the parts of an apply configuration this request may not set."""
    reduced = json_clone(dict(config))
    if subresource == "status":
        meta = reduced.get("metadata")
        kept_meta = (
            {k: v for k, v in meta.items() if k in ("name", "namespace", "uid", "resourceVersion")}
            if isinstance(meta, dict)
            else {}
        )
        reduced = {k: v for k, v in reduced.items() if k in ("apiVersion", "kind", subresource)}
        if kept_meta:
            reduced["metadata"] = kept_meta
    for path in ignore_fields:
        node: Any = reduced
        for name in path[:-1]:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict) and path:
            node.pop(path[-1], None)
    return reduced


# The client-side apply -> server-side apply transition is special-cased for this manager, as in the apiserver.
_KUBECTL = "kubectl"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _last_applied(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(LAST_APPLIED) if isinstance(annotations, dict) else None
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _allowed_by_last_applied(live: Mapping[str, Any], list_keys: ListKeys) -> set[Path] | None:
    """Fields ``kubectl`` may take over without force: those of its client-side last-applied configuration,
    provided the live object still holds exactly those values."""
    last = _last_applied(live)
    if last is None:
        return None
    try:
        last_flat = _Flat(last, list_keys, strict=False)
    except ValueError:
        return None
    live_flat = _Flat(live, list_keys, strict=False)
    if not last_flat.items <= live_flat.items:
        return None
    for path, value in last_flat.leaves.items():
        if path[:2] == ("f:metadata", "f:annotations"):
            continue
        if path not in live_flat.leaves or not json_equal(live_flat.leaves[path], value):
            return None
    return last_flat.paths


def _sync_last_applied(live: Mapping[str, Any], merged: dict[str, Any], config: Mapping[str, Any]) -> None:
    """Keep an existing last-applied annotation in step with what ``kubectl`` now applies server-side."""
    if _last_applied(live) is None:
        return
    applied = json_clone(dict(config))
    meta = applied.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
        meta["annotations"].pop(LAST_APPLIED, None)
        if not meta["annotations"]:
            del meta["annotations"]
    annotations = merged.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[LAST_APPLIED] = json.dumps(applied, sort_keys=True, separators=(",", ":")) + "\n"


def apply(
    live: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    manager: str,
    force: bool,
    list_keys: ListKeys,
    subresource: str | None = None,
    *,
    now: str | None = None,
    ignore_fields: Iterable[tuple[str, ...]] = (),
) -> dict[str, Any]:
    """Server-side apply ``config`` by ``manager`` onto ``live`` (``None``/``{}`` when creating).

    Returns the new object with updated ``metadata.managedFields``; inputs are not mutated. Raises
    :class:`ApplyConflict` when, without ``force``, the apply would change fields other managers own, and
    ``ValueError`` for malformed configurations. With ``subresource`` (``"status"``) only that part of the
    configuration applies; ``ignore_fields`` (field-name paths, e.g. ``("status",)`` for a main-resource apply of
    a kind with a status subresource) are dropped from the configuration.
    """
    if not isinstance(config, Mapping):
        raise ValueError("apply configuration must be an object")
    if not manager:
        raise ValueError("apply requires a field manager")
    config_meta = config.get("metadata")
    if isinstance(config_meta, Mapping) and config_meta.get("managedFields") is not None:
        raise ValueError("metadata.managedFields must be nil")
    timestamp = now or _now()
    live_obj: dict[str, Any] = json_clone(dict(live)) if live else {}
    entries = _decode_entries((live_obj.get("metadata") or {}).get("managedFields"))
    live_plain = _without_managed_fields(live_obj)
    cfg = _reduce_config(config, subresource, ignore_fields)

    config_set = _Flat(cfg, list_keys, strict=True).paths
    identity = (manager, "Apply", subresource)
    mine = next((e for e in entries if e.identity == identity), None)
    others = [e for e in entries if e.identity != identity]
    previous = set(mine.fields) if mine else set()

    merged = _Merger(list_keys).merge(live_plain, cfg, ())
    owned_by_others: set[Path] = set().union(*(e.fields for e in others)) if others else set()
    _prune(merged, previous - config_set - owned_by_others, config_set | owned_by_others, list_keys)

    comparison = _compare(_Flat(live_plain, list_keys, strict=False), _Flat(merged, list_keys, strict=False))
    conflicts: list[tuple[_Entry, Path]] = []
    for entry in others:
        conflicts.extend((entry, path) for path in entry.fields & comparison.changed)
    if conflicts and not force and manager == _KUBECTL:
        allowed = _allowed_by_last_applied(live_plain, list_keys)
        if allowed is not None:
            remaining = [(entry, path) for entry, path in conflicts if path not in allowed]
            if remaining:
                conflicts = remaining
            else:
                force = True  # every conflict is a field kubectl itself applied client-side: take them over
    if conflicts and not force:
        conflicts.sort(
            key=lambda c: (c[0].manager, c[0].operation, c[0].subresource or "", format_path(c[1]))
        )
        raise ApplyConflict(
            [(entry.manager, format_path(path)) for entry, path in conflicts],
            [entry.display() for entry, _ in conflicts],
        )
    for entry, path in conflicts:
        entry.fields.discard(path)

    api_version = str(config.get("apiVersion") or live_obj.get("apiVersion") or "")
    if mine is None:
        mine = _Entry(manager, "Apply", subresource, api_version, None)
        entries.append(mine)
    mine.fields = set(config_set)
    mine.api_version = api_version
    for entry in entries:
        entry.fields -= comparison.removed
    if merged != live_plain or mine.fields != previous or mine.time is None:
        mine.time = timestamp
    if manager == _KUBECTL:
        _sync_last_applied(live_plain, merged, cfg)
    _store_entries(merged, entries)
    return merged


def record_update(
    old: Mapping[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    operation: str = "Update",
    subresource: str | None = None,
    list_keys: ListKeys | None = None,
    *,
    now: str | None = None,
) -> None:
    """Track a non-apply write (create/update/patch) of ``old`` -> ``new`` by ``manager`` in
    ``new["metadata"]["managedFields"]`` (in place).

    The manager gains the fields it added or changed; removed fields leave every manager. managedFields the
    client sent itself (differing from ``old``'s, main resource only) replace the recorded ones, so clients can
    migrate ownership; ``[{}]`` clears them.
    """
    if operation not in ("Update", "Create", "Patch"):
        raise ValueError(f"record_update is for non-apply writes, not {operation!r}")
    keys = list_keys or _all_atomic
    meta = new.setdefault("metadata", {})
    old_managed = ((old or {}).get("metadata") or {}).get("managedFields")
    sent = meta.get("managedFields")
    if subresource is None and sent == [{}]:
        meta.pop("managedFields", None)
        return
    base = sent if subresource is None and sent and sent != old_managed else old_managed
    entries = _decode_entries(base)

    comparison = _compare(
        _Flat(_without_managed_fields(old), keys, strict=False),
        _Flat(_without_managed_fields(new), keys, strict=False),
    )
    identity = (manager, "Update", subresource)
    took = comparison.changed
    if took:
        mine = next((e for e in entries if e.identity == identity), None)
        if mine is None:
            mine = _Entry(manager, "Update", subresource, "", None)
            entries.append(mine)
        mine.fields |= took
        mine.api_version = str(new.get("apiVersion") or "")
        mine.time = now or _now()
        # An update is a forced write: fields it changes leave every other manager (the apiserver's Updater).
        for entry in entries:
            if entry is not mine:
                entry.fields -= took
    for entry in entries:
        entry.fields -= comparison.removed
    _store_entries(new, entries)
