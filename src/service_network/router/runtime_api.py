"""Async client of HAProxy's master CLI (the ``-S`` Unix socket of a master-worker HAProxy).

One command per connection, as the master CLI expects in non-interactive mode: the command is sent, the write side
is shut, and the answer is read to EOF. Commands for a worker are prefixed with ``@1`` (the current worker) or
``@!<pid>`` (a given, possibly old, worker). No maintained Python library speaks this protocol asynchronously, hence
this small client.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import RuntimeApiUnavailable, RuntimeCommandFailed

__all__ = ["ProcInfo", "RuntimeApi", "parse_show_proc"]

_MAX_ANSWER = 64 * 1024 * 1024


@dataclass(frozen=True)
class ProcInfo:
    """``show proc`` on the master: its reload counters and the current and old worker pids."""

    master_pid: int
    reloads: int
    failed_reloads: int
    workers: tuple[int, ...]
    old_workers: tuple[int, ...]


_MASTER = re.compile(r"^(\d+)\s+master\s+(\d+)(?:\s+\[failed:\s*(\d+)\])?")
_WORKER = re.compile(r"^(\d+)\s+worker\s")


def parse_show_proc(text: str) -> ProcInfo:
    master_pid = reloads = failed = 0
    workers: list[int] = []
    old: list[int] = []
    section = "main"
    for line in text.splitlines():
        if line.startswith("# workers"):
            section = "workers"
            continue
        if line.startswith("# old workers"):
            section = "old"
            continue
        if line.startswith("#"):
            section = "other"
            continue
        m = _MASTER.match(line)
        if m:
            master_pid, reloads, failed = int(m[1]), int(m[2]), int(m[3] or 0)
            continue
        m = _WORKER.match(line)
        if m and section in ("workers", "old"):
            (workers if section == "workers" else old).append(int(m[1]))
    if not master_pid:
        raise RuntimeCommandFailed("show proc", text)
    return ProcInfo(master_pid, reloads, failed, tuple(workers), tuple(old))


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while chunk := await reader.read(256 * 1024):
        total += len(chunk)
        if total > _MAX_ANSWER:
            raise RuntimeApiUnavailable(f"HAProxy answer larger than {_MAX_ANSWER} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class RuntimeApi:
    """Commands to a master-worker HAProxy through its master socket."""

    def __init__(self, master_socket: Path, *, timeout: float = 10.0) -> None:
        self.master_socket = master_socket
        self.timeout = timeout

    async def master(self, command: str) -> str:
        """Send one command to the master; returns its raw answer."""
        if "\n" in command or "\r" in command:
            raise ValueError(f"runtime command must be one line: {command[:100]!r}")
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(self.master_socket)),
                                                    self.timeout)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise RuntimeApiUnavailable(f"HAProxy master socket {self.master_socket} is not answering "
                                        f"({e.strerror}); is the router's HAProxy running?") from None
        except TimeoutError:
            raise RuntimeApiUnavailable(f"HAProxy master socket {self.master_socket}: no connection within "
                                        f"{self.timeout}s") from None
        except OSError as e:
            raise RuntimeApiUnavailable(f"HAProxy master socket {self.master_socket}: {e}") from None
        try:
            writer.write(command.encode() + b"\n")
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            data = await asyncio.wait_for(_read_all(reader), self.timeout)
        except TimeoutError:
            raise RuntimeApiUnavailable(f"HAProxy did not answer {command!r} within {self.timeout}s") from None
        except (ConnectionResetError, BrokenPipeError) as e:
            raise RuntimeApiUnavailable(f"HAProxy master socket {self.master_socket}: {e}") from None
        finally:
            writer.close()
        return data.decode("utf-8", "replace")

    async def worker(self, command: str, *, pid: int | None = None) -> str:
        """Send one command to the current worker (or to worker ``pid``, current or old)."""
        prefix = "@1" if pid is None else f"@!{pid}"
        return await self.master(f"{prefix} {command}")

    async def worker_expect(self, command: str, *, ok: str = "", pid: int | None = None) -> str:
        """Like ``worker``; raises ``RuntimeCommandFailed`` unless the answer is empty (``ok=""``) or contains
        ``ok``."""
        answer = await self.worker(command, pid=pid)
        good = (ok in answer) if ok else not answer.strip()
        if not good:
            raise RuntimeCommandFailed(command, answer)
        return answer

    async def show_proc(self) -> ProcInfo:
        return parse_show_proc(await self.master("show proc"))
