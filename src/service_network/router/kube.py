"""The router in a Pod: its configuration from the router ConfigMap and its TLS material from Secrets, both
watched through the controller runtime's one client (:class:`operator_runtime.api.KubeApi`).

- :class:`ConfigMapSource` (a ``ConfigSource``): list+watch of the one ConfigMap (field selector on its name); the
  document is its ``router.json`` key. The first snapshot waits until the ConfigMap exists (a router started before
  its controller wrote the ConfigMap waits instead of failing); later snapshots follow every change.
- :class:`SecretTlsResolver` (a ``TlsResolver``): list+watch of each Secret a profile names, by name (field
  selector), which is all the router's Role allows (``resourceNames``: the controller lists the Secrets of the
  router document); a profile sourced from a Secret reads ``ca.crt``, ``tls.crt`` and ``tls.key``. The router writes
  the material to files (0600) under its state directory. A change of such a Secret (appearing, changing,
  disappearing, or becoming readable once the Role names it) calls ``on_change`` (the source's ``refresh``), so a
  withheld entity is applied as soon as its Secret is usable.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

from operator_runtime.api import KubeApi
from operator_runtime.kinds import CONFIG_MAP, SECRET
from operator_runtime.objects import JsonDict, mapping, meta
from operator_runtime.reflector import ApiSource, Reflector
from operator_runtime.workqueue import ExponentialBackoff

from .config import TlsProfile
from .errors import truncate
from .shutdown import STEP_SECONDS, cancel_and_wait
from .sources import ConfigSnapshot
from .tls import MAX_PEM_BYTES, FileTlsResolver, TlsMaterial, TlsProblem

__all__ = ["ConfigMapSource", "SecretTlsResolver"]

log = logging.getLogger("service_network.router.kube")


class _Watched:
    """A reflector run as a task for as long as its owner lives."""

    def __init__(self, reflector: Reflector) -> None:
        self.reflector = reflector
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.reflector.run(), name=f"reflector-{self.reflector.name}")

    async def stop(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            await cancel_and_wait(task, STEP_SECONDS)


class ConfigMapSource(_Watched):
    """The router document in ConfigMap ``name`` (key ``key``) of ``namespace``."""

    def __init__(self, api: KubeApi, namespace: str, name: str, key: str) -> None:
        super().__init__(Reflector("router-configmap", ApiSource(api, CONFIG_MAP, namespace=namespace,
                                                                 field_selector=f"metadata.name={name}")))
        self.namespace = namespace
        self.name = name
        self.key = key
        self.origin = f"ConfigMap {namespace}/{name} key {key}"
        self._changed = asyncio.Event()
        self.reflector.add_handler(lambda old, new: self._changed.set())

    def refresh(self) -> None:
        self._changed.set()

    def watch_paths(self, paths: Iterable[Path]) -> None:
        """Nothing to watch on disk: TLS material comes from Secrets, whose resolver calls :meth:`refresh`."""

    def read(self) -> ConfigSnapshot:
        config_map = self.reflector.get(f"{self.namespace}/{self.name}")
        if config_map is None:
            return ConfigSnapshot(None, self.origin, "does not exist")
        text = mapping(config_map, "data").get(self.key)
        if not isinstance(text, str):
            return ConfigSnapshot(None, self.origin, "has no such key")
        return ConfigSnapshot(text, self.origin)

    async def snapshots(self) -> AsyncIterator[ConfigSnapshot]:
        self.start()
        try:
            await self.reflector.wait_synced()
            waiting = False
            while True:
                self._changed.clear()
                first = self.read()
                if first.text is not None:
                    break
                if not waiting:
                    log.info("waiting for %s (%s)", self.origin, first.problem)
                    waiting = True
                await self._changed.wait()
            yield first
            while True:
                await self._changed.wait()
                self._changed.clear()
                yield self.read()
        finally:
            await self.stop()


def _decode(secret: JsonDict, key: str) -> bytes | None:
    value = mapping(secret, "data").get(key)
    if not isinstance(value, str):
        return None
    if len(value) > MAX_PEM_BYTES * 2:
        raise TlsProblem(f"Secret {truncate(meta(secret).name)} key {key} is larger than {MAX_PEM_BYTES} bytes")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise TlsProblem(f"Secret {truncate(meta(secret).name)} key {key} is not base64") from None


#: how long a profile waits for its Secret's first list before it is withheld (it is applied once the list comes:
#: ``on_change``); and the retry pace of a list the Role does not allow yet (the controller updates the Role with
#: the document that names the Secret)
SECRET_SYNC_SECONDS = 2.0
SECRET_RETRY = (0.2, 2.0)


class SecretTlsResolver:
    """TLS profiles from Secrets of ``namespace``, each watched by name (profiles with files are read from files)."""

    def __init__(self, api: KubeApi, namespace: str, on_change: Callable[[], None] | None = None) -> None:
        self.api = api
        self.namespace = namespace
        self.on_change = on_change
        self._watched: dict[str, _Watched] = {}
        self._files = FileTlsResolver()

    def _watch(self, name: str) -> _Watched:
        watched = self._watched.get(name)
        if watched is None:
            reflector = Reflector(f"router-secret-{name}", ApiSource(self.api, SECRET, namespace=self.namespace,
                                                                     field_selector=f"metadata.name={name}"),
                                  backoff=ExponentialBackoff(*SECRET_RETRY))
            reflector.add_handler(self._on_event)
            watched = self._watched[name] = _Watched(reflector)
            watched.start()
        return watched

    def _on_event(self, old: JsonDict | None, new: JsonDict | None) -> None:
        if self.on_change is not None:
            self.on_change()

    async def resolve(self, profile: TlsProfile) -> TlsMaterial:
        if profile.secret is None:
            return await self._files.resolve(profile)
        name = profile.secret.name
        reflector = self._watch(name).reflector
        try:
            await asyncio.wait_for(reflector.wait_synced(), SECRET_SYNC_SECONDS)
        except TimeoutError:
            raise TlsProblem(f"Secret {truncate(name)} cannot be read yet in namespace {self.namespace} (the "
                             "router's Role may not name it yet)") from None
        secret = reflector.get(f"{self.namespace}/{name}")
        if secret is None:
            raise TlsProblem(f"Secret {truncate(name)} not found in namespace {self.namespace}")
        material = TlsMaterial(ca=_decode(secret, "ca.crt"), cert=_decode(secret, "tls.crt"),
                               key=_decode(secret, "tls.key"))
        if material.ca is None and material.cert is None:
            raise TlsProblem(f"Secret {truncate(name)} has neither ca.crt nor tls.crt")
        return material

    def retain(self, names: Iterable[str]) -> list[str]:
        """Stop watching Secrets no profile names any more (their watches are cancelled in the background);
        returns the names dropped."""
        keep = set(names)
        dropped = [n for n in self._watched if n not in keep]
        for name in dropped:
            watched = self._watched.pop(name)
            asyncio.get_running_loop().create_task(watched.stop(), name=f"stop-secret-watch-{name[:40]}")
        return dropped

    def watch_paths(self, profile: TlsProfile) -> list[Path]:
        return self._files.watch_paths(profile) if profile.secret is None else []

    async def stop(self) -> None:
        watched, self._watched = list(self._watched.values()), {}
        await asyncio.gather(*(w.stop() for w in watched))
