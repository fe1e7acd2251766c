"""Client side of kubesim's traffic, for tests and demos: "which Pod answers at this address?".

The built-in servers (agnhost ``serve-hostname``, ``netexec /hostname``, nginx's ``/``) answer with the Pod's
name, so ``who_answers(ip, port)`` tells which replica a published address reaches. ``published_targets`` lists
the (address, port) pairs of ingress addresses shaped ``{address, addressType, ports: {name: port}}`` (as in a
Listener's status or a PodListeners entry); names are resolved with ``Cluster.resolve``. Only loopback
addresses are ever dialled: anything else raises ``ValueError`` before a socket is opened.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from kubesim.addresses import not_loopback_reason

MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class Target:
    address: str  # as published: an IP or a hostname
    port_name: str
    port: int

    def __str__(self) -> str:
        return f"{self.address}:{self.port}"


def published_targets(ingress_addresses: Iterable[Mapping[str, Any]]) -> list[Target]:
    """Every (address, port) of a list of ingress addresses, in order."""
    targets = []
    for entry in ingress_addresses:
        for name, port in sorted((entry.get("ports") or {}).items()):
            if isinstance(port, int):
                targets.append(Target(str(entry.get("address", "")), str(name), port))
    return targets


def _check(host: str) -> None:
    reason = not_loopback_reason(host)
    if reason is not None:
        raise ValueError(f"refusing to connect to {host[:100]}: {reason}")


async def http_get(
    host: str, port: int, path: str = "/", *, seconds: float = 5.0, source: str | None = None
) -> tuple[int, str]:
    """(status, body) of one GET on a new connection, from ``source`` (a loopback address) when given."""
    _check(host)
    if source is not None:
        _check(source)
    connector = aiohttp.TCPConnector(force_close=True, local_addr=(source, 0) if source else None)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=seconds)) as session,
        session.get(f"http://{host}:{port}{path}", allow_redirects=False) as response,
    ):
        body = await response.content.read(MAX_BODY)
        return response.status, body.decode(errors="replace")


async def who_answers(
    host: str, port: int, *, path: str = "/", seconds: float = 5.0, source: str | None = None
) -> str:
    """The Pod name a built-in server answers with at ``host:port`` (``path="/hostname"`` for netexec)."""
    status, body = await http_get(host, port, path, seconds=seconds, source=source)
    if status != 200:
        raise ConnectionError(f"{host}:{port}{path} answered HTTP {status}")
    return body.strip()
