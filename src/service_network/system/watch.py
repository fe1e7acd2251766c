"""``skupper system install --reload-type auto``: a process beside the router that reloads the site when its input
files change, as upstream's system controller does for a site installed with ``auto`` (``manual``, the default:
``skupper system reload``).

The watcher is ``skupper system reload --watch -n <namespace>`` (:func:`watch_command`), started in its own session
and recorded in ``runtime/reload.pid``; the reload type in ``runtime/reload-type``. It compares
:func:`input_fingerprint` (every file of ``input/``: path, modification time, size) every ``WATCH_SECONDS`` with
the fingerprint of the files the site was last loaded from, which every load records (:func:`record_loaded`,
``runtime/loaded-input``, a digest): a file changed after ``install`` loaded the site but before the watcher's
process had started is reloaded too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sys
import time
from pathlib import Path

from .process import cmdline, spawn

__all__ = ["MAX_WATCHED", "RELOAD_TYPES", "WATCH_SECONDS", "Watcher", "digest", "input_fingerprint", "loaded_digest",
           "record_loaded", "watch_command"]

RELOAD_TYPES = ("manual", "auto")
WATCH_SECONDS = 1.0
MAX_WATCHED = 10_000              # files of input/ compared (a larger tree is compared on its first ones)
STOP_SECONDS = 5.0

Fingerprint = tuple[tuple[str, int, int], ...]


def input_fingerprint(base: Path) -> Fingerprint:
    """What changes when a file of ``base/input`` is added, removed, written or replaced."""
    out: list[tuple[str, int, int]] = []
    root = base / "input"
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        with contextlib.suppress(OSError):
            info = path.stat()
            if path.is_file():
                out.append((str(path.relative_to(root)), info.st_mtime_ns, info.st_size))
        if len(out) >= MAX_WATCHED:
            break
    return tuple(out)


def digest(fingerprint: Fingerprint) -> str:
    """A short, stable digest of a fingerprint (what is recorded and compared)."""
    return hashlib.sha256(repr(fingerprint).encode()).hexdigest()


def _loaded_file(runtime: Path) -> Path:
    return runtime / "loaded-input"


def record_loaded(runtime: Path, fingerprint: Fingerprint) -> None:
    """Record that the site was loaded from files with ``fingerprint`` (taken before they were read)."""
    path = _loaded_file(runtime)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".new")
    staging.write_text(digest(fingerprint) + "\n", encoding="utf-8")
    staging.replace(path)


def loaded_digest(runtime: Path) -> str | None:
    """The digest :func:`record_loaded` last wrote, if any."""
    with contextlib.suppress(OSError):
        text = _loaded_file(runtime).read_text(encoding="utf-8").strip()
        return text or None
    return None


def watch_command(namespace: str) -> list[str]:
    return [sys.executable, "-m", "service_network.skupper.main", "system", "reload", "--watch", "-n", namespace]


class Watcher:
    """The watcher process of the site whose runtime directory is ``runtime``."""

    def __init__(self, namespace: str, runtime: Path) -> None:
        self.namespace = namespace
        self.runtime = runtime

    @property
    def pid_file(self) -> Path:
        return self.runtime / "reload.pid"

    @property
    def type_file(self) -> Path:
        return self.runtime / "reload-type"

    def reload_type(self) -> str:
        with contextlib.suppress(OSError):
            text = self.type_file.read_text(encoding="utf-8").strip()
            if text in RELOAD_TYPES:
                return text
        return "manual"

    def set_reload_type(self, value: str) -> None:
        self.type_file.write_text(value + "\n", encoding="utf-8")

    def _ours(self, pid: int) -> bool:
        return cmdline(pid)[1:] == watch_command(self.namespace)[1:]

    def pid(self) -> int | None:
        """The running watcher's pid (checked: the process runs this site's watch command)."""
        with contextlib.suppress(OSError, ValueError):
            recorded = int(self.pid_file.read_text(encoding="utf-8").strip())
            if self._ours(recorded):
                return recorded
        return None

    def start(self) -> int:
        """Start the watcher (unless it runs); its output goes to ``runtime/logs/reload.log``."""
        running = self.pid()
        if running is not None:
            return running
        (self.runtime / "logs").mkdir(parents=True, exist_ok=True)
        return spawn(watch_command(self.namespace), log=self.runtime / "logs" / "reload.log", cwd=self.runtime,
                     pid_file=self.pid_file, ours=self._ours)

    def stop(self) -> bool:
        """Stop the watcher (SIGTERM, then SIGKILL); whether one ran."""
        pid = self.pid()
        self.pid_file.unlink(missing_ok=True)
        if pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        while self._ours(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._ours(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        return True
