"""Objects a controller wrote itself whose watch event has not reached its cache yet.

Without this, a reconcile that runs between our write and its watch event would see the old object and write
again (a no-op check against a stale cache is not a no-op check). :class:`Written` overlays a reflector: ``get``
returns what we wrote while it is newer than what the cache holds. An entry is dropped as soon as the cache holds
the same or a newer resourceVersion, or a deletion. Written objects are kept whole, not through the cache's
transform: they are dropped as soon as the watch catches up, and readers get the same result on whole objects.
"""

from __future__ import annotations

from .objects import JsonDict, object_key, resource_version
from .reflector import Reflector

__all__ = ["Written"]


class Written:
    """A reflector's view, overlaid with this process's own writes until the watch delivers them."""

    def __init__(self, reflector: Reflector) -> None:
        self.reflector = reflector
        self._objects: dict[str, JsonDict] = {}
        reflector.add_handler(self._on_event)

    def remember(self, obj: JsonDict) -> None:
        """Record an object as the API server returned it from our write."""
        key = object_key(obj)
        cached = self.reflector.get(key)
        if cached is None or resource_version(obj) > resource_version(cached):
            self._objects[key] = obj

    def forget(self, key: str) -> None:
        """Drop our own record of ``key`` (after we deleted it)."""
        self._objects.pop(key, None)

    def get(self, key: str) -> JsonDict | None:
        written = self._objects.get(key)
        cached = self.reflector.get(key)
        if written is not None and (cached is None or resource_version(written) > resource_version(cached)):
            return written
        return cached

    def _on_event(self, old: JsonDict | None, new: JsonDict | None) -> None:
        key = object_key(new if new is not None else old)
        written = self._objects.get(key)
        if written is not None and (new is None or resource_version(new) >= resource_version(written)):
            del self._objects[key]
