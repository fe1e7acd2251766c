"""The router adaptor: reads configuration snapshots from a ``ConfigSource``, applies them to the ``Router``
(HAProxy), restarts HAProxy after a crash, and serves ``/metrics``, ``/healthz`` and ``/readyz``.

Entry point for any caller (the CLI now, the Kubernetes router Pod later): ``run_adaptor(source, options, stop)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .config import RouterConfig, parse_config, with_bind_host
from .errors import ConfigError, RouterError
from .process import supervise
from .router import Router
from .sources import ConfigSnapshot, ConfigSource
from .spec import StateLayout
from .tls import TlsResolver

__all__ = ["AdaptorOptions", "RouterAdaptor", "run_adaptor"]

log = logging.getLogger("service_network.router.adaptor")


@dataclass(frozen=True)
class AdaptorOptions:
    state_dir: Path
    haproxy: str = "haproxy"
    metrics_address: tuple[str, int] | None = None     # port 0: any free port (see RouterAdaptor.metrics_port)
    tls_resolver: TlsResolver | None = None
    #: Address for entities the document binds on all interfaces (host ""): a router Pod binds its Pod IP, so
    #: that several routers on one machine (kubesim) never share a port.
    bind_host: str | None = None


class _AdaptorCollector(Collector):
    def __init__(self, adaptor: RouterAdaptor) -> None:
        self.adaptor = adaptor

    def collect(self) -> Iterable[Metric]:
        c = self.adaptor.router.counters
        out: list[Metric] = []
        for name, text, value in (
                ("service_network_router_applies", "Configurations applied", c.applies),
                ("service_network_router_reloads", "Hitless HAProxy reloads", c.reloads),
                ("service_network_router_runtime_changes", "Changes made through the runtime API", c.runtime_steps),
                ("service_network_router_apply_errors", "Configurations that could not be applied", c.apply_errors),
                ("service_network_router_config_errors", "Invalid configuration documents",
                 self.adaptor.config_errors),
                ("service_network_router_haproxy_restarts", "HAProxy restarts after a crash", c.restarts)):
            family = CounterMetricFamily(name, text)
            family.add_metric([], value)
            out.append(family)
        problems = GaugeMetricFamily("service_network_router_config_problems",
                                     "Entities withheld from the running configuration (see the log)")
        problems.add_metric([], len(c.problems))
        up = GaugeMetricFamily("service_network_router_haproxy_up", "1 while HAProxy runs")
        up.add_metric([], 1 if self.adaptor.router.process.running else 0)
        return [*out, problems, up]


class RouterAdaptor:
    """Keeps one router in line with its configuration source."""

    def __init__(self, source: ConfigSource, options: AdaptorOptions) -> None:
        self.source = source
        self.options = options
        self.router = Router(StateLayout(options.state_dir.absolute()), haproxy=options.haproxy,
                             tls_resolver=options.tls_resolver)
        self.registry = CollectorRegistry()
        self.registry.register(self.router.collector)
        self.registry.register(_AdaptorCollector(self))
        self.config_errors = 0
        self.metrics_port: int | None = None
        self._runner: web.AppRunner | None = None
        self.applied = asyncio.Event()     # set after every apply attempt (tests and readiness)

    # --- HTTP ----------------------------------------------------------------------------------------------------

    async def _metrics(self, _: web.Request) -> web.Response:
        if self.router.process.running:
            try:
                await self.router.stats()
            except RouterError as e:
                log.debug("statistics unavailable: %s", e)
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        ok = self.router.process.running
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "haproxy is not running\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        ok = self.router.process.running and self.router.live is not None
        return web.Response(status=200 if ok else 503, text="ready\n" if ok else "not ready\n")

    async def _start_http(self) -> None:
        if self.options.metrics_address is None:
            return
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host, port = self.options.metrics_address
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.metrics_port = sockets[0].getsockname()[1] if sockets else port
        log.info("adaptor metrics on http://%s:%s/metrics", host, self.metrics_port)

    # --- configuration -----------------------------------------------------------------------------------------

    def _parse(self, snap: ConfigSnapshot) -> RouterConfig:
        if snap.text is None:
            raise ConfigError([f"(document): {snap.origin} {snap.problem}"])
        try:
            config = parse_config(snap.text)
        except ConfigError as e:
            self.config_errors += 1
            raise ConfigError([f"{snap.origin}: {p}" for p in e.problems]) from None
        return with_bind_host(config, self.options.bind_host) if self.options.bind_host else config

    def _watch_tls(self, config: RouterConfig) -> None:
        resolver = self.router.tls_resolver
        self.source.watch_paths(p for profile in config.tls_profiles for p in resolver.watch_paths(profile))

    async def _apply(self, snap: ConfigSnapshot) -> None:
        try:
            config = self._parse(snap)
            self._watch_tls(config)
            result = await self.router.apply(config)
            if result.changed:
                how = (f"reload ({'; '.join(result.reload_reasons)})" if result.reloaded
                       else f"{result.runtime_steps} runtime change(s)")
                log.info("configuration from %s applied: %s", snap.origin, how)
        except RouterError as e:
            log.error("%s", e)
        finally:
            self.applied.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Start HAProxy on the source's first valid document, then follow the source until ``stop`` is set.
        Raises ``RouterError`` (with a clear message) when it cannot start."""
        snapshots = self.source.snapshots()
        stopping = asyncio.Event()
        supervisor: asyncio.Task[None] | None = None
        try:
            first_task = asyncio.ensure_future(anext(snapshots))
            stop_first = asyncio.ensure_future(stop.wait())
            await asyncio.wait({first_task, stop_first}, return_when=asyncio.FIRST_COMPLETED)
            stop_first.cancel()
            if not first_task.done():      # stopped while waiting for the first document (e.g. its ConfigMap)
                first_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await first_task
                return
            first = first_task.result()
            config = self._parse(first)
            self._watch_tls(config)
            await self.router.start(config)
            log.info("router started from %s", first.origin)
            self.applied.set()
            await self._start_http()
            supervisor = asyncio.create_task(supervise(self.router.process, self.router.restarted,
                                                       stopping=stopping), name="haproxy-supervisor")
            follow = asyncio.create_task(self._follow(snapshots), name="config-follow")
            stop_wait = asyncio.create_task(stop.wait())
            await asyncio.wait({follow, stop_wait, supervisor}, return_when=asyncio.FIRST_COMPLETED)
            for t in (follow, stop_wait):
                t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow
            if supervisor.done() and (error := supervisor.exception()) is not None:
                raise error
        finally:
            stopping.set()
            if supervisor is not None:
                supervisor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await supervisor
            close = getattr(snapshots, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
            await self.router.stop()
            if self._runner is not None:
                await self._runner.cleanup()
            log.info("router stopped")

    async def _follow(self, snapshots: AsyncIterator[ConfigSnapshot]) -> None:
        async for snap in snapshots:
            await self._apply(snap)


async def run_adaptor(source: ConfigSource, options: AdaptorOptions, stop: asyncio.Event) -> None:
    """Run a router adaptor until ``stop`` is set (see ``RouterAdaptor.run``)."""
    await RouterAdaptor(source, options).run(stop)
