"""Compare CustomResourceDefinitions the way a user of them would notice: every schema keyword but prose, the
printer columns, names, scope and subresources. Used to hold our ``skupper.io`` CRDs to upstream's."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Difference", "differences"]

#: Prose: ours is written here, not copied.
_PROSE = frozenset({"description"})
#: Schema keywords that hold other schemas (walked, not compared as values).
_NESTED = frozenset({"properties", "items", "additionalProperties"})


@dataclass(frozen=True)
class Difference:
    kind: str
    path: str       # e.g. spec.code, or columns, names.shortNames
    key: str        # the keyword that differs (minLength, required, ...), or "-" for a missing node
    upstream: Any
    ours: Any

    def __str__(self) -> str:
        return f"{self.kind} {self.path} {self.key}: upstream {self.upstream!r}, ours {self.ours!r}"


def _schema_differences(kind: str, path: str, up: Mapping[str, Any] | None, ours: Mapping[str, Any] | None
                        ) -> Iterator[Difference]:
    if up is None or ours is None:
        yield Difference(kind, path, "-", "present" if up is not None else None,
                         "present" if ours is not None else None)
        return
    for key in sorted((set(up) | set(ours)) - _PROSE - _NESTED):
        a, b = up.get(key), ours.get(key)
        if key == "required":
            a, b = sorted(a or []), sorted(b or [])
        if a != b:
            yield Difference(kind, path, key, a, b)
    up_props, our_props = up.get("properties") or {}, ours.get("properties") or {}
    for name in sorted(set(up_props) | set(our_props)):
        yield from _schema_differences(kind, f"{path}.{name}".lstrip("."), up_props.get(name), our_props.get(name))
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        a, b = up.get(key), ours.get(key)
        if isinstance(a, Mapping) or isinstance(b, Mapping):
            yield from _schema_differences(kind, f"{path}{suffix}", a if isinstance(a, Mapping) else None,
                                           b if isinstance(b, Mapping) else None)
        elif a != b:
            yield Difference(kind, path, key, a, b)


def _columns(version: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["name"], c["type"], c["jsonPath"]) for c in version.get("additionalPrinterColumns") or []]


def differences(upstream: Mapping[str, Any], ours: Mapping[str, Any]) -> list[Difference]:
    """What differs between two CRDs of one kind (one served version each)."""
    kind = upstream["spec"]["names"]["kind"]
    out: list[Difference] = []
    up_spec, our_spec = upstream["spec"], ours["spec"]
    for key in ("group", "scope"):
        if up_spec.get(key) != our_spec.get(key):
            out.append(Difference(kind, key, "-", up_spec.get(key), our_spec.get(key)))
    for key in ("kind", "plural", "singular", "shortNames"):
        a, b = up_spec["names"].get(key), our_spec["names"].get(key)
        if (a or None) != (b or None):
            out.append(Difference(kind, f"names.{key}", "-", a, b))
    up_versions = {v["name"]: v for v in up_spec["versions"]}
    our_versions = {v["name"]: v for v in our_spec["versions"]}
    if set(up_versions) != set(our_versions):
        out.append(Difference(kind, "versions", "-", sorted(up_versions), sorted(our_versions)))
    for name in sorted(set(up_versions) & set(our_versions)):
        a, b = up_versions[name], our_versions[name]
        for key in ("served", "storage", "subresources"):
            if a.get(key) != b.get(key):
                out.append(Difference(kind, key, "-", a.get(key), b.get(key)))
        if _columns(a) != _columns(b):
            out.append(Difference(kind, "columns", "-", _columns(a), _columns(b)))
        up_root, our_root = a["schema"]["openAPIV3Schema"], b["schema"]["openAPIV3Schema"]
        # apiVersion/kind/metadata are the same for every object; controller-gen spells them out, we need not.
        up_root = {**up_root, "properties": {k: v for k, v in up_root.get("properties", {}).items()
                                             if k not in ("apiVersion", "kind", "metadata")}}
        our_root = {**our_root, "properties": {k: v for k, v in our_root.get("properties", {}).items()
                                               if k not in ("apiVersion", "kind", "metadata")}}
        out.extend(_schema_differences(kind, "", up_root, our_root))
    return out
