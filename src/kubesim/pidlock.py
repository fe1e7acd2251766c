"""An exclusive lock on a file that holds its holder's pid: one process at a time on a store file or a state
directory.

The lock is an ``flock`` on the file, which the kernel lets go of when its holder dies (SIGKILL included), so a file
left behind never blocks anyone. The holder removes the file on release while it still holds the lock; a process
that was waiting for that lock then holds it on a removed file, which guards nothing, so it opens the path again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

__all__ = ["LockHeld", "PidLock"]


class LockHeld(Exception):
    """Another live process holds the lock (its pid, as the file says, in ``holder``)."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


class PidLock:
    """The lock at ``path``: :meth:`acquire` takes it without waiting, :meth:`release` removes the file and lets go."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> None:
        """Take the lock and write our pid into the file; raises :class:`LockHeld` while another process holds it."""
        while True:
            lock = self.path.open("a+b")
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                holder = lock.read().decode(errors="replace").strip() or "unknown"
                lock.close()
                raise LockHeld(holder) from None
            try:  # the holder we waited for may have removed the file: then this lock guards nothing
                same = os.stat(self.path).st_ino == os.fstat(lock.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            lock.close()
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()).encode())
        lock.flush()
        self._file = lock

    def release(self) -> None:
        """Remove the file (while still holding the lock: a waiter checks the inode) and let go; nothing when not
        held."""
        if self._file is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        self._file.close()
        self._file = None
