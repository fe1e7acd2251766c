"""Where the router's configuration comes from: the ``ConfigSource`` interface and its file implementation.

The adaptor asks a source for snapshots (the document's current text) and applies each; it does not care whether
the text comes from a file (``FileConfigSource``, for the router run by hand or in "system" mode) or from a watched
ConfigMap (``kube.ConfigMapSource``, in a router Pod). A file is watched with inotify on its directory (so editors' rename-over-writes and kubelet's
``..data`` symlink swaps are seen) plus an explicit ``refresh()`` (SIGHUP); nothing polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from asyncinotify import Inotify, Mask, Watch

__all__ = ["ConfigSnapshot", "ConfigSource", "FileConfigSource"]

log = logging.getLogger("service_network.router.source")
MAX_CONFIG_FILE = 16 * 1024 * 1024
_MASK = Mask.CLOSE_WRITE | Mask.MOVED_TO | Mask.MOVED_FROM | Mask.CREATE | Mask.DELETE | Mask.ATTRIB


@dataclass(frozen=True)
class ConfigSnapshot:
    """The configuration document as it is now (``text`` None: it does not exist), and a description of where it
    comes from, for messages."""

    text: str | None
    origin: str
    problem: str | None = None     # why it could not be read, when text is None


class ConfigSource(Protocol):
    def snapshots(self) -> AsyncIterator[ConfigSnapshot]:
        """The current document first, then a new snapshot after every change (possibly equal to the last one)."""
        ...

    def refresh(self) -> None:
        """Produce a snapshot now (SIGHUP), e.g. because TLS material changed behind the source's back."""
        ...

    def watch_paths(self, paths: Iterable[Path]) -> None:
        """Also produce a snapshot when one of these files changes (TLS material referenced by the document)."""
        ...


class FileConfigSource:
    """A JSON document in a file, watched with inotify."""

    def __init__(self, path: Path, *, settle: float = 0.05) -> None:
        self.path = path.absolute()
        self.settle = settle
        self._refresh = asyncio.Event()
        self._extra: set[Path] = set()
        self._extra_changed = asyncio.Event()

    def refresh(self) -> None:
        self._refresh.set()

    def watch_paths(self, paths: Iterable[Path]) -> None:
        new = {Path(p).absolute() for p in paths}
        if new != self._extra:
            self._extra = new
            self._extra_changed.set()

    def read(self) -> ConfigSnapshot:
        origin = str(self.path)
        try:
            size = self.path.stat().st_size
            if size > MAX_CONFIG_FILE:
                return ConfigSnapshot(None, origin, f"{size} bytes is more than {MAX_CONFIG_FILE}")
            return ConfigSnapshot(self.path.read_text(encoding="utf-8"), origin)
        except FileNotFoundError:
            return ConfigSnapshot(None, origin, "does not exist")
        except UnicodeDecodeError:
            return ConfigSnapshot(None, origin, "is not UTF-8 text")
        except OSError as e:
            return ConfigSnapshot(None, origin, e.strerror or str(e))

    def _wanted(self) -> dict[Path, set[str]]:
        names: dict[Path, set[str]] = {self.path.parent: {self.path.name}}
        for p in self._extra:
            names.setdefault(p.parent, set()).add(p.name)
        return names

    def _sync_watches(self, ino: Inotify, watches: dict[Path, Watch]) -> dict[Path, set[str]]:
        wanted = self._wanted()
        for directory in list(watches):
            if directory not in wanted:
                with contextlib.suppress(OSError, ValueError):
                    ino.rm_watch(watches.pop(directory))
        for directory in wanted:
            if directory not in watches:
                try:
                    watches[directory] = ino.add_watch(directory, _MASK)
                except OSError as e:
                    log.warning("cannot watch %s (%s); changes there need SIGHUP", directory, e)
        return wanted

    async def snapshots(self) -> AsyncIterator[ConfigSnapshot]:
        with Inotify() as ino:
            watches: dict[Path, Watch] = {}
            wanted = self._sync_watches(ino, watches)
            yield self.read()
            while True:
                if self._extra_changed.is_set():
                    self._extra_changed.clear()
                    wanted = self._sync_watches(ino, watches)
                if await self._next_change(ino, wanted):
                    # let a burst of events (write, rename, symlink swap) settle into one snapshot
                    while True:
                        try:
                            await asyncio.wait_for(ino.get(), self.settle)
                        except TimeoutError:
                            break
                    yield self.read()

    async def _next_change(self, ino: Inotify, wanted: dict[Path, set[str]]) -> bool:
        """Wait for a relevant file event, a refresh, or a change of watched paths (False: only re-sync)."""
        event_task = asyncio.ensure_future(ino.get())
        refresh_task = asyncio.ensure_future(self._refresh.wait())
        extra_task = asyncio.ensure_future(self._extra_changed.wait())
        try:
            while True:
                done, _ = await asyncio.wait({event_task, refresh_task, extra_task},
                                             return_when=asyncio.FIRST_COMPLETED)
                if refresh_task in done:
                    self._refresh.clear()
                    return True
                if event_task in done:
                    event = event_task.result()
                    watch = event.watch
                    name = event.name.name if event.name else ""
                    names = wanted.get(watch.path, set()) if watch is not None else set()
                    if name in names or name.startswith(".."):
                        return True
                    event_task = asyncio.ensure_future(ino.get())
                    continue
                return False
        finally:
            for t in (event_task, refresh_task, extra_task):
                t.cancel()
