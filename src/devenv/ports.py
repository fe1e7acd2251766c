"""Ports for the listeners a demo, test or benchmark starts in another process (a router, a backend): chosen here,
bound there a moment later.

The usual way, binding port 0 and closing the socket, takes the port from the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default), the same range every outgoing connection's
local port comes from: between the choice and the other process's ``listen``, any connection made on the machine
(a benchmark's thousands per second, a router dialing its peer) can take that port, and the listener fails with
"Address already in use" while its peers dial whoever holds the port instead. That is how a mixed-network benchmark
found no route in CI: skrouterd's inter-router listener could not bind, and the router that dialed it reached
another router's port (``certificate verify failed``). So the ports here come from below the ephemeral range, where
the kernel never hands out a port on its own: a random one, checked free by binding it, and never twice from one
process. Only another caller choosing the same port within the same moment could collide (a random pick in ten
thousand). NodePorts (30000-32767) are left out.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

#: the span ports are chosen from when the ephemeral range starts above it (below NodePorts' 30000-32767)
LOW, HIGH = 20000, 30000
_given: set[tuple[str, int]] = set()
_lock = threading.Lock()


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The kernel's ephemeral port range (32768-60999 where it cannot be read)."""
    try:
        low, high = (int(x) for x in path.read_text().split()[:2])
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def span(ephemeral: tuple[int, int]) -> range:
    """Where ports are chosen from: LOW-HIGH less whatever of it the ephemeral range covers (empty when all)."""
    low, high = ephemeral
    if high < LOW or low >= HIGH:
        return range(LOW, HIGH)
    return range(LOW, max(LOW, min(HIGH, low)))


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def listen_port(host: str = "127.0.0.1", *, attempts: int = 200) -> int:
    """A port on ``host`` that nothing is bound to, outside the ephemeral range, not given before by this process.
    Where the ephemeral range leaves no room (a machine that made nearly every port ephemeral), the kernel's choice
    (port 0) as before."""
    choices = span(ephemeral_range())
    with _lock:
        for _ in range(attempts if choices else 0):
            port = random.choice(choices)
            if (host, port) not in _given and _bindable(host, port):
                _given.add((host, port))
                return port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        _given.add((host, port))
        return port
