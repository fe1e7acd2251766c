"""List+watch caches shared by the simulated controllers.

One informer per resource type feeds every controller that needs it, so the whole simulation opens one watch
per resource instead of one per controller. Handlers are plain callables that only enqueue keys: they must not
block, because they run inside the watch loop.

Lookups of related objects go through indexes, never through a scan of the whole cache: every informer indexes its
objects by namespace, and controllers add named indexes (``add_index``; e.g. EndpointSlices by Service, Pods by
node or controller) that are kept right on every add, update, delete and relist.

Why not the controller runtime's ``operator_runtime.reflector.Reflector``, which does the same job for the operators:
kubesim may not import the runtime (contract ``kubesim-boundary``: the runtime is tested against kubesim, so kubesim
stays an implementation of its own), and a copy shared from a package below both would have to paper over the ways
the two differ on purpose:

- the source: this informer reads the in-process ``kubesim.api.ApiClient`` (plain dicts out of the store, an
  expired watch is ``kubesim.errors.ApiError`` 410, an ``ERROR`` event is raised as one); the Reflector reads
  ``operator_runtime.api.KubeApi`` over HTTP (``operator_runtime.errors.Expired``), with jittered, capped backoff
  and an error count for its metrics;
- keys and lookups: ``(namespace, name)`` tuples, every object also indexed by namespace (``items(namespace)``), an
  index holding the objects themselves and ``count`` without building a list (the scheduler counts Pods per node on
  every decision); the Reflector keys interned ``namespace/name`` strings, its indexes hold keys;
- handlers get ``(event type, object, previous)``: the node-lifecycle, load-balancer and ephemeral-volume
  controllers branch on ``DELETED``; the Reflector's get ``(old, new)``;
- ``has_seen(resourceVersion)``: the workload controllers' expectations (``controllers/workload.py``) ask whether
  the cache has taken in their own writes; the Reflector has no such question, and it has what this one does not
  need: per-cache projections of stored objects (``transform``) and a cache that is not synced again until it has
  listed after a leadership change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from kubesim.cluster.base.apitypes import Api
from kubesim.errors import ApiError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
Handler = Callable[[str, Obj, Obj | None], None]  # (event type, object, previous object or None)
IndexFunc = Callable[[Obj], Iterable[str]]  # the values an object is found under


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta["name"])


class Informer:
    """Keeps an up-to-date dict of one resource's objects and calls handlers on every change.

    Lists, then watches from the list's resourceVersion; when the watch ends it resumes from the last seen
    version, and when that version has expired (410) it lists again and synthesises the differences.
    """

    def __init__(self, api: Api, resource: str) -> None:
        self.api = api
        self.resource = resource
        self.cache: dict[Key, Obj] = {}
        self._by_namespace: dict[str, dict[Key, Obj]] = {}
        self._index_funcs: dict[str, IndexFunc] = {}
        self._indexes: dict[str, dict[str, dict[Key, Obj]]] = {}
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._resource_version: str | None = None

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def add_index(self, name: str, func: IndexFunc) -> None:
        """Find objects by the values ``func`` gives them (``by_index``). Controllers sharing this informer may add
        the same index again (same name, same function); another function under a taken name is a bug."""
        existing = self._index_funcs.get(name)
        if existing is not None:
            if existing is not func:
                raise ValueError(f"informer {self.resource} already has a different index {name!r}")
            return
        self._index_funcs[name] = func
        index: dict[str, dict[Key, Obj]] = {}
        self._indexes[name] = index
        for key, obj in self.cache.items():
            for value in func(obj):
                index.setdefault(value, {})[key] = obj

    def by_index(self, name: str, value: str) -> list[Obj]:
        """The objects ``name``'s function gives ``value`` (KeyError for an index nobody added)."""
        return list(self._indexes[name].get(value, {}).values())

    def count(self, name: str, value: str) -> int:
        """How many objects ``by_index(name, value)`` would return."""
        return len(self._indexes[name].get(value, ()))

    def get(self, namespace: str | None, name: str) -> Obj | None:
        return self.cache.get((namespace or "", name))

    def has_seen(self, resource_version: str | None) -> bool:
        """Whether this cache has taken in the change that produced ``resource_version`` (or a later one)."""
        try:
            return int(self._resource_version or 0) >= int(resource_version or 0)
        except ValueError:
            return True

    def items(self, namespace: str | None = None) -> list[Obj]:
        if namespace is None:
            return list(self.cache.values())
        return list(self._by_namespace.get(namespace, {}).values())

    def _put(self, key: Key, obj: Obj) -> Obj | None:
        """Store ``obj`` under ``key`` (indexes included); the object it replaces, if any."""
        old = self.cache.get(key)
        if old is not None:
            self._unindex(key, old)
        self.cache[key] = obj
        self._by_namespace.setdefault(key[0], {})[key] = obj
        for name, func in self._index_funcs.items():
            index = self._indexes[name]
            for value in func(obj):
                index.setdefault(value, {})[key] = obj
        return old

    def _drop(self, key: Key) -> Obj | None:
        old = self.cache.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def _unindex(self, key: Key, obj: Obj) -> None:
        bucket = self._by_namespace.get(key[0])
        if bucket is not None:
            bucket.pop(key, None)
            if not bucket:
                del self._by_namespace[key[0]]
        for name, func in self._index_funcs.items():
            index = self._indexes[name]
            for value in func(obj):
                entries = index.get(value)
                if entries is not None:
                    entries.pop(key, None)
                    if not entries:
                        del index[value]

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"informer:{self.resource}")
        await self._synced.wait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _dispatch(self, event: str, obj: Obj, old: Obj | None) -> None:
        for handler in self._handlers:
            try:
                handler(event, obj, old)
            except Exception:  # a faulty handler must not stop the watch
                log.exception("handler for %s failed", self.resource)

    async def _relist(self) -> None:
        items, resource_version = await self.api.list(self.resource)
        fresh = {key_of(obj): obj for obj in items}
        stale = [k for k in self.cache if k not in fresh]
        for k in stale:
            old = self._drop(k)
            assert old is not None
            self._dispatch("DELETED", old, old)
        for k, obj in fresh.items():
            previous = self._put(k, obj)
            if previous is None:
                self._dispatch("ADDED", obj, None)
            elif previous.get("metadata", {}).get("resourceVersion") != obj.get("metadata", {}).get(
                "resourceVersion"
            ):
                self._dispatch("MODIFIED", obj, previous)
        self._resource_version = resource_version

    async def _run(self) -> None:
        delay = 0.05
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                    self._synced.set()
                received = False
                async for event, obj in self.api.watch(
                    self.resource, resource_version=self._resource_version
                ):
                    received = True
                    self._apply(event, obj)
                if received:
                    delay = 0.05
                else:  # a watch that closes at once: do not spin
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
            except asyncio.CancelledError:
                raise
            except ApiError as error:
                if error.code == 410:
                    need_list = True
                else:
                    log.warning("watch %s failed: %s", self.resource, error)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
            except Exception:
                log.exception("watch %s failed", self.resource)
                need_list = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _apply(self, event: str, obj: Obj) -> None:
        version = obj.get("metadata", {}).get("resourceVersion")
        if event == "ERROR":
            raise ApiError(int(obj.get("code", 500)), str(obj.get("reason", "")), str(obj.get("message", "")))
        if event == "BOOKMARK":
            self._resource_version = version or self._resource_version
            return
        k = key_of(obj)
        old = self._drop(k) if event == "DELETED" else self._put(k, obj)
        if version:
            self._resource_version = version
        self._dispatch(event, obj, old)
