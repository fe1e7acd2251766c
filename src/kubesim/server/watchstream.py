"""Watch streams: one chunked JSON line per event from a store watcher, as the stored object, the requested
version or a one-row Table; ``sendInitialEvents`` with its closing bookmark, periodic bookmarks, ``timeoutSeconds``,
the injected cuts and expiries, and the 200-with-ERROR answer to a too-old resourceVersion."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from kubesim import errors
from kubesim.errors import ApiError
from kubesim.kinds.resources import ResourceType
from kubesim.selectors import parse_field_selector
from kubesim.server import wire
from kubesim.server.crud import served
from kubesim.server.routing import Target
from kubesim.server.tables import render_table, wants_table
from kubesim.store.watch import HTTP_MAX_BACKLOG, Watcher, WatchEvent, dumps

if TYPE_CHECKING:
    from kubesim.server.context import ServerContext

LineMaker = Callable[[str, WatchEvent], bytes]


async def watch(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    q = request.query
    sel_l, sel_f = wire.selectors(q)
    if t.name is not None:
        text = f"metadata.name={t.name}" + (f",{q['fieldSelector']}" if q.get("fieldSelector") else "")
        sel_f = parse_field_selector(text)
    timeout = wire.int_param(q, "timeoutSeconds")
    bookmarks = wire.bool_param(q.get("allowWatchBookmarks"))
    initial = wire.bool_param(q.get("sendInitialEvents"))
    rv = q.get("resourceVersion")
    expired: ApiError | None = None
    if ctx.faults.take_expire_next_watch():
        expired = errors.gone("too old resource version: forced expiry (injected fault)")
    else:
        try:
            w = ctx.store.watch(
                t.rt,
                t.namespace,
                label_selector=sel_l,
                field_selector=sel_f,
                resource_version="0" if initial else rv,
            )
        except ApiError as e:
            if e.code != 410:
                raise
            expired = e
    resp = web.StreamResponse(status=200, headers={"Content-Type": wire.JSON, "Cache-Control": "no-cache, private"})
    resp.enable_chunked_encoding()
    if expired is not None:
        # Like the apiserver's watch cache: a too-old resourceVersion is a 200 stream with one ERROR event.
        await resp.prepare(request)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await resp.write(dumps({"type": "ERROR", "object": expired.status()}) + b"\n")
            await resp.write_eof()
        return resp
    w.max_backlog = HTTP_MAX_BACKLOG
    try:
        await resp.prepare(request)
        line = _line_maker(request, t.rt, w)
        if initial:
            await _send_initial(ctx, resp, w, t.rt, line)
        await _pump(ctx, resp, w, t.rt, timeout, bookmarks, line)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await resp.write_eof()
        return resp
    finally:
        ctx.store.watches.stop(w)


def _line_maker(request: web.Request, rt: ResourceType, w: Watcher) -> LineMaker:
    """How this watch serialises an event: as stored, as a view/served version, or as a one-row Table."""
    if wants_table(request):
        accept = request.headers.get("Accept", "")
        cache = f"table/{rt.key}/{rt.version}/{request.query.get('includeObject', '')}/{accept}"

        def table_line(typ: str, ev: WatchEvent) -> bytes:
            cached = ev.cached(typ, cache)
            if cached is not None:
                return cached
            obj = served(rt, w.present(ev.obj))
            rendered = render_table(
                request, rt, [obj], wire.list_meta(obj.get("metadata", {}).get("resourceVersion", ""))
            )
            return ev.line(typ, rendered or obj, cache_as=cache)

        return table_line
    if rt.storage is not None:
        return lambda typ, ev: ev.line(typ, w.present(ev.obj), cache_as=rt.key)
    if rt.crd_name is not None:

        def version_line(typ: str, ev: WatchEvent) -> bytes:
            if ev.obj.get("apiVersion") == rt.api_version:
                return ev.line(typ)
            return ev.line(typ, served(rt, ev.obj), cache_as=rt.api_version)

        return version_line
    return lambda typ, ev: ev.line(typ)


def _bookmark(ctx: ServerContext, rt: ResourceType, annotations: dict[str, str] | None = None) -> bytes:
    metadata: dict[str, object] = {"resourceVersion": str(ctx.store.revision)}
    if annotations:
        metadata["annotations"] = annotations
    mark = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": metadata}
    return dumps({"type": "BOOKMARK", "object": mark}) + b"\n"


async def _send_initial(
    ctx: ServerContext, resp: web.StreamResponse, w: Watcher, rt: ResourceType, line: LineMaker
) -> None:
    chunks = []
    while not w.queue.empty():
        t, ev = w.queue.get_nowait()
        chunks.append(line(t, ev))
    chunks.append(_bookmark(ctx, rt, {"k8s.io/initial-events-end": "true"}))
    await resp.write(b"".join(chunks))


async def _pump(
    ctx: ServerContext,
    resp: web.StreamResponse,
    w: Watcher,
    rt: ResourceType,
    timeout_seconds: int | None,
    bookmarks: bool,
    line: LineMaker,
) -> None:
    """Copy queued events to the stream until timeout, a fault cut, shutdown or client disconnect."""
    start = time.monotonic()
    deadline = start + timeout_seconds if timeout_seconds else None
    f = ctx.faults
    cut_after = f.watch_max_events
    if f.watch_max_seconds is not None:
        cut_deadline = start + f.watch_max_seconds
        deadline = cut_deadline if deadline is None else min(deadline, cut_deadline)
    sent = 0
    try:
        while True:
            if w.queue.empty():
                wait = ctx.bookmark_interval if bookmarks else None
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    wait = left if wait is None else min(wait, left)
                try:
                    async with asyncio.timeout(wait):
                        item = await w.queue.get()
                except TimeoutError:
                    if deadline is not None and time.monotonic() >= deadline:
                        return
                    await resp.write(_bookmark(ctx, rt))
                    continue
                items = [item]
            else:
                items = []
            while not w.queue.empty():
                items.append(w.queue.get_nowait())
            chunks: list[bytes] = []
            stop = False
            for typ, payload in items:
                if typ == "CLOSE":
                    stop = True
                    break
                if typ == "ERROR":
                    chunks.append(dumps({"type": "ERROR", "object": payload}) + b"\n")
                    stop = True
                    break
                chunks.append(line(typ, payload))
                sent += 1
                if cut_after is not None and sent >= cut_after:
                    stop = True
                    break
            if chunks:
                await resp.write(b"".join(chunks))
            if stop:
                return
    except (ConnectionResetError, ConnectionError):
        return
