"""One proxied TCP connection: bytes both ways with back-pressure, half-close and reset propagated.

Written on asyncio protocols rather than streams: the relay is two callbacks per chunk with no task per direction,
which keeps the per-connection cost of kube-proxy low. Back-pressure: when one side's send buffer is full,
reading from the other side pauses until it drains. A side that ends its sending (``shutdown(SHUT_WR)``) is
passed on as a half-close; the connection closes once both directions have ended. A side that fails (reset) resets
the other; ``abort()`` (an endpoint removed) resets both.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable

from kubesim.cluster.proxy.rules import Endpoint

IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)  # Linux; Python < 3.12 lacks the name


def reset(transport: asyncio.BaseTransport) -> None:
    """Close with a TCP reset (RST), as a rejected or broken connection looks to the peer."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()  # type: ignore[attr-defined]


class _Side(asyncio.Protocol):
    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.ended = False  # it sent EOF
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        other = self.relay.other(self).transport
        if other is not None:
            other.write(data)

    def eof_received(self) -> bool:
        self.ended = True
        other = self.relay.other(self).transport
        if other is not None and not other.is_closing() and other.can_write_eof():
            other.write_eof()
        if self.relay.other(self).ended:
            self.relay.close()
        return True  # keep our own sending direction open

    def pause_writing(self) -> None:
        other = self.relay.other(self).transport
        if other is not None:
            other.pause_reading()

    def resume_writing(self) -> None:
        other = self.relay.other(self).transport
        if other is not None and not other.is_closing():
            other.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        other = self.relay.other(self)
        if other.transport is not None and not other.lost:
            if exc is not None:
                reset(other.transport)
            else:
                other.transport.close()
        self.relay.side_lost()


class Relay:
    """A client connection accepted by kube-proxy and its connection to one endpoint."""

    def __init__(self, endpoint: Endpoint, on_done: Callable[[Relay], None]) -> None:
        self.endpoint = endpoint
        self.client = _Side(self)
        self.server = _Side(self)
        self._on_done = on_done
        self._done = False

    def other(self, side: _Side) -> _Side:
        return self.server if side is self.client else self.client

    async def connect(self, source: str | None, seconds: float) -> None:
        """Open the endpoint connection (from ``source`` when given) and start relaying; reset the client if the
        endpoint refuses or does not answer in time."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            if source is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                with contextlib.suppress(OSError):  # lets many connections share one source address
                    sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
                sock.bind((source, 0))
            await asyncio.wait_for(loop.sock_connect(sock, (self.endpoint.ip, self.endpoint.port)), seconds)
            await loop.create_connection(lambda: self.server, sock=sock)
        except (OSError, TimeoutError):
            sock.close()
            if self.client.transport is not None:
                reset(self.client.transport)
            return
        except BaseException:
            sock.close()
            raise
        if self.client.transport is None or self.client.lost:
            if self.server.transport is not None:
                self.server.transport.close()
            return
        self.client.transport.resume_reading()

    def close(self) -> None:
        for side in (self.client, self.server):
            if side.transport is not None:
                side.transport.close()

    def abort(self) -> None:
        for side in (self.client, self.server):
            if side.transport is not None and not side.lost:
                reset(side.transport)

    def side_lost(self) -> None:
        if not self._done and self.client.lost and (self.server.lost or self.server.transport is None):
            self._done = True
            self._on_done(self)
