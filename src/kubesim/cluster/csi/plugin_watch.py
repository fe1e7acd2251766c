"""Discovery of CSI plugin sockets on disk, as kubelet's plugin watcher does.

Plugins started outside this process (e.g. ``listener-operator run node --csi-endpoint
<kubelet_dir>/plugins/<driver>/csi.sock``) register themselves simply by creating their socket, so ``kubesim
serve`` and separately started drivers work together without any Python call. Watching uses Linux inotify
through ctypes (no extra dependency, no polling): a watch on ``<root>`` sees driver directories appear, a watch
on each ``<root>/<driver>/`` sees ``csi.sock`` appear or vanish.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

SOCKET_NAME = "csi.sock"

IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
_EVENT_HEADER = struct.Struct("iIII")
_MASK = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE_SELF | IN_ONLYDIR


class _Libc:
    """The three inotify calls; Python's standard library has no binding for them."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.lib.inotify_init1.argtypes = [ctypes.c_int]
        self.lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.lib.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]

    def init(self) -> int:
        fd = int(self.lib.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        return fd

    def add_watch(self, fd: int, path: Path) -> int:
        wd = int(self.lib.inotify_add_watch(fd, os.fsencode(path), _MASK))
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch {path}: {os.strerror(err)}")
        return wd


class SocketWatcher:
    """Calls ``on_added(driver, socket_path)`` / ``on_removed(driver, socket_path)`` for ``<root>/<driver>/csi.sock``.

    Sockets present at start are reported as added. Callbacks run in the event loop and must not block.
    """

    def __init__(
        self,
        root: Path,
        on_added: Callable[[str, Path], None],
        on_removed: Callable[[str, Path], None],
    ) -> None:
        self.root = root
        self.on_added = on_added
        self.on_removed = on_removed
        self._libc: _Libc | None = None
        self._fd: int | None = None
        self._dirs: dict[int, str] = {}  # watch descriptor -> driver ("" for the root)
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._libc = _Libc()
        self._fd = self._libc.init()
        self._loop = asyncio.get_running_loop()
        self._dirs[self._libc.add_watch(self._fd, self.root)] = ""
        self._loop.add_reader(self._fd, self._read)
        for child in sorted(self.root.iterdir()):
            if child.is_dir():
                self._watch_driver_dir(child.name)

    def stop(self) -> None:
        if self._fd is not None:
            if self._loop is not None:
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = None
        self._dirs.clear()

    def _watch_driver_dir(self, driver: str) -> None:
        assert self._libc is not None and self._fd is not None
        directory = self.root / driver
        try:
            self._dirs[self._libc.add_watch(self._fd, directory)] = driver
        except OSError as error:
            if error.errno not in (errno.ENOENT, errno.ENOTDIR):
                log.warning("cannot watch %s: %s", directory, error)
            return
        socket = directory / SOCKET_NAME
        if socket.exists():
            self.on_added(driver, socket)

    def _read(self) -> None:
        assert self._fd is not None
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            except OSError as error:
                log.warning("inotify read failed: %s", error)
                return
            offset = 0
            while offset + _EVENT_HEADER.size <= len(data):
                wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
                raw = data[offset + _EVENT_HEADER.size : offset + _EVENT_HEADER.size + length]
                offset += _EVENT_HEADER.size + length
                self._handle(wd, mask, os.fsdecode(raw.rstrip(b"\0")))

    def _handle(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            log.warning("inotify queue overflow under %s; rescanning", self.root)
            for child in sorted(self.root.iterdir()):
                if child.is_dir() and child.name not in self._dirs.values():
                    self._watch_driver_dir(child.name)
            return
        if mask & IN_IGNORED:
            self._dirs.pop(wd, None)
            return
        driver = self._dirs.get(wd)
        if driver is None:
            return
        if driver == "":
            if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                self._watch_driver_dir(name)
            return
        if name != SOCKET_NAME:
            return
        socket = self.root / driver / name
        if mask & (IN_CREATE | IN_MOVED_TO):
            self.on_added(driver, socket)
        elif mask & (IN_DELETE | IN_MOVED_FROM):
            self.on_removed(driver, socket)
