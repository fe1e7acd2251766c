"""``metadata.managedFields`` entries: one per manager, operation and subresource, decoded into field sets,
merged when duplicated, and written back in the apiserver's order.

Stored objects are never changed in place, so a ``fieldsV1`` tree read from one is decoded once (remembered by
identity for the next write of that object) and written back as the same tree when its fields did not change."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubesim.ssa.fieldsv1 import Path, decode_fields_v1, encode_fields_v1


@dataclass
class Entry:
    manager: str
    operation: str
    subresource: str | None
    api_version: str
    time: str | None
    fields: set[Path] = field(default_factory=set)
    # the stored tree these fields were decoded from, and what it decoded to: reused by encode() while unchanged
    source: tuple[dict[str, Any], frozenset[Path]] | None = None

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
        if self.source is not None and self.fields == self.source[1]:
            entry["fieldsV1"] = self.source[0]
        else:
            entry["fieldsV1"] = encode_fields_v1(self.fields)
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry


def decode_entries(managed: Any) -> list[Entry]:
    if managed is None:
        return []
    if not isinstance(managed, list):
        raise ValueError("metadata.managedFields must be a list")
    entries: list[Entry] = []
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
        tree = raw.get("fieldsV1") or {}
        decoded = _decoded(tree, f"{where}.fieldsV1")
        entry = Entry(
            manager=manager,
            operation=operation,
            subresource=subresource if isinstance(subresource, str) else None,
            api_version=str(raw.get("apiVersion", "")),
            time=raw.get("time") if isinstance(raw.get("time"), str) else None,
            fields=set(decoded),
            source=(tree, decoded) if isinstance(tree, dict) and tree else None,
        )
        if entry.identity in seen:
            # Duplicate entries (hand-written managedFields) merge, as the apiserver keys them by identity.
            existing = next(e for e in entries if e.identity == entry.identity)
            existing.fields |= entry.fields
            existing.source = None
            continue
        seen.add(entry.identity)
        entries.append(entry)
    return entries


# fieldsV1 trees of stored objects -> their decoded paths, by identity (the tree is held, so its id stays unique).
_DECODED: dict[int, tuple[Any, frozenset[Path]]] = {}
_DECODED_MAX = 4096


def _decoded(tree: Any, where: str) -> frozenset[Path]:
    known = _DECODED.get(id(tree))
    if known is not None and known[0] is tree:
        return known[1]
    paths = frozenset(decode_fields_v1(tree, where))
    if isinstance(tree, dict) and tree:
        if len(_DECODED) >= _DECODED_MAX:
            del _DECODED[next(iter(_DECODED))]
        _DECODED[id(tree)] = (tree, paths)
    return paths


def store_entries(obj: dict[str, Any], entries: list[Entry]) -> None:
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


def now_timestamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def without_managed_fields(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    if not obj:
        return {}
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out
