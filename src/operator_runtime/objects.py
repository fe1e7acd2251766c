"""Small read-only views over raw API objects (plain dicts, as JSON on the wire).

Objects from the API (and from anyone allowed to write them) may lack any field, or carry a field of the wrong type.
These helpers answer "the mapping / list / value at this path, or an empty one" once, so the code that reads objects
says which field it wants instead of repeating ``(obj.get("x") or {}).get("y") or {}``. :class:`Meta` and
:class:`OwnerReference` are the typed views of ``metadata`` and its owner references; :func:`object_reference` and
:func:`object_key` name an object for events and caches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "EMPTY",
    "JsonDict",
    "Meta",
    "OwnerReference",
    "field",
    "items",
    "mapping",
    "meta",
    "object_key",
    "object_reference",
    "resource_version",
]

JsonDict = dict[str, Any]

#: The empty mapping returned for a missing section (read-only, so nobody fills it by accident).
EMPTY: Mapping[str, Any] = MappingProxyType({})

_REFERENCE_FIELDS = ("apiVersion", "kind", "name", "namespace", "uid")


def field(obj: Mapping[str, Any] | None, *path: str) -> Any:
    """The value at ``path`` (None when a step is missing or not a mapping)."""
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def mapping(obj: Mapping[str, Any] | None, *path: str) -> Mapping[str, Any]:
    """The mapping at ``path``, or :data:`EMPTY`."""
    value = field(obj, *path)
    return value if isinstance(value, Mapping) else EMPTY


def items(obj: Mapping[str, Any] | None, *path: str) -> Sequence[Any]:
    """The list at ``path``, or an empty tuple."""
    value = field(obj, *path)
    return value if isinstance(value, list) else ()


@dataclass(frozen=True)
class OwnerReference:
    """One entry of ``metadata.ownerReferences``."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False

    @classmethod
    def parse(cls, raw: Any) -> OwnerReference | None:
        if not isinstance(raw, Mapping):
            return None
        return cls(str(raw.get("apiVersion") or ""), str(raw.get("kind") or ""), str(raw.get("name") or ""),
                   str(raw.get("uid") or ""), raw.get("controller") is True)


class Meta:
    """A view of an object's ``metadata``: strings are '' and mappings empty when absent."""

    __slots__ = ("raw",)

    def __init__(self, obj: Mapping[str, Any] | None) -> None:
        self.raw: Mapping[str, Any] = mapping(obj, "metadata")

    def _str(self, key: str) -> str:
        value = self.raw.get(key)
        return value if isinstance(value, str) else ""

    @property
    def name(self) -> str:
        return self._str("name")

    @property
    def namespace(self) -> str:
        return self._str("namespace")

    @property
    def uid(self) -> str:
        return self._str("uid")

    @property
    def resource_version(self) -> str:
        return self._str("resourceVersion")

    @property
    def deletion_timestamp(self) -> str:
        return self._str("deletionTimestamp")

    @property
    def generation(self) -> int | None:
        value = self.raw.get("generation")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def labels(self) -> Mapping[str, str]:
        return mapping(self.raw, "labels")

    @property
    def annotations(self) -> Mapping[str, str]:
        return mapping(self.raw, "annotations")

    @property
    def owner_references(self) -> list[OwnerReference]:
        parsed = (OwnerReference.parse(raw) for raw in items(self.raw, "ownerReferences"))
        return [reference for reference in parsed if reference is not None]

    @property
    def key(self) -> str:
        """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones (the cache key)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def meta(obj: Mapping[str, Any] | None) -> Meta:
    return Meta(obj)


def object_key(obj: Mapping[str, Any] | None) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    return Meta(obj).key


def resource_version(obj: Mapping[str, Any] | None) -> int:
    """The resourceVersion as a number for ordering writes and events (0 when absent or not numeric)."""
    try:
        return int(Meta(obj).resource_version or 0)
    except ValueError:
        return 0


def object_reference(obj: Mapping[str, Any]) -> JsonDict:
    """The reference fields (apiVersion, kind, name, namespace, uid) of an object, or of a reference already."""
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        source: Mapping[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), **metadata}
    else:
        source = obj
    return {k: source[k] for k in _REFERENCE_FIELDS if source.get(k)}
