"""The object an apply produces: the configuration merged into the live object (maps by key, list-maps by item
key, sets by value, the rest replaced), fields a manager stopped applying removed, and the parts of a
configuration a request may not set dropped."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubesim.jsonvalues import json_clone, json_equal
from kubesim.ssa.fieldsets import item_key
from kubesim.ssa.fieldsv1 import Path, canonical_json
from kubesim.ssa.listtypes import ListKeys, is_atomic_map

_MISSING = object()


class Merger:
    """Merges a configuration into a live object; the result shares nothing with either input."""

    def __init__(self, list_keys: ListKeys) -> None:
        self.list_keys = list_keys

    def merge(self, live: Any, config: Any, names: tuple[str, ...]) -> Any:
        if isinstance(config, dict) and not is_atomic_map(self.list_keys, names):
            # A new object: live's fields in live's order (each copied once), the configured ones merged in place,
            # new ones after them in the configuration's order; a null in the configuration removes the field.
            base = live if isinstance(live, dict) else {}
            out: dict[str, Any] = {}
            for key, value in base.items():
                if key not in config:
                    out[key] = json_clone(value)
                elif config[key] is not None:
                    out[key] = self.merge(value, config[key], (*names, key))
            for key, value in config.items():
                if key not in base and value is not None:
                    out[key] = self.merge(_MISSING, value, (*names, key))
            return out
        if isinstance(config, list) and isinstance(live, list):
            list_type = self.list_keys(names)
            if list_type.kind == "set":
                return self._ordered(live, config, canonical_json, lambda _live, cfg: json_clone(cfg))
            if list_type.kind == "map":

                def key_of(item: Any) -> str:
                    return item_key(item, list_type, names, strict=False) if isinstance(item, dict) else ""

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


def remove_paths(obj: dict[str, Any], remove: set[Path], keep: set[Path], list_keys: ListKeys) -> None:
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
            if isinstance(item, dict) and item_key(item, list_type, names, strict=False) == element:
                if rest:
                    delete(item, rest, names, here)
                else:
                    del node[index]
                return

    for path in sorted(remove, key=len):
        if path not in keep_prefixes:
            delete(obj, path, (), ())


def reduce_config(
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
