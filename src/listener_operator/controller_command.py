"""``listener-operator run controller``: the Listener controller, preset classes, CSI Identity+Controller, health.

Tasks (behaviour.md "run controller"): CRD maintenance (apply the CRDs, unless ``DISABLE_CRD_MAINTENANCE``, and wait
until they are Established); preset ListenerClass creation (independent of everything else, retried until done); the
Listener controller behind Lease-based leader election, started once the CRDs are served; the CSI gRPC server when an
endpoint is given; the HTTP server for ``/metrics``, ``/healthz`` and ``/readyz``. SIGTERM or SIGINT stops all of
them cleanly; a leader releases its Lease on the way out so that a standby takes over at once.

Every flag has an environment variable (the upstream names where upstream has one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from listener_operator.constants import DEFAULT_CLUSTER_DOMAIN, FULL_CONTROLLER_NAME
from listener_operator.observability import (
    LOG_FORMATS,
    HealthServer,
    Metrics,
    parse_http_address,
    setup_logging,
)
from listener_operator.presets import DEFAULT_PRESET, PRESETS, ensure_presets
from operator_runtime.api import KubeApi
from operator_runtime.config import own_namespace
from operator_runtime.events import EventRecorder
from operator_runtime.leader import LeaderElector, LeadingWork, LeaseOptions

log = logging.getLogger(__name__)

DEFAULT_LEASE_NAME = "listener-operator-controller"


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value else default


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if not value:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    parser.add_argument("--csi-endpoint", default=_env("CSI_ENDPOINT"),
                        help="Unix socket path of the CSI Identity+Controller server [$CSI_ENDPOINT]; "
                             "without it no CSI server is started")
    parser.add_argument("--listener-class-preset", default=_env("LISTENER_CLASS_PRESET", DEFAULT_PRESET),
                        choices=sorted(PRESETS), help="ListenerClasses to create if missing [$LISTENER_CLASS_PRESET]")
    parser.add_argument("--cluster-domain", default=_env("KUBERNETES_CLUSTER_DOMAIN", DEFAULT_CLUSTER_DOMAIN),
                        help="cluster DNS domain for ClusterIP hostnames [$KUBERNETES_CLUSTER_DOMAIN]")
    parser.add_argument("--disable-crd-maintenance", action="store_true",
                        default=_env_bool("DISABLE_CRD_MAINTENANCE", False),
                        help="do not apply the CRDs at start (install them yourself: listener-operator crd | kubectl "
                             "apply --server-side -f -); the controller still waits until they are Established "
                             "[$DISABLE_CRD_MAINTENANCE]")
    parser.add_argument("--leader-elect", action=argparse.BooleanOptionalAction,
                        default=_env_bool("LEADER_ELECT", True),
                        help="use a Lease so that only one replica reconciles [$LEADER_ELECT]")
    parser.add_argument("--leader-election-name", default=_env("LEADER_ELECTION_NAME", DEFAULT_LEASE_NAME),
                        help="Lease name [$LEADER_ELECTION_NAME]")
    parser.add_argument("--leader-election-namespace",
                        default=own_namespace("LEADER_ELECTION_NAMESPACE", "OPERATOR_NAMESPACE", "POD_NAMESPACE"),
                        help="Lease namespace [$LEADER_ELECTION_NAMESPACE, $OPERATOR_NAMESPACE, $POD_NAMESPACE, "
                             "else the service account's namespace, else default]")
    parser.add_argument("--identity", default=_env("POD_NAME", f"{socket.gethostname()}-{os.getpid()}"),
                        help="this replica's leader-election identity [$POD_NAME]")
    parser.add_argument("--http-address", type=parse_http_address,
                        default=parse_http_address(_env("HTTP_ADDRESS", "0.0.0.0:8080") or ""),
                        help="HOST:PORT for /metrics, /healthz, /readyz (port 0: any free port) [$HTTP_ADDRESS]")
    parser.add_argument("--workers", type=int, default=int(_env("RECONCILE_WORKERS", "8") or 8),
                        help="concurrent reconciles [$RECONCILE_WORKERS]")
    parser.add_argument("--resync-period", type=float, default=float(_env("RESYNC_PERIOD", "600") or 600),
                        help="seconds between full re-reconciles as a safety net; 0 disables [$RESYNC_PERIOD]. "
                             "A reconcile that changes nothing writes nothing")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=_env("CONSOLE_LOG_FORMAT", "plain"),
                        help="console log format [$CONSOLE_LOG_FORMAT]")
    parser.add_argument("--log-level", default=_env("CONSOLE_LOG_LEVEL", "INFO"),
                        help="console log level [$CONSOLE_LOG_LEVEL]")


@dataclass
class OperatorOptions:
    """Everything ``run controller`` needs; tests build it directly to run the operator in-process."""

    kubeconfig: str | None = None
    csi_endpoint: str | None = None
    listener_class_preset: str = DEFAULT_PRESET
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    maintain_crds: bool = True
    leader_elect: bool = True
    leader_election_name: str = DEFAULT_LEASE_NAME
    leader_election_namespace: str = "default"
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    http_address: tuple[str, int] | None = ("0.0.0.0", 8080)
    workers: int = 8
    resync_period: float = 600.0
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> OperatorOptions:
        return cls(kubeconfig=args.kubeconfig, csi_endpoint=args.csi_endpoint,
                   listener_class_preset=args.listener_class_preset, cluster_domain=args.cluster_domain,
                   maintain_crds=not args.disable_crd_maintenance, leader_elect=args.leader_elect, leader_election_name=args.leader_election_name,
                   leader_election_namespace=args.leader_election_namespace, identity=args.identity,
                   http_address=args.http_address, workers=args.workers, resync_period=args.resync_period)


class Operator:
    """The running controller process (all tasks); ``await Operator(options).run(stop)`` until ``stop`` is set."""

    def __init__(self, options: OperatorOptions, *, on_request: Callable[[str, str], None] | None = None) -> None:
        if options.workers < 1:
            raise ValueError("--workers must be at least 1")
        if options.resync_period < 0:
            raise ValueError("--resync-period must not be negative")
        if options.listener_class_preset not in PRESETS:
            raise ValueError(f"unknown preset {options.listener_class_preset!r}")
        self.options = options
        self.metrics = Metrics()
        self._on_request = on_request
        self.health: HealthServer | None = None
        self.elector: LeaderElector | None = None
        self.leading: LeadingWork | None = None
        self.controller: Any = None
        self.presets_done = asyncio.Event()
        self.crds_established = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> int:
        from listener_operator.listener_controller.controller import ListenerController
        from operator_runtime.config import make_api

        opts = self.options
        api = make_api(opts.kubeconfig, on_request=self.metrics.count_request)
        if self._on_request is not None:
            api.add_request_hook(self._on_request)
        # The same connections for presets and CSI calls, which the request metrics (the controller's) leave out.
        uncounted = KubeApi(api.transport)
        recorder = EventRecorder(api, FULL_CONTROLLER_NAME, opts.identity)
        self.controller = ListenerController(api, recorder=recorder, cluster_domain=opts.cluster_domain,
                                             workers=opts.workers, metrics=self.metrics,
                                             resync_seconds=opts.resync_period or None)
        tasks: dict[str, asyncio.Task[Any]] = {}
        csi_server: Any = None
        try:
            if opts.http_address is not None:
                self.health = HealthServer(self.metrics, ready=self._ready, before_scrape=self.controller.observe)
                port = await self.health.start(*opts.http_address)
                log.info("serving /metrics, /healthz, /readyz on %s:%d", opts.http_address[0], port)
            if opts.csi_endpoint:
                from listener_operator.csi_server.metrics import CsiMetrics
                from listener_operator.csi_server.server import controller_servicers, start_csi_server
                # CSI call metrics go on the same registry, served on the same /metrics
                csi_metrics = CsiMetrics(self.metrics.registry)
                csi_server = await start_csi_server(opts.csi_endpoint, controller_servicers(uncounted),
                                                    metrics=csi_metrics)
                log.info("CSI Identity+Controller serving on %s", opts.csi_endpoint)
            tasks["presets"] = asyncio.create_task(self._presets(uncounted), name="presets")
            lease = LeaseOptions(opts.leader_election_name, opts.leader_election_namespace, opts.identity,
                                 opts.lease_duration, opts.renew_deadline, opts.retry_period) if opts.leader_elect else None
            self.leading = LeadingWork(api, self.controller.run, lease, on_leading=self.metrics.is_leader.set)
            self.elector = self.leading.elector
            tasks["controller"] = asyncio.create_task(self._control(uncounted, self.leading), name="controller")
            return await self.leading.run_until(stop, tasks["controller"])
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            if csi_server is not None:
                await csi_server.stop(grace=2)
            if self.health is not None:
                await self.health.stop()
            await api.close()

    async def _control(self, uncounted: KubeApi, leading: LeadingWork) -> None:
        """CRD maintenance and the Established wait, then the Listener controller (behind the Lease if elected)."""
        from listener_operator.crd.generate import all_crds
        from listener_operator.crd.maintenance import MAINTENANCE
        from operator_runtime.crdmaintenance import ensure_crds

        await ensure_crds(uncounted, all_crds(), maintain=self.options.maintain_crds, how=MAINTENANCE)
        self.crds_established.set()
        await leading.start()

    def _ready(self) -> bool:
        """Ready when the caches are synced, or when standing by for the lease (a standby is healthy); never while
        the CRDs are not served yet."""
        if not self.crds_established.is_set():
            return False
        if self.leading is not None and self.leading.standing_by:
            return True
        return bool(self.controller is not None and self.controller.synced)

    async def _presets(self, api: KubeApi) -> None:
        delay = 0.5
        while True:
            try:
                created = await ensure_presets(api, self.options.listener_class_preset)
                log.info("apply listener class preset %s: created %s", self.options.listener_class_preset,
                         ", ".join(created) or "nothing")
                self.presets_done.set()
                return
            except Exception as exc:  # the CRD may not be established yet: retry
                log.warning("creating preset ListenerClasses failed (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)


def _install_signal_handlers(stop: asyncio.Event) -> Mapping[signal.Signals, bool]:
    loop = asyncio.get_running_loop()
    installed: dict[signal.Signals, bool] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed[sig] = True
    return installed


async def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, args.log_level)
    options = OperatorOptions.from_args(args)
    stop = asyncio.Event()
    _install_signal_handlers(stop)
    log.info("starting listener-operator controller (preset %s, cluster domain %s, leader election %s, "
             "CRD maintenance %s)", options.listener_class_preset, options.cluster_domain,
             "on" if options.leader_elect else "off", "on" if options.maintain_crds else "off")
    return await Operator(options).run(stop)
