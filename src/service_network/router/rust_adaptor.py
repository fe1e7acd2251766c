"""The router adaptor: reads configuration snapshots from a ``ConfigSource``, resolves each TLS profile to files in
the state directory (Secrets through the ``TlsResolver``), hands the document to the router process
(``dataplane.DataPlane``, the Rust ``service-network-router``), restarts that process after a crash, copies its
network status into ``<state>/network.json`` and serves ``/metrics``, ``/healthz``, ``/readyz`` and ``/network``.

Links, the control channel and link-state routing live in the router process itself: it dials the links, accepts
them on its router access and carries streams both ways over them. This adaptor only configures and observes.

Entry points: ``adaptor_for(source, AdaptorOptions(...))`` (the commands build the adaptor themselves, so that
their stop signals can kill its router process, ``shutdown.py``) and ``run_adaptor(source, options, stop)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .config import RouterConfig, parse_config, with_bind_host
from .dataplane import DataPlane
from .early import (
    EarlyRouter,
    listener_names,
    readiness,
    remember_stored_routes,
    store_document,
    stored_document,
)
from .errors import ConfigError, RouterError, truncate
from .options import AdaptorOptions
from .routed import RouteMemory, listening_in_status
from .shutdown import STEP_SECONDS, bounded, cancel_and_wait
from .sources import ConfigSnapshot, ConfigSource
from .tls import (
    FileTlsResolver,
    TlsProblem,
    TlsResolver,
    check_material,
    remove_unused_material,
    write_material,
)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["RustAdaptor", "adaptor_for", "run_adaptor"]

log = logging.getLogger("service_network.router.adaptor")

STATUS_INTERVAL = 0.25      # the router is asked this often; network.json is written only when it changed
START_CANCEL_SECONDS = 2.0


class RustAdaptor:
    """Keeps one router process in line with its configuration source."""

    def __init__(self, source: ConfigSource, state_dir: Path, *, metrics_address: tuple[str, int] | None = None,
                 tls_resolver: TlsResolver | None = None, bind_host: str | None = None,
                 router_binary: str | None = None, threads: int | None = None, warm_start: bool = False,
                 early: EarlyRouter | None = None) -> None:
        self.source = source
        self.state_dir = state_dir.absolute()
        self.metrics_address = metrics_address
        self.tls_resolver: TlsResolver = tls_resolver or FileTlsResolver()
        self.bind_host = bind_host
        self.warm_start = warm_start
        self._threads = threads      # given here: wins over the document's router.threads
        #: the router ``early.start_early`` started before this adaptor existed (taken over), if any
        self.early = early
        self.plane = early.plane if early is not None else DataPlane(
            self.state_dir, router_binary, threads=threads, log_level=os.environ.get("ROUTER_LOG", "info"))
        self._registry: CollectorRegistry | None = None     # made by the first scrape (adaptor_metrics.py)
        self.applies = 0
        self.config_errors = 0
        self.metrics_port: int | None = None
        self.applied = asyncio.Event()
        self.document: RouterConfig | None = None
        self.listener_names: list[str] = []   # of the document the router runs (what its readiness waits for)
        self.problems: list[str] = []
        self.status: dict[str, Any] | None = None
        self.status_changed = asyncio.Event()
        # the Listeners that had a route: what a restarted router's readiness awaits
        self.routes = early.routes if early is not None else RouteMemory()
        self._runner: web.AppRunner | None = None
        self._background: list[asyncio.Task[None]] = []

    @property
    def network_status_file(self) -> Path:
        return self.state_dir / "network.json"


    def kill(self) -> None:
        self.plane.kill()

    # --- configuration -------------------------------------------------------------------------------------------

    def _parse(self, snap: ConfigSnapshot) -> RouterConfig:
        if snap.text is None:
            raise ConfigError([f"(document): {snap.origin} {snap.problem}"])
        try:
            config = parse_config(snap.text)
        except ConfigError as e:
            self.config_errors += 1
            raise ConfigError([f"{snap.origin}: {p}" for p in e.problems]) from None
        return with_bind_host(config, self.bind_host) if self.bind_host else config

    async def resolve(self, config: RouterConfig) -> tuple[dict[str, Any], list[str]]:
        """The document the router process gets: every TLS profile as files in the state directory; a profile
        that cannot be used is left out with a problem (the router withholds what uses it)."""
        document: dict[str, Any] = json.loads(config.to_json())
        tls_dir = self.state_dir / "tls"
        profiles: list[dict[str, Any]] = []
        problems: list[str] = []
        keep: list[Path] = []
        # resolved together: a profile whose Secret is not readable yet waits while the others do
        resolved = await asyncio.gather(*(self.tls_resolver.resolve(p) for p in config.tls_profiles),
                                        return_exceptions=True)
        retain = getattr(self.tls_resolver, "retain", None)
        if retain is not None:
            retain(p.secret.name for p in config.tls_profiles if p.secret is not None)
        for profile, outcome in zip(config.tls_profiles, resolved, strict=True):
            try:
                if isinstance(outcome, BaseException):
                    raise outcome
                material = outcome
                check_material(material)
                files = write_material(tls_dir, profile.name, material)
            except TlsProblem as e:
                problems.append(f"TLS profile {truncate(profile.name)} {e}")
                continue
            entry: dict[str, str] = {}
            if files.ca_file is not None:
                entry["ca"] = str(files.ca_file)
                keep.append(files.ca_file)
            if files.cert_file is not None:
                entry["cert"] = entry["key"] = str(files.cert_file)
                keep.append(files.cert_file)
            profiles.append({"name": profile.name, "files": entry})
        document["tlsProfiles"] = profiles
        document["remoteRoutes"] = []
        with contextlib.suppress(OSError):
            remove_unused_material(tls_dir, keep)
        return document, problems

    def _watch_tls(self, config: RouterConfig) -> None:
        self.source.watch_paths(p for profile in config.tls_profiles for p in self.tls_resolver.watch_paths(profile))

    async def _apply(self, config: RouterConfig, origin: str) -> None:
        document, problems = await self.resolve(config)
        answer = await self.plane.apply(document)
        self.applies += 1
        if not answer.get("ok"):
            raise ConfigError([str(p) for p in answer.get("problems", [])])
        self.document = config
        self.listener_names = [listener.name for listener in config.listeners]
        self._store_document(document)
        if self._threads is None:
            self.plane.threads = config.router.threads
        if self.plane.threads != self.plane.started_threads:
            running, wanted = (n or "the default" for n in (self.plane.started_threads, self.plane.threads))
            problems.append(f"router.threads: the router runs {running} worker threads; {wanted} take effect "
                            "when it restarts")
        self.problems = problems + [str(p) for p in answer.get("problems", [])]
        for p in self.problems:
            log.warning("%s", p)
        log.info("configuration from %s applied (generation %s)", origin, answer.get("generation"))

    async def _apply_snapshot(self, snap: ConfigSnapshot) -> None:
        try:
            config = self._parse(snap)
            self._watch_tls(config)
            await self._apply(config, snap.origin)
        except RouterError as e:
            log.error("%s", e)
        except OSError as e:
            log.error("configuration from %s not applied: %s", snap.origin, e)
        finally:
            self.applied.set()

    def _store_document(self, document: dict[str, Any]) -> None:
        if not self.warm_start:
            return
        try:
            store_document(self.state_dir, self.bind_host, document)
        except OSError as e:
            log.warning("the applied document not kept in %s: %s", self.state_dir, e)

    async def _warm_start(self, stopping: asyncio.Event) -> None:
        """The router running its stored document (``warm_start``; ``early``: already started by the command), its
        readiness served: it listens again before the configuration source answers (a restarted container's
        adaptor waits on no API server). The source's first document is applied next, as any update (what did not
        change keeps running)."""
        if self.early is not None and self.plane.running and self.plane.last_document is not None:
            document: dict[str, Any] | None = self.plane.last_document
        else:
            document = stored_document(self.state_dir, self.bind_host) if self.warm_start else None
            if document is None:
                return
            router = document.get("router")
            if self._threads is None and isinstance(router, dict) and isinstance(router.get("threads"), int):
                self.plane.threads = router["threads"]
            await self.plane.start()
            try:
                answer = await self.plane.apply(document)
            except RouterError as e:
                answer = {"ok": False, "problems": [str(e)]}
            if not answer.get("ok"):
                log.warning("the stored document was not applied (%s); waiting for the configuration",
                            "; ".join(str(p) for p in answer.get("problems", []))[:500])
                return
            log.info("router started from its last document, before the configuration was read")
        assert document is not None
        self.listener_names = listener_names(document)
        self._start_background(stopping)
        await self._start_http()

    def _start_background(self, stopping: asyncio.Event) -> None:
        if not self._background:
            self._background = [asyncio.create_task(self._status_loop(), name="network-status"),
                                asyncio.create_task(self.plane.supervise(stopping), name="router-supervisor")]

    # --- status --------------------------------------------------------------------------------------------------

    async def _status_loop(self) -> None:
        written: dict[str, Any] | None = None
        failing = False
        path = self.network_status_file
        while True:
            try:
                status = await self.plane.network()
            except RouterError:
                status = None
            if status is not None and "version" in status and status != written:
                tmp = path.with_name(f".{path.name}.tmp")
                try:
                    tmp.write_text(json.dumps(status, indent=2, ensure_ascii=False) + "\n")
                    os.replace(tmp, path)
                    written, failing = status, False
                except OSError as e:
                    if not failing:
                        log.warning("network status not written to %s: %s", path, e)
                    failing = True
            if status is not None and "version" in status and status != self.status:
                self.routes.saw(listening_in_status(status))
                self.status = status
                self.status_changed.set()
            await asyncio.sleep(STATUS_INTERVAL)

    # --- HTTP ----------------------------------------------------------------------------------------------------

    async def _metrics(self, _: web.Request) -> web.Response:
        from . import adaptor_metrics

        if self._registry is None:
            self._registry = adaptor_metrics.registry_for(self)
        body = adaptor_metrics.render(self._registry)
        with contextlib.suppress(RouterError):
            text = await self.plane.metrics_text()
            body += "".join(line + "\n" for line in text.splitlines() if line != "# EOF").encode()
        return web.Response(body=body, headers={"Content-Type": adaptor_metrics.CONTENT_TYPE})

    async def _healthz(self, _: web.Request) -> web.Response:
        ok = self.plane.running
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "the router is not running\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        status, text = await readiness(self.plane, self.routes, self.listener_names)
        return web.Response(status=status, text=text)

    async def _network(self, _: web.Request) -> web.Response:
        if self.status is None:
            return web.Response(status=503, text="no network status yet\n")
        return web.json_response(self.status)

    async def _start_http(self) -> None:
        if self.early is not None:
            await self.early.close_http()     # its address is this server's
        if self.metrics_address is None:
            return
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/network", self._network)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=STEP_SECONDS / 2)
        await self._runner.setup()
        host, port = self.metrics_address
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.metrics_port = sockets[0].getsockname()[1] if sockets else port
        log.info("adaptor metrics on http://%s:%s/metrics", host, self.metrics_port)

    # --- lifecycle -----------------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Start the router on the source's first valid document, then follow the source until ``stop``."""
        snapshots = self.source.snapshots()
        stopping = asyncio.Event()
        try:
            await self._serve(snapshots, stop, stopping)
        finally:
            await self._shutdown(snapshots, stopping)

    async def _start(self, snapshots: AsyncIterator[ConfigSnapshot], stopping: asyncio.Event) -> None:
        remember_stored_routes(self.state_dir, self.routes)
        await self._warm_start(stopping)
        first = await anext(snapshots)
        config = self._parse(first)
        self._watch_tls(config)
        if not self.plane.running:
            if self._threads is None:
                self.plane.threads = config.router.threads
            await self.plane.start()
        await self._apply(config, first.origin)
        log.info("router started from %s", first.origin)
        self.applied.set()
        self._start_background(stopping)
        if self._runner is None:
            await self._start_http()

    async def _serve(self, snapshots: AsyncIterator[ConfigSnapshot], stop: asyncio.Event,
                     stopping: asyncio.Event) -> None:
        stop_wait = asyncio.create_task(stop.wait(), name="stop-signal")
        start: asyncio.Task[None] | None = None
        follow: asyncio.Task[None] | None = None
        try:
            start = asyncio.create_task(self._start(snapshots, stopping), name="router-start")
            await asyncio.wait({start, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not start.done():
                log.info("stopped during start-up")
                return
            start.result()
            follow = asyncio.create_task(self._follow(snapshots), name="config-follow")
            await asyncio.wait({follow, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if follow.done() and not follow.cancelled() and (error := follow.exception()) is not None:
                raise error
        finally:
            stop_wait.cancel()
            for left, what in ((start, "start-up"), (follow, "configuration follower")):
                if left is not None and not left.done():
                    await cancel_and_wait(left, START_CANCEL_SECONDS, what)

    async def _follow(self, snapshots: AsyncIterator[ConfigSnapshot]) -> None:
        async for snap in snapshots:
            await self._apply_snapshot(snap)

    async def _shutdown(self, snapshots: AsyncIterator[ConfigSnapshot], stopping: asyncio.Event) -> None:
        stopping.set()
        steps = [cancel_and_wait(t, STEP_SECONDS) for t in self._background]
        steps.append(bounded(self.plane.stop(), 2 * STEP_SECONDS + 2.0, "stopping the router"))
        close = getattr(snapshots, "aclose", None)
        if close is not None:
            steps.append(bounded(close(), STEP_SECONDS, "closing the configuration source"))
        if self._runner is not None:
            steps.append(bounded(self._runner.cleanup(), STEP_SECONDS, "stopping the metrics server"))
        try:
            await asyncio.gather(*steps)
        finally:
            self.plane.kill()
        log.info("router stopped")


def adaptor_for(source: ConfigSource, options: AdaptorOptions) -> RustAdaptor:
    """The adaptor ``options`` describe, following ``source``."""
    return RustAdaptor(source, options.state_dir, metrics_address=options.metrics_address,
                       tls_resolver=options.tls_resolver, bind_host=options.bind_host,
                       router_binary=options.router_binary, warm_start=options.warm_start, early=options.early)


async def run_adaptor(source: ConfigSource, options: AdaptorOptions, stop: asyncio.Event) -> None:
    """Run a router adaptor until ``stop`` is set (see ``RustAdaptor.run``)."""
    await adaptor_for(source, options).run(stop)
