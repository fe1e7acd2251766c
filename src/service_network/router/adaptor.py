"""The router adaptor: reads configuration snapshots from a ``ConfigSource``, applies them to the ``Router``
(HAProxy), restarts HAProxy after a crash, and serves ``/metrics``, ``/healthz``, ``/readyz`` and ``/network``.

Across sites it runs the control channels (``control.py``): it tells linked routers which routing keys this router
has, learns theirs, computes routes (``linkstate.py``) and applies the document with those routes added; and it
keeps the network status (``network_status.py``) in ``<state>/network.json``.

Entry point for any caller: ``RouterAdaptor(source, options).run(stop)`` (``run_adaptor(source, options, stop)``
for short); the commands build the adaptor themselves, so that their stop signals can kill its HAProxy
(``shutdown.py``). ``stop`` is heeded at any time, and the shutdown that follows is bounded step by step.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .config import RemoteRoute, RouterConfig, parse_config, with_bind_host
from .control import ControlPlane, LinkEndpoint
from .errors import ConfigError, RouterError
from .linkstate import ServiceEntry, SiteInfo, remote_routes
from .network_status import network_status
from .process import STOP_GRACE, supervise
from .router import Router
from .rust_adaptor import RustAdaptor
from .shutdown import STEP_SECONDS, bounded, cancel_and_wait
from .sources import ConfigSnapshot, ConfigSource
from .spec import RouterSpec, StateLayout
from .tls import TlsResolver

__all__ = ["ENGINES", "AdaptorOptions", "RouterAdaptor", "make_adaptor", "run_adaptor"]

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
    #: ``rust`` (the service network's router, ``dataplane.py``) or ``haproxy`` (the previous data plane, kept
    #: as the benchmark baseline)
    engine: str = "rust"
    router_binary: str | None = None    # the Rust router executable (default: see dataplane.router_binary)


ENGINES = ("rust", "haproxy")


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


STATUS_INTERVAL = 1.0       # the network status is written at most this often
START_CANCEL_SECONDS = 2.0  # an interrupted start-up (or the configuration follower) ends within this


def local_services(spec: RouterSpec) -> tuple[ServiceEntry, ...]:
    """What this router advertises: per routing key its connector targets (``connector@target``) and listeners
    that are configured (not withheld)."""
    connectors: dict[str, set[str]] = {}
    listeners: dict[str, set[str]] = {}
    for b in spec.backends:
        if b.routing_key is None:
            continue
        for sv in b.servers:
            if sv.link is None:
                connectors.setdefault(b.routing_key, set()).add(f"{sv.connector}@{sv.target}")
    for f in spec.frontends:
        listeners.setdefault(f.routing_key, set()).add(f.listener)
    return tuple(ServiceEntry(key=k, connectors=tuple(sorted(connectors.get(k, ()))),
                              listeners=tuple(sorted(listeners.get(k, ()))))
                 for k in sorted(connectors.keys() | listeners.keys()))


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
        self._background: list[asyncio.Task[None]] = []
        self._supervisor: asyncio.Task[None] | None = None
        self.applied = asyncio.Event()     # set after every apply attempt (tests and readiness)
        self.document: RouterConfig | None = None          # the last valid document
        self.routes: tuple[RemoteRoute, ...] = ()           # computed by link-state routing
        self.control: ControlPlane | None = None
        self.status: dict[str, Any] | None = None            # the network status last computed (/network, the publisher)
        self.status_changed = asyncio.Event()                # set whenever a new status was written (tests)
        self._routing_dirty = asyncio.Event()
        self._status_dirty = asyncio.Event()

    def kill(self) -> None:
        """SIGKILL HAProxy's process group (signal-handler safe)."""
        self.router.process.kill()

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

    async def _network(self, _: web.Request) -> web.Response:
        if self.status is None:
            return web.Response(status=503, text="no network status yet\n")
        return web.json_response(self.status)

    async def _start_http(self) -> None:
        if self.options.metrics_address is None:
            return
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/network", self._network)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=STEP_SECONDS / 2)
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
            self.document = config
            await self._apply_current(snap.origin)
        except RouterError as e:
            log.error("%s", e)
        except OSError as e:          # the state directory cannot be written (e.g. it was removed)
            log.error("configuration from %s not applied: %s", snap.origin, e)
        finally:
            self.applied.set()

    async def _apply_current(self, origin: str, routes: tuple[RemoteRoute, ...] | None = None) -> None:
        """Apply the document with the computed routes; then tell the control plane what this router has.
        ``routes`` (new routes) become ``self.routes`` once applied (or failed to apply: the next change retries)."""
        if self.document is None:
            return
        config = self.document.with_routes(self.routes if routes is None else routes)
        if self.control is not None:
            config = config.with_link_hosts({name: status.address for name, status in self.control.links.items()
                                             if status.address is not None})
        try:
            result = await self.router.apply(config)
        finally:
            if routes is not None:
                self.routes = routes
        if result.changed:
            how = (f"reload ({'; '.join(result.reload_reasons)})" if result.reloaded
                   else f"{result.runtime_steps} runtime change(s)")
            log.info("configuration from %s applied: %s", origin, how)
        self._sync_control()

    # --- across sites ------------------------------------------------------------------------------------------

    def _site(self, config: RouterConfig) -> SiteInfo:
        return SiteInfo(id=config.site.id, name=config.site.name, namespace=config.site.namespace)

    def _sync_control(self) -> None:
        """Links to dial (those whose TLS profile is usable) and the keys to advertise, from what is applied."""
        if self.control is None or self.document is None or self.router.live is None:
            return
        endpoints = []
        for link in self.document.links:
            files = self.router.profile_files.get(link.tls_profile)
            if files is not None and files.ca_file is not None and files.cert_file is not None:
                endpoints.append(LinkEndpoint(name=link.name, host=link.host, port=link.port,
                                              cost=link.effective_cost, ca_file=files.ca_file,
                                              cert_file=files.cert_file, tls_version=link.tls_version))
        self.control.set_links(endpoints)
        self.control.set_services(local_services(self.router.live))
        self._status_dirty.set()

    def _control_changed(self) -> None:
        self._routing_dirty.set()
        self._status_dirty.set()

    async def _route_loop(self) -> None:
        """Recompute routes after each control-plane change (bursts coalesced) and apply them when they differ."""
        while True:
            await self._routing_dirty.wait()
            await asyncio.sleep(0.02)
            self._routing_dirty.clear()
            if self.control is None or self.document is None:
                continue
            routes = remote_routes(self.control.db.adverts, self.document.router_id)
            if routes != self.routes:
                try:
                    await self._apply_current("routing", routes)
                except (RouterError, OSError) as e:
                    log.error("routes could not be applied: %s", e)
            self._status_dirty.set()

    def _compute_status(self) -> dict[str, Any] | None:
        if self.control is None or self.document is None:
            return None
        live = self.router.live
        local = [s.key for s in local_services(live) if s.connectors] if live is not None else []
        return network_status(self.control.db.adverts, self.document.router_id, self._site(self.document),
                              list(self.control.links.values()), self.control.neighbours(), self.routes, local)

    async def _status_loop(self) -> None:
        """Write the network status when it changed, at most once per ``STATUS_INTERVAL``."""
        path = self.router.layout.network_status
        written: dict[str, Any] | None = None
        failing = False
        while True:
            await self._status_dirty.wait()
            self._status_dirty.clear()
            status = self._compute_status()
            if status is not None and status != written:
                tmp = path.with_name(f".{path.name}.tmp")
                try:
                    tmp.write_text(json.dumps(status, indent=2, ensure_ascii=False) + "\n")
                    os.replace(tmp, path)
                    written, failing = status, False
                except OSError as e:      # e.g. the state directory was removed: /network and the Pod's
                    if not failing:       # publisher still have it; the file is retried every STATUS_INTERVAL
                        log.warning("network status not written to %s: %s", path, e)
                    failing = True
                    self._status_dirty.set()
            if status is not None and status != self.status:
                self.status = status
                self.status_changed.set()
            await asyncio.sleep(STATUS_INTERVAL)

    async def run(self, stop: asyncio.Event) -> None:
        """Start HAProxy on the source's first valid document, then follow the source until ``stop`` is set.
        Raises ``RouterError`` (with a clear message) when it cannot start.

        ``stop`` is heeded at any time, start-up included (waiting for the first document or for TLS Secrets);
        the shutdown that follows is bounded (see :meth:`_shutdown`)."""
        snapshots = self.source.snapshots()
        stopping = asyncio.Event()
        try:
            await self._serve(snapshots, stop, stopping)
        finally:
            await self._shutdown(snapshots, stopping)

    async def _start(self, snapshots: AsyncIterator[ConfigSnapshot], stopping: asyncio.Event) -> None:
        """Everything from the first document to serving; what it started is stopped by ``_shutdown`` even when
        this is cancelled halfway."""
        first = await anext(snapshots)
        config = self._parse(first)
        self._watch_tls(config)
        self.document = config
        await self.router.start(config)
        log.info("router started from %s", first.origin)
        self.control = ControlPlane(config.router_id, self._site(config), self.router.layout.control_socket,
                                    on_change=self._control_changed)
        await self.control.start()
        self._background = [asyncio.create_task(self._route_loop(), name="routing"),
                            asyncio.create_task(self._status_loop(), name="network-status")]
        self._sync_control()
        self.applied.set()
        await self._start_http()
        self._supervisor = asyncio.create_task(supervise(self.router.process, self.router.restarted,
                                                         stopping=stopping), name="haproxy-supervisor")

    async def _serve(self, snapshots: AsyncIterator[ConfigSnapshot], stop: asyncio.Event,
                     stopping: asyncio.Event) -> None:
        stop_wait = asyncio.create_task(stop.wait(), name="stop-signal")
        start: asyncio.Task[None] | None = None
        follow: asyncio.Task[None] | None = None
        try:
            start = asyncio.create_task(self._start(snapshots, stopping), name="router-start")
            await asyncio.wait({start, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not start.done():      # stopped during start-up (waiting for its ConfigMap, its Secrets, HAProxy)
                log.info("stopped during start-up")
                return
            start.result()            # RouterError: it could not start
            assert self._supervisor is not None
            follow = asyncio.create_task(self._follow(snapshots), name="config-follow")
            await asyncio.wait({follow, stop_wait, self._supervisor}, return_when=asyncio.FIRST_COMPLETED)
            for task in (follow, self._supervisor):     # either failing is a bug: the process fails with it
                if task.done() and not task.cancelled() and (error := task.exception()) is not None:
                    raise error
        finally:
            stop_wait.cancel()
            # also when run() itself is cancelled: nothing may go on starting things after _shutdown
            for left, what in ((start, "start-up"), (follow, "configuration follower")):
                if left is not None and not left.done():
                    await cancel_and_wait(left, START_CANCEL_SECONDS, what)

    async def _shutdown(self, snapshots: AsyncIterator[ConfigSnapshot], stopping: asyncio.Event) -> None:
        """Stop everything at once, each step bounded; a step that fails or hangs is logged and does not keep the
        others from running: HAProxy is always stopped (killed after its grace period)."""
        stopping.set()
        tasks = [t for t in (*self._background, self._supervisor) if t is not None]
        steps = [cancel_and_wait(t, STEP_SECONDS) for t in tasks]
        steps.append(bounded(self.router.stop(), STOP_GRACE + STEP_SECONDS, "stopping HAProxy"))
        if self.control is not None:
            steps.append(bounded(self.control.stop(STEP_SECONDS), STEP_SECONDS + 0.5, "closing control channels"))
        close = getattr(snapshots, "aclose", None)
        if close is not None:
            steps.append(bounded(close(), STEP_SECONDS, "closing the configuration source"))
        if self._runner is not None:
            steps.append(bounded(self._runner.cleanup(), STEP_SECONDS, "stopping the metrics server"))
        try:
            await asyncio.gather(*steps)
        finally:
            self.router.process.kill()    # a no-op after a clean stop; HAProxy's group if that stop never ran
        log.info("router stopped")

    async def _follow(self, snapshots: AsyncIterator[ConfigSnapshot]) -> None:
        async for snap in snapshots:
            await self._apply(snap)


def make_adaptor(source: ConfigSource, options: AdaptorOptions) -> RouterAdaptor | RustAdaptor:
    """The adaptor for ``options.engine``."""
    if options.engine == "haproxy":
        return RouterAdaptor(source, options)
    if options.engine != "rust":
        raise ConfigError([f"engine: {options.engine[:40]!r} is not one of {', '.join(ENGINES)}"])
    return RustAdaptor(source, options.state_dir, metrics_address=options.metrics_address,
                       tls_resolver=options.tls_resolver, bind_host=options.bind_host,
                       router_binary=options.router_binary)


async def run_adaptor(source: ConfigSource, options: AdaptorOptions, stop: asyncio.Event) -> None:
    """Run a router adaptor until ``stop`` is set (see ``RouterAdaptor.run``)."""
    await make_adaptor(source, options).run(stop)
