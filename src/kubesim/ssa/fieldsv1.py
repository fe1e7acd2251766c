"""Field paths and their ``FieldsV1`` JSON form: decoding and encoding managedFields trees, and paths printed
as the apiserver prints them in conflict messages (``.spec.ports[port=80,protocol="TCP"].name``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

Path = tuple[str, ...]


def canonical_json(value: Any) -> str:
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
            out.append("[" + ",".join(f"{k}={canonical_json(key[k])}" for k in sorted(key)) + "]")
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
                key = f"{kind}:{canonical_json(parsed)}"
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
