"""Binding helpers for the built-in programs: an aiohttp HTTP server, a TCP server and a UDP endpoint on one
address and port, each closable by ``ProgramContext.serve``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import cast

from aiohttp import web

HttpHandler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


class HttpServer:
    """aiohttp's low-level server on one socket; ``close`` also ends kept-alive connections."""

    def __init__(self, handler: HttpHandler) -> None:
        self._web = web.Server(handler, access_log=None)
        self._server: asyncio.Server | None = None

    async def bind(self, host: str, port: int) -> HttpServer:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._web, host, port, reuse_address=True)
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def wait_closed(self) -> None:
        await self._web.shutdown(0.2)
        if self._server is not None:
            await self._server.wait_closed()


class _Datagram(asyncio.DatagramProtocol):
    def __init__(self, answer: Callable[[bytes, tuple[str, int]], bytes | None]) -> None:
        self._answer = answer
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # selector transports do not subclass it

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = self._answer(data, addr)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


async def bind_udp(
    host: str, port: int, answer: Callable[[bytes, tuple[str, int]], bytes | None]
) -> asyncio.DatagramTransport:
    """A UDP endpoint replying ``answer(data, client)`` to each datagram (nothing when it returns None)."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(lambda: _Datagram(answer), local_addr=(host, port))
    return transport


async def bind_tcp(
    host: str, port: int, on_connection: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await on_connection(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port, reuse_address=True)


def text(body: str, status: int = 200, *, close: bool = False) -> web.Response:
    response = web.Response(text=body, status=status)
    if close:
        response.force_close()
    return response
