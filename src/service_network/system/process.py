"""Processes a system site starts in their own session (its router, its reload watcher): started, recorded, and
recognised again by their command line."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["STARTED_SECONDS", "cmdline", "spawn"]

STARTED_SECONDS = 5.0             # how long a process just started may take to show its command line


def cmdline(pid: int) -> list[str]:
    """The command line of ``pid`` (empty when it does not run, or is a zombie)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()[:65536].decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def spawn(command: Sequence[str], *, log: Path, cwd: Path, pid_file: Path, ours: Callable[[int], bool]) -> int:
    """Start ``command`` in its own session (output appended to ``log``), record its pid in ``pid_file``, and
    return once ``ours(pid)`` recognises it (a process just started shows no command line for a moment)."""
    out = log.open("ab")
    try:
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                   start_new_session=True, cwd=cwd)
    finally:
        out.close()
    pid_file.write_text(f"{process.pid}\n", encoding="utf-8")
    deadline = time.monotonic() + STARTED_SECONDS
    while process.poll() is None and not ours(process.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return process.pid
