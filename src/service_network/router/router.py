"""``Router``: applies router configurations to one HAProxy, through the runtime API when it can and a hitless
reload when it must, and reads its statistics.

Order of one apply: resolve TLS profiles and write their material; compose the HAProxy model; withhold Listeners
whose new port cannot be bound; render, write ``haproxy.cfg.next`` and check it with ``haproxy -c`` (a refused
render changes nothing); plan; replace ``haproxy.cfg``; run the runtime steps (any failure falls back to a reload)
or reload (a failed reload puts the previous file back; the previous worker keeps serving).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import re
import socket
import time
from dataclasses import dataclass, field

from .config import RouterConfig
from .errors import HaproxyConfigRejected, ReloadFailed, RuntimeApiError, RuntimeCommandFailed
from .haproxy_config import map_text, render, server_arguments
from .lua import pick_script
from .plan import (
    AddServer,
    CloseFrontendSessions,
    DisableFrontend,
    DrainServer,
    EnableFrontend,
    MapEntry,
    Plan,
    RemoveServer,
    Step,
    plan,
)
from .process import HaproxyProcess, check_config
from .runtime_api import RuntimeApi
from .shutdown import STEP_SECONDS, cancel_and_wait
from .spec import RouterSpec, StateLayout, compose
from .stats import Counts, RouterStatsCollector, StatRow, StatsAggregator, parse_show_stat
from .tls import (
    FileTlsResolver,
    ProfileFiles,
    TlsProblem,
    TlsResolver,
    check_material,
    remove_unused_material,
    write_material,
)

__all__ = ["ApplyResult", "Router"]

log = logging.getLogger("service_network.router")
_SESSION = re.compile(r"^(0x[0-9a-fA-F]+): .*\bfe=(\S+)")
_NOT_THERE = ("No such server", "No such backend", "No such frontend", "Unknown", "No such proxy")


@dataclass(frozen=True)
class ApplyResult:
    changed: bool
    reloaded: bool = False
    reload_reasons: tuple[str, ...] = ()
    runtime_steps: int = 0
    problems: tuple[str, ...] = ()


@dataclass
class _Counters:
    applies: int = 0
    reloads: int = 0
    runtime_steps: int = 0
    apply_errors: int = 0
    restarts: int = 0
    last_apply: float = 0.0
    problems: tuple[str, ...] = field(default_factory=tuple)


def _bind_problem(host: str, port: int) -> str | None:
    """None if ``host:port`` can be bound now (as HAProxy will), else the reason."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host or "0.0.0.0", port))
    except OSError as e:
        where = f"{host or 'all interfaces'} port {port}"
        if e.errno == errno.EADDRINUSE:
            return f"{where} is in use by another process"
        if e.errno == errno.EADDRNOTAVAIL:
            return f"{where}: address not available on this machine"
        if e.errno == errno.EACCES:
            return f"{where}: permission denied (ports below 1024 need privileges)"
        return f"{where} cannot be bound: {e.strerror}"
    finally:
        s.close()
    return None


class Router:
    """One router: its HAProxy process, the configuration it serves, and its statistics."""

    def __init__(self, layout: StateLayout, *, haproxy: str = "haproxy",
                 tls_resolver: TlsResolver | None = None) -> None:
        layout.check()
        self.layout = layout
        self.tls_resolver = tls_resolver or FileTlsResolver()
        self.process = HaproxyProcess(layout, haproxy=haproxy)
        self.api: RuntimeApi = self.process.api
        self.collector = RouterStatsCollector()
        self.counters = _Counters()
        self._aggregator = StatsAggregator()
        self._lock = asyncio.Lock()
        self._loaded: RouterSpec | None = None
        self._live: RouterSpec | None = None
        self._written: RouterSpec | None = None    # what haproxy.cfg holds (a restarted HAProxy serves it)
        self._config: RouterConfig | None = None
        #: usable TLS profiles of the last composed configuration (the adaptor's link dialers read link profiles)
        self.profile_files: dict[str, ProfileFiles] = {}
        self.profile_problems: dict[str, str] = {}
        self._checker: asyncio.Task[None] | None = None

    @property
    def live(self) -> RouterSpec | None:
        return self._live

    @property
    def loaded(self) -> RouterSpec | None:
        return self._loaded

    @property
    def config(self) -> RouterConfig | None:
        return self._config

    # --- composing ---------------------------------------------------------------------------------------------

    async def _profiles(self, config: RouterConfig) -> tuple[dict[str, ProfileFiles], dict[str, str]]:
        used = {x.tls_profile for x in config.listeners if x.tls_profile}
        used |= {x.tls_profile for x in config.connectors if x.tls_profile}
        used |= {x.tls_profile for x in config.router_access} | {x.tls_profile for x in config.links}
        files: dict[str, ProfileFiles] = {}
        problems: dict[str, str] = {}
        for profile in config.tls_profiles:
            if profile.name not in used:
                continue
            try:
                material = await self.tls_resolver.resolve(profile)
                check_material(material)
                files[profile.name] = write_material(self.layout.tls_dir, profile.name, material)
            except TlsProblem as e:
                problems[profile.name] = str(e)
        return files, problems

    async def compose(self, config: RouterConfig) -> tuple[RouterSpec, list[str]]:
        """The HAProxy model for ``config`` on this machine now, and what had to be withheld."""
        files, profile_problems = await self._profiles(config)
        self.profile_files, self.profile_problems = files, profile_problems
        spec, problems = compose(config, files, self.layout, profile_problems=profile_problems)
        held = {(f.host, f.port) for f in (self._loaded.frontends if self._loaded else ()) if f.enabled}
        if self._loaded is not None and self._loaded.access is not None:
            held.add((self._loaded.access.host, self._loaded.access.port))
        unavailable = {}
        for f in spec.frontends:
            if f.enabled and (f.host, f.port) not in held:
                reason = _bind_problem(f.host, f.port)
                if reason:
                    unavailable[f.listener] = reason
        if spec.access is not None and (spec.access.host, spec.access.port) not in held:
            reason = _bind_problem(spec.access.host, spec.access.port)
            if reason:
                unavailable[config.router_access[0].name] = reason
        if unavailable:
            spec, problems = compose(config, files, self.layout, profile_problems=profile_problems,
                                     unavailable_binds=unavailable)
        return spec, problems

    def _write_network_files(self, spec: RouterSpec) -> None:
        """The Lua script and the two maps (read by HAProxy at load; at runtime the maps change through the API
        too, so a restarted or reloaded worker starts from what the running one has)."""
        net = spec.globals.network
        if net is None:
            return
        for path, text in ((net.lua_file, pick_script(net.route_map)), (net.route_map, map_text(spec.route_map)),
                           (net.sni_map, map_text(spec.sni_map))):
            if not path.exists() or path.read_text() != text:
                tmp = path.with_name(f".{path.name}.tmp")
                tmp.write_text(text)
                tmp.replace(path)

    async def _write_checked(self, spec: RouterSpec) -> str:
        text = render(spec)
        self.layout.state_dir.mkdir(parents=True, exist_ok=True)
        self._write_network_files(spec)
        candidate = self.layout.config_file.with_name("haproxy.cfg.next")
        candidate.write_text(text)
        await check_config(self.process.haproxy, candidate)
        return text

    def _check_later(self) -> None:
        async def check() -> None:
            await asyncio.sleep(0)      # after the file is installed
            try:
                await check_config(self.process.haproxy, self.layout.config_file)
            except HaproxyConfigRejected as e:
                self.counters.apply_errors += 1
                log.error("the written configuration is refused by haproxy -c (a restart would fail): %s", e)
        if self._checker is None or self._checker.done():
            self._checker = asyncio.create_task(check(), name="haproxy-check")

    def _install(self, text: str, spec: RouterSpec) -> None:
        self._written = spec
        candidate = self.layout.config_file.with_name("haproxy.cfg.next")
        if not candidate.exists() or candidate.read_text() != text:
            candidate.write_text(text)
        candidate.replace(self.layout.config_file)

    # --- applying ----------------------------------------------------------------------------------------------

    async def start(self, config: RouterConfig) -> ApplyResult:
        """Render ``config`` and start HAProxy on it."""
        async with self._lock:
            spec, problems = await self.compose(config)
            text = await self._write_checked(spec)
            self._install(text, spec)
            await self.process.start()
            self._loaded = self._live = spec
            self._config = config
            self._after_apply(problems)
            return ApplyResult(changed=True, problems=tuple(problems))

    async def apply(self, config: RouterConfig) -> ApplyResult:
        """Make HAProxy serve ``config``; ``HaproxyConfigRejected`` / ``ReloadFailed`` leave the previous one."""
        async with self._lock:
            if self._loaded is None or self._live is None:
                raise RuntimeError("router not started")
            try:
                return await self._apply(config)
            except Exception:
                self.counters.apply_errors += 1
                raise

    async def _apply(self, config: RouterConfig) -> ApplyResult:
        assert self._loaded is not None and self._live is not None
        spec, problems = await self.compose(config)
        text = render(spec)
        previous = self.layout.config_file.read_text() if self.layout.config_file.exists() else ""
        the_plan = plan(self._loaded, self._live, spec)
        self._config = config
        if the_plan.empty and text == previous:
            self._after_apply(problems)
            return ApplyResult(changed=False, problems=tuple(problems))
        if the_plan.reload:
            text = await self._write_checked(spec)
        else:
            # runtime changes (targets, routes) are not held up by `haproxy -c` (tens of milliseconds that a lost
            # link's connections would keep failing); the written file is checked right after
            self._write_network_files(spec)
            self._check_later()
        self._install(text, spec)
        if not the_plan.reload:
            try:
                for step in the_plan.steps:
                    await self._run_step(step)
            except RuntimeApiError as e:
                log.warning("runtime change failed (%s); reloading instead", e)
                the_plan = Plan(reload_reasons=(f"runtime change failed: {e}",), drains=the_plan.drains)
            else:
                self._live = spec
                self.counters.runtime_steps += len(the_plan.steps)
                await self._drain_old_workers(the_plan.drains)
                self._after_apply(problems)
                log.info("applied %d runtime change(s)", len(the_plan.steps))
                return ApplyResult(changed=True, runtime_steps=len(the_plan.steps), problems=tuple(problems))
        log.info("reloading haproxy: %s", "; ".join(the_plan.reload_reasons))
        try:
            await self.process.reload()
        except ReloadFailed:
            self.layout.config_file.write_text(previous)
            self._written = self._live
            raise
        self._loaded = self._live = spec
        self.counters.reloads += 1
        await self._drain_old_workers(the_plan.drains)
        self._after_apply(problems)
        return ApplyResult(changed=True, reloaded=True, reload_reasons=the_plan.reload_reasons,
                           problems=tuple(problems))

    def _after_apply(self, problems: list[str]) -> None:
        self.counters.applies += 1
        self.counters.last_apply = time.time()
        self.counters.problems = tuple(problems)
        for p in problems:
            log.warning("%s", p)
        keep = (self._loaded.tls_files() if self._loaded else frozenset()) | (
            self._live.tls_files() if self._live else frozenset())
        remove_unused_material(self.layout.tls_dir, keep)
        specs = [s for s in (self._loaded, self._live) if s is not None]
        self.collector.set_specs(*specs)

    async def restarted(self) -> None:
        """HAProxy was restarted from the config file (after a crash): it serves what was last written."""
        async with self._lock:
            self._loaded = self._live = self._written
            self.counters.restarts += 1
            if self._live is not None:
                self.collector.set_specs(self._live)

    async def _run_step(self, step: Step, pid: int | None = None) -> None:
        api = self.api
        if isinstance(step, DisableFrontend):
            await api.worker_expect(f"disable frontend {step.frontend}", pid=pid)
        elif isinstance(step, EnableFrontend):
            await api.worker_expect(f"enable frontend {step.frontend}", pid=pid)
        elif isinstance(step, AddServer):
            ref = f"{step.backend}/{step.server.name}"
            await api.worker_expect(f"add server {ref} {server_arguments(step.server)}", ok="New server registered",
                                    pid=pid)
            await api.worker_expect(f"enable server {ref}", pid=pid)
        elif isinstance(step, RemoveServer | DrainServer):
            ref = f"{step.backend}/{step.server}"
            await api.worker_expect(f"set server {ref} state maint", pid=pid)
            await api.worker_expect(f"shutdown sessions server {ref}", pid=pid)
            if isinstance(step, RemoveServer):
                await self._delete_server(ref, pid)
        elif isinstance(step, MapEntry):
            path = self.layout.route_map if step.map == "routes" else self.layout.sni_map
            if step.value is None:
                await api.worker_expect(f"del map {path} {step.key}", pid=pid)
            else:
                verb = "add" if step.new else "set"
                await api.worker_expect(f"{verb} map {path} {step.key} {step.value}", pid=pid)
        elif isinstance(step, CloseFrontendSessions):
            sessions = await api.worker("show sess", pid=pid)
            for line in sessions.splitlines():
                m = _SESSION.match(line)
                if m and m[2] == step.frontend:
                    await api.worker(f"shutdown session {m[1]}", pid=pid)

    async def _delete_server(self, ref: str, pid: int | None, seconds: float = 10.0) -> None:
        deadline = time.monotonic() + seconds
        delay = 0.005
        while True:
            answer = await self.api.worker(f"del server {ref}", pid=pid)
            if "Server deleted" in answer:
                return
            if "still has connections" not in answer or time.monotonic() > deadline:
                raise RuntimeCommandFailed(f"del server {ref}", answer)
            await asyncio.sleep(delay)   # its sessions are closing
            delay = min(delay * 2, 0.2)

    async def _drain_old_workers(self, drains: tuple[Step, ...]) -> None:
        if not drains:
            return
        try:
            info = await self.api.show_proc()
        except RuntimeApiError as e:
            log.warning("cannot list old workers to close removed connections: %s", e)
            return
        for pid in info.old_workers:
            for step in drains:
                try:
                    await self._run_step(step, pid)
                except RuntimeCommandFailed as e:
                    if not any(x in e.answer for x in _NOT_THERE):
                        log.warning("old worker %s: %s", pid, e)
                except RuntimeApiError as e:
                    log.debug("old worker %s gone: %s", pid, e)
                    break

    # --- statistics and stop -----------------------------------------------------------------------------------

    async def stats(self) -> dict[tuple[str, str], Counts]:
        """Counts per (proxy, FRONTEND | server), summed over the current and old workers; also fed to
        ``collector``."""
        info = await self.api.show_proc()
        per_worker: dict[int, list[StatRow] | None] = {}
        for pid in (*info.workers, *info.old_workers):
            try:
                per_worker[pid] = parse_show_stat(await self.api.worker("show stat", pid=pid))
            except RuntimeApiError:
                per_worker[pid] = None
        totals = self._aggregator.update(per_worker)
        self.collector.set_totals(totals)
        return totals

    async def stop(self) -> None:
        """Stop HAProxy (``HaproxyProcess.stop``: killed after its grace period); a running ``haproxy -c`` of
        the written file is cancelled (its process killed): a stopping router has no use for its answer."""
        if self._checker is not None and not self._checker.done():
            await cancel_and_wait(self._checker, STEP_SECONDS, "haproxy -c")
        with contextlib.suppress(Exception):
            await self.process.stop()
