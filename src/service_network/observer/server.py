"""The network observer's process (I/O): polls one router's ``/observe`` endpoint, folds each snapshot into the
:class:`~.model.ObserverState`, and serves the API, the metrics and the console over HTTP.

Paths (GET only): ``/api/v2alpha1/<kind>`` and ``/api/v2alpha1/<kind>/<id>`` for upstream's kinds, the sub-lists
``sites/<id>/processes``, ``sites/<id>/routers``, ``services/<id>/processes``, ``services/<id>/processpairs``,
``services/<id>/connections``; ``/api/v2alpha1/internal/traffic`` (ours: cumulative traffic per service and site
pair, and the observer's own state, for the console); ``/metrics``; ``/`` and ``/console/...`` (the console's files,
served from the package, nothing from elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from ..http_body import BodyTooLarge, read_body
from .access import Htpasswd, ServerTls
from .metrics import metrics_text
from .model import Network, ObserverState, SnapshotError, parse_snapshot
from .query import QueryError, list_answer, run_query
from .routers import FixedRouter, RouterSource

__all__ = ["CONSOLE_DIR", "KINDS", "Observer", "make_app"]

log = logging.getLogger(__name__)

CONSOLE_DIR = Path(__file__).resolve().parent / "console"
KINDS = ("sites", "processes", "routers", "listeners", "connectors", "services", "components", "sitepairs",
         "componentpairs", "processpairs", "routerlinks", "routeraccess", "connections", "applicationflows")
#: The largest observe answer read from the router.
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
_HEADERS = {"X-Frame-Options": "SAMEORIGIN", "Content-Security-Policy": "default-src 'self'",
            "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}


def _version() -> str:
    try:
        return metadata.version("listener-operator")
    except metadata.PackageNotFoundError:
        return "unknown"


def now_us() -> int:
    return time.time_ns() // 1000


class Observer:
    """Keeps the network as the router last told it, and how the last poll went. ``routers`` says where routers
    answer (a fixed URL, or the site's router Pods); the one that answered last is asked first."""

    def __init__(self, routers: str | RouterSource, *, interval: float = 2.0) -> None:
        self.routers: RouterSource = FixedRouter(routers) if isinstance(routers, str) else routers
        self.interval = interval
        self.state = ObserverState(version=_version())
        self.error: str | None = "no answer from the router yet"
        self.polls = 0
        self.updated_us = 0
        self.router_url = ""
        self.refreshers: list[Callable[[], None]] = []    # run before each poll (files that may change)

    @property
    def network(self) -> Network:
        return self.state.last

    async def _read(self, session: aiohttp.ClientSession, url: str) -> Any:
        async with session.get(f"{url}/observe") as resp:
            if resp.status != 200:
                text = (await resp.content.read(300)).decode(errors="replace")
                raise SnapshotError(f"the router answered {resp.status}: {text.strip()}")
            try:
                body = await read_body(resp.content, MAX_SNAPSHOT_BYTES)
            except BodyTooLarge:
                raise SnapshotError(f"the router's answer is longer than {MAX_SNAPSHOT_BYTES} bytes") from None
        return parse_snapshot(json.loads(body))

    async def poll_once(self, session: aiohttp.ClientSession) -> None:
        urls = self.routers.urls()
        if self.router_url in urls:
            urls.remove(self.router_url)
            urls.insert(0, self.router_url)
        errors: list[str] = []
        for url in urls[:8]:
            try:
                snapshot = await self._read(session, url)
            except (aiohttp.ClientError, TimeoutError, SnapshotError, ValueError) as e:
                errors.append(f"{url}: {str(e) or type(e).__name__}")
                continue
            self.state.take(snapshot, now_us())
            self.error = None
            self.router_url = url
            self.polls += 1
            self.updated_us = now_us()
            return
        message = ("; ".join(errors) or "no router Pod is running yet")[:300]
        if message != self.error:
            log.warning("observing the network: %s", message)
        self.error = message

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(5.0, self.interval * 2))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                for refresh in self.refreshers:
                    refresh()
                await self.poll_once(session)
                await asyncio.sleep(self.interval)


def _json(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, headers=_HEADERS)


def _not_found() -> web.Response:
    return _json({"code": "ErrNotFound", "message": ""}, 404)


_UNAUTHORIZED = {"WWW-Authenticate": 'Basic realm="Skupper Network Observer", charset="UTF-8"'}


def make_app(observer: Observer, users: Htpasswd | None = None) -> web.Application:
    """The API, console and metrics; with ``users``, the API (``/api/``) asks for basic authentication, as
    upstream's proxy does."""
    @web.middleware
    async def authenticate(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                           ) -> web.StreamResponse:
        if users is not None and request.path.startswith("/api/") and not users.allows(
                request.headers.get("Authorization")):
            return web.json_response({"code": "ErrUnauthorized", "message": "sign in with a user of the "
                                      "observer's htpasswd Secret"}, status=401, headers={**_HEADERS, **_UNAUTHORIZED})
        return await handler(request)

    app = web.Application(middlewares=[authenticate])

    def listing(records: list[dict[str, Any]], request: web.Request) -> web.Response:
        params = {k: request.query.getall(k) for k in request.query}
        try:
            page, matched = run_query(records, params, now_us())
        except QueryError as e:
            return _json({"code": "ErrBadRequest", "message": str(e)}, 400)
        return _json(list_answer(page, matched))

    async def kind_list(request: web.Request) -> web.Response:
        kind = request.match_info["kind"]
        if kind not in KINDS:
            return _not_found()
        return listing(observer.network.records.get(kind, []), request)

    async def kind_one(request: web.Request) -> web.Response:
        kind, identity = request.match_info["kind"], request.match_info["id"]
        if kind not in KINDS or kind == "applicationflows":
            return _not_found()
        record = observer.network.find(kind, identity)
        return _not_found() if record is None else _json({"results": record})

    async def sub_list(request: web.Request) -> web.Response:
        kind, identity, sub = request.match_info["kind"], request.match_info["id"], request.match_info["sub"]
        net = observer.network
        if kind == "sites" and sub in ("processes", "routers"):
            return listing([r for r in net.records.get(sub, []) if r.get("siteId") == identity], request)
        if kind == "services" and sub in ("processes", "processpairs", "connections"):
            service = net.find("services", identity)
            if service is None:
                return _not_found()
            key = service["name"]
            procs = {c["processId"] for c in net.records.get("connectors", []) if c["routingKey"] == key}
            if sub == "processes":
                return listing([p for p in net.records.get("processes", []) if p["identity"] in procs], request)
            if sub == "processpairs":
                return listing([p for p in net.records.get("processpairs", []) if p["destinationId"] in procs],
                               request)
            return listing([c for c in net.records.get("connections", []) if c["routingKey"] == key], request)
        return _not_found()

    async def traffic(_: web.Request) -> web.Response:
        net = observer.network
        return _json({"time": net.time_us, "updated": observer.updated_us, "error": observer.error,
                      "polls": observer.polls, "router": observer.router_url, **net.traffic})

    def static(name: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        path = CONSOLE_DIR / name
        body = path.read_bytes()   # a few small files, read once when the app is made
        headers = {**_HEADERS, "Content-Type": _TYPES[path.suffix] + "; charset=utf-8"}

        async def handler(_: web.Request) -> web.StreamResponse:
            return web.Response(body=body, headers=headers)
        return handler

    app.router.add_get("/api/v2alpha1/internal/traffic", traffic)
    app.router.add_get("/api/v2alpha1/{kind}", kind_list)
    app.router.add_get("/api/v2alpha1/{kind}/{id}", kind_one)
    app.router.add_get("/api/v2alpha1/{kind}/{id}/{sub}", sub_list)
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok", headers=_HEADERS)

    app.router.add_get("/metrics", _metrics_handler(observer))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/", static("index.html"))
    for path in sorted(CONSOLE_DIR.iterdir()):
        if path.suffix in _TYPES:
            app.router.add_get(f"/console/{path.name}", static(path.name))
    return app


def _metrics_handler(observer: Observer) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=metrics_text(lambda: observer.network),
                            headers={**_HEADERS, "Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
    return metrics


def metrics_app(observer: Observer) -> web.Application:
    """``/metrics`` alone (upstream's ``-listen-metrics`` server)."""
    app = web.Application()
    app.router.add_get("/metrics", _metrics_handler(observer))
    return app


async def _start(app: web.Application, host: str, port: int, tls: ServerTls | None = None
                 ) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls.context if tls is not None else None)
    await site.start()
    server = getattr(site, "_server", None)
    sockets = getattr(server, "sockets", None) or []
    return runner, sockets[0].getsockname()[1] if sockets else port


async def serve(routers: str | RouterSource, host: str, port: int, *, interval: float = 2.0,
                ready: Callable[[int], None] | None = None, tls: ServerTls | None = None,
                users: Htpasswd | None = None, metrics_address: tuple[str, int] | None = None) -> None:
    """Runs the observer until cancelled; ``ready`` gets the bound port. ``tls``: serve HTTPS; ``users``: the API
    asks for basic authentication; ``metrics_address``: also serve ``/metrics`` alone there."""
    observer = Observer(routers, interval=interval)
    observer.refreshers += [x.refresh for x in (tls, users) if x is not None]
    runners: list[web.AppRunner] = []
    poller: asyncio.Task[None] | None = None
    try:
        runner, bound = await _start(make_app(observer, users), host, port, tls)
        runners.append(runner)
        if metrics_address is not None:
            runners.append((await _start(metrics_app(observer), *metrics_address))[0])
        log.info("network observer on %s://%s:%s/", "https" if tls else "http", host, bound)
        if ready is not None:
            ready(bound)
        poller = asyncio.create_task(observer.run())
        await asyncio.Event().wait()
    finally:
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        for runner in runners:
            await runner.cleanup()
