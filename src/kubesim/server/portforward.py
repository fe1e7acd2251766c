"""``.../pods/<name>/portforward`` (``kubectl port-forward``): SPDY/3.1 ``portforward.k8s.io`` streams, tunnelled in
WebSocket binary messages (subprotocol ``SPDY/3.1+portforward.k8s.io``) as kubectl 1.31+ asks first.

The protocol, as the kubelet serves it: for every local connection kubectl opens two streams carrying the same
``port`` and ``requestid`` headers, ``streamtype: error`` and ``streamtype: data``. Each new stream gets a
SYN_REPLY; once both of a request are there, the server dials the Pod's port and copies bytes both ways over the
data stream (a FIN each way is a half-close); if the dial fails, the reason goes down the error stream and both
streams are reset. PINGs are echoed; flow-control frames are ignored, as spdystream does.

Pods here listen on their Pod IP (always a loopback address); nothing else is ever dialled. Bounded: at most
:data:`MAX_REQUESTS` forwarded connections at once per session, a request whose second stream does not come within
:data:`PAIR_TIMEOUT` seconds is dropped with an error, and data for a connection still dialling is capped.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import WSMsgType, web

from kubesim import errors
from kubesim.server import spdy
from kubesim.server.routing import Target

if TYPE_CHECKING:
    from kubesim.server.context import ServerContext

PROTOCOL = "SPDY/3.1+portforward.k8s.io"
MAX_REQUESTS = 128
PAIR_TIMEOUT = 30.0
DIAL_TIMEOUT = 10.0
MAX_PENDING = 1 << 20
CHUNK = 32 * 1024

Send = Callable[[bytes], Awaitable[None]]
Dial = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def _dial(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    async with asyncio.timeout(DIAL_TIMEOUT):
        return await asyncio.open_connection(host, port)


@dataclass
class _Request:
    request_id: str
    port: int
    error_stream: int = 0
    data_stream: int = 0
    pending: bytearray = field(default_factory=bytearray)
    client_done: bool = False       # FIN from kubectl on the data stream
    writer: asyncio.StreamWriter | None = None
    task: asyncio.Task[None] | None = None
    timer: asyncio.TimerHandle | None = None


class PortForwardSession:
    """One kubectl connection's streams. Feed it the bytes kubectl sends; it answers through ``send``."""

    def __init__(self, send: Send, pod_ip: str, pod: str, dial: Dial = _dial) -> None:
        self._send_raw = send
        self._pod_ip = pod_ip
        self._pod = pod
        self._dial = dial
        self._reader = spdy.FrameReader()
        self._codec = spdy.HeaderCodec()
        self._lock = asyncio.Lock()
        self._requests: dict[str, _Request] = {}
        self._streams: dict[int, _Request] = {}
        self._closed = False
        self._background: set[asyncio.Future[None]] = set()

    async def _send(self, frame: bytes) -> None:
        if self._closed:
            return
        async with self._lock:
            await self._send_raw(frame)

    async def receive(self, data: bytes) -> None:
        """Handle bytes from kubectl; :class:`spdy.SpdyError` when it broke the protocol."""
        for frame in self._reader.feed(data):
            if isinstance(frame, spdy.DataFrame):
                await self._data(frame)
            elif frame.type == spdy.SYN_STREAM:
                await self._syn_stream(spdy.parse_syn_stream(self._codec, frame))
            elif frame.type == spdy.PING:
                await self._send(spdy.ping_frame(spdy.stream_and_value(frame)[0]))
            elif frame.type == spdy.RST_STREAM:
                request = self._streams.get(spdy.stream_and_value(frame)[0])
                if request is not None:
                    self._drop(request)
            elif frame.type == spdy.GOAWAY:
                raise EOFError
            # SETTINGS, WINDOW_UPDATE, HEADERS: nothing to do (spdystream ignores windows too)

    async def _syn_stream(self, syn: spdy.SynStream) -> None:
        def one(name: str) -> str:
            return (syn.headers.get(name) or [""])[0]

        kind, port_text, request_id = one("streamtype"), one("port"), one("requestid")
        if syn.stream_id in self._streams:
            raise spdy.SpdyError(f"stream {syn.stream_id} opened twice")
        if kind == "error" and not request_id:
            request_id = str(syn.stream_id)
        elif kind == "data" and not request_id:
            request_id = str(syn.stream_id - 2)
        problem = ""
        if kind not in ("error", "data"):
            problem = "streamtype must be error or data"
        elif not port_text.isdigit() or not 0 < int(port_text) < 65536:
            problem = "port must be a number from 1 to 65535"
        elif request_id not in self._requests and len(self._requests) >= MAX_REQUESTS:
            problem = f"at most {MAX_REQUESTS} forwarded connections at once"
        if problem or len(request_id) > 64:
            await self._send(spdy.rst_stream_frame(syn.stream_id, spdy.REFUSED_STREAM))
            return
        request = self._requests.get(request_id)
        if request is None:
            request = self._requests[request_id] = _Request(request_id, int(port_text))
            request.timer = asyncio.get_running_loop().call_later(PAIR_TIMEOUT, self._incomplete, request)
        if (request.error_stream if kind == "error" else request.data_stream) or request.port != int(port_text):
            await self._send(spdy.rst_stream_frame(syn.stream_id, spdy.PROTOCOL_ERROR))
            return
        if kind == "error":
            request.error_stream = syn.stream_id
        else:
            request.data_stream = syn.stream_id
            request.client_done = syn.fin
        self._streams[syn.stream_id] = request
        await self._send(spdy.syn_reply_frame(self._codec, syn.stream_id))
        if request.error_stream and request.data_stream:
            if request.timer is not None:
                request.timer.cancel()
            request.task = asyncio.create_task(self._forward(request))

    def _incomplete(self, request: _Request) -> None:
        if request.task is None and self._requests.get(request.request_id) is request:
            self._drop(request)
            if request.error_stream:
                message = f"timed out waiting for the data stream of request {request.request_id}".encode()
                task = asyncio.ensure_future(self._send(spdy.data_frame(request.error_stream, message, fin=True)))
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    async def _data(self, frame: spdy.DataFrame) -> None:
        request = self._streams.get(frame.stream_id)
        if request is None or frame.stream_id != request.data_stream or request.client_done:
            return  # a stream already reset or finished; its late frames are dropped
        if frame.fin:
            request.client_done = True
        if request.writer is None:
            if len(request.pending) + len(frame.data) > MAX_PENDING:
                await self._fail(request, "too much data before the Pod's port answered")
                return
            request.pending += frame.data
            return
        try:
            if frame.data:
                request.writer.write(frame.data)
                await request.writer.drain()
            if frame.fin and request.writer.can_write_eof():
                request.writer.write_eof()
        except OSError:
            pass  # the Pod side went away; its reader ends the request

    async def _forward(self, request: _Request) -> None:
        try:
            reader, writer = await self._dial(self._pod_ip, request.port)
        except (OSError, TimeoutError) as e:
            reason = "timed out" if isinstance(e, TimeoutError) else os.strerror(e.errno) if e.errno else str(e)
            await self._fail(request, f"error forwarding port {request.port} to pod {self._pod}: dial tcp4 "
                                      f"{self._pod_ip}:{request.port}: connect: {reason.lower()}")
            return
        request.writer = writer
        try:
            if request.pending:
                writer.write(bytes(request.pending))
                request.pending.clear()
                await writer.drain()
            if request.client_done and writer.can_write_eof():
                writer.write_eof()
            while chunk := await reader.read(CHUNK):
                await self._send(spdy.data_frame(request.data_stream, chunk))
            await self._send(spdy.data_frame(request.data_stream, b"", fin=True))
            await self._send(spdy.data_frame(request.error_stream, b"", fin=True))
        except OSError:
            await self._send(spdy.rst_stream_frame(request.data_stream, spdy.CANCEL))
        finally:
            writer.close()
            self._forget(request)

    async def _fail(self, request: _Request, message: str) -> None:
        await self._send(spdy.data_frame(request.error_stream, message.encode()))
        await self._send(spdy.rst_stream_frame(request.data_stream, spdy.CANCEL))
        await self._send(spdy.rst_stream_frame(request.error_stream, spdy.CANCEL))
        self._drop(request)

    def _forget(self, request: _Request) -> None:
        if self._requests.get(request.request_id) is request:
            del self._requests[request.request_id]
        for stream in (request.error_stream, request.data_stream):
            if self._streams.get(stream) is request:
                del self._streams[stream]

    def _drop(self, request: _Request) -> None:
        self._forget(request)
        if request.timer is not None:
            request.timer.cancel()
        if request.task is not None and request.task is not asyncio.current_task():
            request.task.cancel()
        if request.writer is not None:
            request.writer.close()

    async def close(self) -> None:
        self._closed = True
        tasks = [r.task for r in self._requests.values() if r.task is not None]
        for request in list(self._requests.values()):
            self._drop(request)
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _loopback_ip(pod: dict[str, object]) -> str | None:
    status = pod.get("status")
    ip = str(status.get("podIP") or "") if isinstance(status, dict) else ""
    try:
        return ip if ipaddress.ip_address(ip) in ipaddress.ip_network("127.0.0.0/8") else None
    except ValueError:
        return None


async def pod_port_forward(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    assert t.name is not None and t.namespace is not None
    pod = ctx.store.get(t.rt, t.namespace, t.name)
    phase = str((pod.get("status") or {}).get("phase") or "Pending")
    if phase != "Running":
        raise errors.bad_request(f"unable to forward port because pod is not running. Current status={phase}")
    pod_ip = _loopback_ip(pod)
    if pod_ip is None:
        raise errors.bad_request(f"pod {t.name} has no IP address on this machine to forward to")
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    if request.headers.get("Upgrade", "").lower() != "websocket" or PROTOCOL not in offered:
        raise errors.bad_request(f"kubesim forwards ports over WebSocket ({PROTOCOL}) only; use kubectl 1.31 or "
                                 f"later (KUBECTL_PORT_FORWARD_WEBSOCKETS not false)")
    socket = web.WebSocketResponse(protocols=(PROTOCOL,), max_msg_size=spdy.MAX_FRAME * 2)
    await socket.prepare(request)
    session = PortForwardSession(socket.send_bytes, pod_ip, f"{t.namespace}/{t.name}")
    try:
        async for message in socket:
            if message.type != WSMsgType.BINARY:
                break
            await session.receive(message.data)
    except spdy.SpdyError:
        with contextlib.suppress(Exception):
            await socket.send_bytes(spdy.goaway_frame(0, 1))
    except (EOFError, ConnectionError):
        pass
    finally:
        await session.close()
        await socket.close()
    return socket
