"""Reflector: a list+watch fed, read-only cache of one kind, with secondary indexes and change callbacks.

This is the informer part of our small controller runtime (no Python client ships an asyncio informer, see
docs/architecture.md). Behaviour:

- list, then watch from the list's resourceVersion; a closed stream resumes from the last seen version
  (including BOOKMARK versions); a 410 Gone relists and delivers the differences as events;
- other errors back off exponentially (capped) and retry, so a flaky API server never kills the cache;
- objects are plain dicts keyed ``namespace/name`` (``name`` for cluster-scoped kinds); callers must not mutate them;
- a ``transform`` (:mod:`.projection`) turns each object into what is stored, once on arrival: a cache holds only
  the fields its readers use (the transform is declared next to them);
- callbacks run synchronously in the reflector task, after the cache and indexes are updated, with ``(old, new)``
  (``new`` is None on delete, ``old`` None on add).
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Protocol

from .api import KubeApi
from .errors import Expired
from .kinds import ResourceInfo
from .objects import JsonDict, meta, object_key
from .projection import Transform
from .workqueue import ExponentialBackoff

log = logging.getLogger(__name__)

IndexFunc = Callable[[JsonDict], Iterable[str]]
EventHandler = Callable[[JsonDict | None, JsonDict | None], None]


class ListWatchSource(Protocol):
    """Where a reflector gets its data; the API implementation is :class:`ApiSource`, tests may fake it."""

    async def list(self) -> tuple[list[JsonDict], str]: ...

    def watch(self, resource_version: str) -> AsyncIterator[tuple[str, JsonDict]]: ...


class ApiSource:
    """List and watch one kind through :class:`KubeApi`, optionally limited to a namespace, a label selector or a
    field selector."""

    def __init__(self, api: KubeApi, info: ResourceInfo, *, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None, timeout_seconds: int = 300,
                 page_size: int = 500) -> None:
        self.api = api
        self.info = info
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.timeout_seconds = timeout_seconds
        self.page_size = page_size

    async def list(self) -> tuple[list[JsonDict], str]:
        return await self.api.list(self.info, namespace=self.namespace, label_selector=self.label_selector,
                                   field_selector=self.field_selector, page_size=self.page_size)

    def watch(self, resource_version: str) -> AsyncIterator[tuple[str, JsonDict]]:
        return self.api.watch(self.info, resource_version=resource_version, namespace=self.namespace,
                              label_selector=self.label_selector, field_selector=self.field_selector,
                              timeout_seconds=self.timeout_seconds)


class Reflector:
    """Cache of one kind. Start with :meth:`run` (a task); read with :meth:`get`, :meth:`by_index`, :meth:`items`."""

    def __init__(self, name: str, source: ListWatchSource, *, backoff: ExponentialBackoff | None = None,
                 jitter: float = 0.1, transform: Transform | None = None) -> None:
        """``backoff`` paces retries after list/watch errors (plus up to ``jitter`` of random extra, so that many
        reflectors do not retry in lockstep); ``transform`` makes each arriving object what the cache stores (it
        must keep ``metadata.name``, ``namespace`` and ``resourceVersion``)."""
        self.name = name
        self.source = source
        self.transform = transform
        self.backoff = backoff or ExponentialBackoff(base=0.2, cap=30.0)
        self.jitter = jitter
        self._objects: dict[str, JsonDict] = {}
        self._index_funcs: dict[str, IndexFunc] = {}
        # index name -> value -> the key of the one object with that value, or a set of keys (most values name one
        # object: a set per value would cost more than the object's cache entry)
        self._indexes: dict[str, dict[str, str | set[str]]] = {}
        self._handlers: list[EventHandler] = []
        self._synced = asyncio.Event()
        self.resource_version = ""
        self.errors = 0

    # ---- configuration -------------------------------------------------------------------------------------------
    def add_index(self, name: str, func: IndexFunc) -> None:
        """Index objects by the values ``func`` returns; add before :meth:`run`."""
        self._index_funcs[name] = func
        index: dict[str, str | set[str]] = {}
        self._indexes[name] = index
        for key, obj in self._objects.items():
            for value in self._index_values(func, obj):
                _index_add(index, value, key)

    def add_handler(self, handler: EventHandler) -> None:
        self._handlers.append(handler)

    # ---- reads ---------------------------------------------------------------------------------------------------
    def get(self, key: str) -> JsonDict | None:
        return self._objects.get(key)

    def by_index(self, index: str, value: str) -> list[JsonDict]:
        keys = self._indexes[index].get(value)
        if keys is None:
            return []
        if isinstance(keys, str):
            return [self._objects[keys]]
        return [self._objects[k] for k in sorted(keys)]

    def keys(self) -> list[str]:
        return list(self._objects)

    def items(self) -> list[JsonDict]:
        return list(self._objects.values())

    def __len__(self) -> int:
        return len(self._objects)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    # ---- the loop ------------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """List and watch until cancelled. A new run (e.g. after leadership was lost and won back) lists first and
        is not synced before that list: what the cache held meanwhile may be stale."""
        self._synced.clear()
        need_list = True
        while True:
            try:
                if need_list:
                    items, version = await self.source.list()
                    if self.transform is not None:
                        items = [self.transform(item) for item in items]
                    self._replace(items)
                    self.resource_version = version
                    self._synced.set()
                    need_list = False
                async for kind, obj in self.source.watch(self.resource_version):
                    self._on_watch_event(kind, obj)
                self.backoff.forget(self.name)
            except asyncio.CancelledError:
                raise
            except Expired:
                log.info("%s: watch expired at resourceVersion %s, listing again", self.name, self.resource_version)
                need_list = True
            except Exception as exc:
                self.errors += 1
                delay = self.backoff.when(self.name) * (1 + random.uniform(0, self.jitter))
                log.warning("%s: list/watch failed (%s); retrying in %.1fs", self.name, exc, delay)
                await asyncio.sleep(delay)

    def _on_watch_event(self, kind: str, obj: JsonDict) -> None:
        version = meta(obj).resource_version
        if kind == "BOOKMARK":
            if version:
                self.resource_version = str(version)
            return
        self.backoff.forget(self.name)
        if self.transform is not None and kind in ("ADDED", "MODIFIED", "DELETED"):
            obj = self.transform(obj)
        key = object_key(obj)
        if kind in ("ADDED", "MODIFIED"):
            self._store(key, obj)
        elif kind == "DELETED":
            self._remove(key, obj)
        else:
            log.debug("%s: ignoring watch event type %s", self.name, kind)
        if version:
            self.resource_version = str(version)

    def _replace(self, items: list[JsonDict]) -> None:
        """Swap in a fresh list, emitting events only for what actually differs from the cache."""
        fresh = {object_key(obj): obj for obj in items}
        for key in [k for k in self._objects if k not in fresh]:
            self._remove(key, self._objects[key])
        for key, obj in fresh.items():
            old = self._objects.get(key)
            if old is not None and meta(old).resource_version == meta(obj).resource_version != "":
                continue
            self._store(key, obj)

    def _store(self, key: str, obj: JsonDict) -> None:
        key = sys.intern(key)  # shared with the other caches, indexes and the work queue naming the same object
        old = self._objects.get(key)
        if old is not None:
            self._unindex(key, old)
        self._objects[key] = obj
        self._index(key, obj)
        self._notify(old, obj)

    def _remove(self, key: str, obj: JsonDict) -> None:
        old = self._objects.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        self._notify(old if old is not None else obj, None)

    def _index(self, key: str, obj: JsonDict) -> None:
        for name, func in self._index_funcs.items():
            index = self._indexes[name]
            for value in self._index_values(func, obj):
                _index_add(index, value, key)

    def _unindex(self, key: str, obj: JsonDict) -> None:
        for name, func in self._index_funcs.items():
            index = self._indexes[name]
            for value in self._index_values(func, obj):
                _index_remove(index, value, key)

    def _index_values(self, func: IndexFunc, obj: JsonDict) -> set[str]:
        try:
            return set(func(obj))
        except Exception:
            log.exception("%s: index function failed for %s", self.name, object_key(obj))
            return set()

    def _notify(self, old: JsonDict | None, new: JsonDict | None) -> None:
        for handler in self._handlers:
            try:
                handler(old, new)
            except Exception:
                log.exception("%s: event handler failed", self.name)



def _index_add(index: dict[str, str | set[str]], value: str, key: str) -> None:
    keys = index.get(value)
    if keys is None:
        index[value] = key
    elif isinstance(keys, str):
        if keys != key:
            index[value] = {keys, key}
    else:
        keys.add(key)


def _index_remove(index: dict[str, str | set[str]], value: str, key: str) -> None:
    keys = index.get(value)
    if keys is None:
        return
    if isinstance(keys, str):
        if keys == key:
            del index[value]
        return
    keys.discard(key)
    if len(keys) == 1:
        index[value] = next(iter(keys))
    elif not keys:
        del index[value]
