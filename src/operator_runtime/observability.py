"""Logging (plain or JSON), a Prometheus registry of one's own, and the ``/metrics``, ``/healthz``, ``/readyz`` HTTP
server: what every operator process of ours serves."""

from __future__ import annotations

import inspect
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from .commands import parse_http_address

__all__ = ["LOG_FORMATS", "HealthServer", "JsonFormatter", "MetricsRegistry", "parse_http_address", "setup_logging"]

LOG_FORMATS = ("plain", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: timestamp, level, logger, message (+ exception)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(fmt: str = "plain", level: str = "INFO") -> None:
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # one line per HTTP request is noise at INFO; our own code logs what matters
    for noisy in ("aiohttp.access",):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


class MetricsRegistry:
    """A registry of its own (several operators may run in one test process), rendered for ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class HealthServer:
    """aiohttp server for ``/metrics``, ``/healthz`` (process alive) and ``/readyz`` (``ready()`` says yes).

    ``ready`` may be a coroutine function when readiness needs I/O (``run node`` asks the API server);
    ``not_ready_detail`` gives the reason shown in a 503 body. ``before_scrape`` lets gauges that mirror live state
    (queue depth, cache sizes) be refreshed on scrape.
    """

    def __init__(self, metrics: MetricsRegistry, *, ready: Callable[[], bool | Awaitable[bool]],
                 not_ready_detail: Callable[[], str] | None = None,
                 before_scrape: Callable[[], None] | None = None) -> None:
        self.metrics = metrics
        self.ready = ready
        self.not_ready_detail = not_ready_detail
        self.before_scrape = before_scrape
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        return app

    async def start(self, host: str, port: int) -> int:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.before_scrape is not None:
            self.before_scrape()
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        ready = self.ready()
        if inspect.isawaitable(ready):
            ready = await ready
        if ready:
            return web.Response(text="ok\n")
        detail = self.not_ready_detail() if self.not_ready_detail is not None else "caches not synced"
        return web.Response(status=503, text=f"not ready: {detail}\n")
