"""The router Pod's network status, copied into the ``skupper-network-status`` ConfigMap (I/O).

The adaptor keeps the network status its router process reports (``rust_adaptor.py``: asked for four times a
second, kept when it changed); this publisher writes it, as compact JSON, to the router's own key of the ConfigMap the site controller
created (server-side apply with a field manager per router, so the two routers of an HA site never take each
other's key). It watches that ConfigMap (list+watch by name) and writes only when the key differs from the status:
a restarted router whose status is unchanged writes nothing, and a key that someone removed or the controller's
re-created ConfigMap gets the status again. A ConfigMap that does not exist yet is waited for (the router may not
create it: its Role allows ``patch`` of this one name only). A failed write is retried with backoff, also when
no credentials can be had (e.g. the service account's token file is gone).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.config import ConfigError
from operator_runtime.errors import KubeError, NotFound
from operator_runtime.kinds import CONFIG_MAP
from operator_runtime.objects import mapping
from operator_runtime.reflector import ApiSource, Reflector

from .shutdown import STEP_SECONDS, cancel_and_wait

__all__ = ["StatusPublisher", "status_text"]

log = logging.getLogger("service_network.router.status")

RETRY_MIN, RETRY_MAX = 0.5, 30.0


def status_text(status: dict[str, Any]) -> str:
    """The status as written into the ConfigMap (compact, keys in order: equal statuses give equal text)."""
    return json.dumps(status, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


class StatusPublisher:
    """Writes ``current()`` into key ``key`` of ConfigMap ``name`` whenever they differ (call :meth:`changed` when
    ``current()`` may have changed)."""

    def __init__(self, api: KubeApi, namespace: str, name: str, key: str, field_manager: str,
                 on_synced: Callable[[Mapping[str, Any]], None] | None = None) -> None:
        self.api = api
        self.on_synced = on_synced    # called once with the ConfigMap's data as first read (before any write)
        self.namespace = namespace
        self.name = name
        self.key = key
        self.field_manager = field_manager
        self.writes = 0
        self._wake = asyncio.Event()
        self._written: tuple[str, str] | None = None     # (resourceVersion written over, text written)
        self.reflector = Reflector("network-status", ApiSource(api, CONFIG_MAP, namespace=namespace,
                                                               field_selector=f"metadata.name={name}"))
        self.reflector.add_handler(lambda old, new: self._wake.set())

    def changed(self) -> None:
        self._wake.set()

    def _stored(self) -> tuple[str, str] | None:
        """(resourceVersion, text of our key) of the ConfigMap, None when it does not exist."""
        config_map = self.reflector.get(f"{self.namespace}/{self.name}")
        if config_map is None:
            return None
        text = mapping(config_map, "data").get(self.key)
        return str(mapping(config_map, "metadata").get("resourceVersion") or ""), text if isinstance(text, str) else ""

    async def run(self, current: Any) -> None:
        """Until cancelled: keep the key equal to ``status_text(current())`` (``current()`` None: nothing yet)."""
        watch = asyncio.create_task(self.reflector.run(), name="network-status-reflector")
        delay = RETRY_MIN
        try:
            await self.reflector.wait_synced()
            if self.on_synced is not None:
                config_map = self.reflector.get(f"{self.namespace}/{self.name}")
                self.on_synced(mapping(config_map, "data") if config_map is not None else {})
            while True:
                await self._wake.wait()
                self._wake.clear()
                status = current()
                stored = self._stored()
                if status is None or stored is None:
                    continue
                text = status_text(status)
                if stored[1] == text or self._written == (stored[0], text):
                    continue
                try:
                    result = await self.api.apply(CONFIG_MAP, {
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "data": {self.key: text}}, name=self.name, namespace=self.namespace,
                        field_manager=self.field_manager, force=True)
                except NotFound:
                    continue                  # deleted meanwhile: its re-creation wakes us
                except (KubeError, ConfigError) as e:      # ConfigError: e.g. the token file is gone
                    log.warning("network status not written to ConfigMap %s/%s: %s (retrying in %.1f s)",
                                self.namespace, self.name, e, delay)
                    await asyncio.sleep(delay)
                    delay = min(RETRY_MAX, delay * 2)
                    self._wake.set()
                    continue
                delay = RETRY_MIN
                self.writes += 1
                self._written = (stored[0], text)     # until the watch shows a newer version than the one written over
                log.debug("network status written (%d bytes, resourceVersion %s)", len(text),
                          mapping(result, "metadata").get("resourceVersion"))
        finally:
            await cancel_and_wait(watch, STEP_SECONDS)
