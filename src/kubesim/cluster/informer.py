"""List+watch caches shared by the simulated controllers.

One informer per resource type feeds every controller that needs it, so the whole simulation opens one watch
per resource instead of one per controller. Handlers are plain callables that only enqueue keys: they must not
block, because they run inside the watch loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from kubesim.errors import ApiError

from .apitypes import Api

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
Handler = Callable[[str, Obj, Obj | None], None]  # (event type, object, previous object or None)


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
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._resource_version: str | None = None

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def get(self, namespace: str | None, name: str) -> Obj | None:
        return self.cache.get((namespace or "", name))

    def items(self, namespace: str | None = None) -> list[Obj]:
        if namespace is None:
            return list(self.cache.values())
        return [obj for (ns, _), obj in self.cache.items() if ns == namespace]

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
            old = self.cache.pop(k)
            self._dispatch("DELETED", old, old)
        for k, obj in fresh.items():
            previous = self.cache.get(k)
            self.cache[k] = obj
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
        old = self.cache.get(k)
        if event == "DELETED":
            self.cache.pop(k, None)
        else:
            self.cache[k] = obj
        if version:
            self._resource_version = version
        self._dispatch(event, obj, old)
