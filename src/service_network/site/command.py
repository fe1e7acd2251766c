"""``service-network run controller``: the site controller behind Lease-based leader election, with ``/metrics``,
``/healthz`` and ``/readyz``, once CRD maintenance (``operator_runtime.crdmaintenance``: apply the ``skupper.io`` CRDs
unless ``DISABLE_CRD_MAINTENANCE``, then wait until they are Established) is done. SIGTERM or SIGINT stops it; a
leader releases its Lease on the way out.

Every flag has an environment variable, so the same image serves a Deployment and a laptop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import logging
import os
import signal
import socket
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.config import own_namespace
from operator_runtime.events import EventRecorder
from operator_runtime.leader import LeadingWork, LeaseOptions
from operator_runtime.observability import LOG_FORMATS, HealthServer, parse_http_address, setup_logging

from ..constants import CONTROLLER_NAME, DEFAULT_LEASE_NAME, DEFAULT_ROUTER_IMAGE
from .grants import parse_duration
from .metrics import ControllerMetrics
from .pki import LEAF_VALIDITY
from .resources import RouterOptions

__all__ = ["ControllerOptions", "SiteControllerProcess", "add_arguments", "run"]

log = logging.getLogger(__name__)

def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name) or default


def package_version() -> str:
    try:
        return version("listener-operator")
    except PackageNotFoundError:
        return ""


def _grant_address(text: str | None) -> tuple[str, int] | None:
    return parse_http_address(text) if text else None


def _duration(text: str) -> datetime.timedelta:
    try:
        value = parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value.total_seconds() < 1:
        raise argparse.ArgumentTypeError("must be at least 1s")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    parser.add_argument("--router-image", default=_env("ROUTER_IMAGE", DEFAULT_ROUTER_IMAGE),
                        help=f"image of the router Pods [$ROUTER_IMAGE] (default {DEFAULT_ROUTER_IMAGE})")
    parser.add_argument("--router-image-pull-policy", default=_env("ROUTER_IMAGE_PULL_POLICY", "IfNotPresent"),
                        choices=["Always", "IfNotPresent", "Never"], help="[$ROUTER_IMAGE_PULL_POLICY]")
    parser.add_argument("--watch-namespace", default=_env("WATCH_NAMESPACE"),
                        help="only this namespace (default: all namespaces) [$WATCH_NAMESPACE]")
    parser.add_argument("--leader-elect", action=argparse.BooleanOptionalAction,
                        default=(_env("LEADER_ELECT", "true") or "true").lower() in ("1", "true", "yes", "on"),
                        help="use a Lease so that only one replica reconciles [$LEADER_ELECT]")
    parser.add_argument("--leader-election-name", default=_env("LEADER_ELECTION_NAME", DEFAULT_LEASE_NAME),
                        help="Lease name [$LEADER_ELECTION_NAME]")
    parser.add_argument("--leader-election-namespace",
                        default=own_namespace("LEADER_ELECTION_NAMESPACE", "POD_NAMESPACE"),
                        help="Lease namespace [$LEADER_ELECTION_NAMESPACE, $POD_NAMESPACE, else the service "
                             "account's namespace, else default]")
    parser.add_argument("--identity", default=_env("POD_NAME", f"{socket.gethostname()}-{os.getpid()}"),
                        help="this replica's leader-election identity [$POD_NAME]")
    parser.add_argument("--http-address", type=parse_http_address,
                        default=parse_http_address(_env("HTTP_ADDRESS", "0.0.0.0:8082") or ""),
                        help="HOST:PORT of /metrics, /healthz, /readyz (port 0: any free port) [$HTTP_ADDRESS]")
    parser.add_argument("--disable-crd-maintenance", action="store_true",
                        default=(_env("DISABLE_CRD_MAINTENANCE", "false") or "").lower() in ("1", "true", "yes", "on"),
                        help="do not apply the skupper.io CRDs at start (install them yourself: service-network crd | "
                             "kubectl apply --server-side -f -); the controller still waits until they are "
                             "Established [$DISABLE_CRD_MAINTENANCE]")
    parser.add_argument("--workers", type=int, default=int(_env("RECONCILE_WORKERS", "4") or 4),
                        help="namespaces reconciled at once [$RECONCILE_WORKERS]")
    parser.add_argument("--resync-period", type=float, default=float(_env("RESYNC_PERIOD", "600") or 600),
                        help="seconds between safety-net re-reconciles; 0 disables [$RESYNC_PERIOD]")
    parser.add_argument("--grant-server-address", type=parse_http_address,
                        default=_grant_address(_env("GRANT_SERVER_ADDRESS")),
                        help="HOST:PORT of the HTTPS server redeeming access tokens (default: off) "
                             "[$GRANT_SERVER_ADDRESS]")
    parser.add_argument("--grant-server-url", default=_env("GRANT_SERVER_URL"),
                        help="the base URL AccessGrants publish, as other sites reach the grant server (default "
                             "https://HOST:PORT of --grant-server-address) [$GRANT_SERVER_URL]")
    parser.add_argument("--certificate-validity", type=_duration, metavar="DURATION",
                        default=_duration(_env("CERTIFICATE_VALIDITY", "43800h") or "43800h"),
                        help="lifetime of the certificates Certificate resources get, a Go duration (default 43800h, "
                             "five years, as upstream); renewed after two thirds [$CERTIFICATE_VALIDITY]")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=_env("CONSOLE_LOG_FORMAT", "plain"),
                        help="[$CONSOLE_LOG_FORMAT]")
    parser.add_argument("--log-level", default=_env("CONSOLE_LOG_LEVEL", "INFO"), help="[$CONSOLE_LOG_LEVEL]")


@dataclass
class ControllerOptions:
    """Everything ``run controller`` needs; tests build it directly to run the controller in-process."""

    kubeconfig: str | None = None
    router: RouterOptions = field(default_factory=RouterOptions)
    watch_namespace: str | None = None
    leader_elect: bool = True
    leader_election_name: str = DEFAULT_LEASE_NAME
    leader_election_namespace: str = "default"
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    http_address: tuple[str, int] | None = ("0.0.0.0", 8082)
    workers: int = 4
    resync_period: float = 600.0
    maintain_crds: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    grant_server_address: tuple[str, int] | None = None
    grant_server_url: str | None = None
    certificate_validity: datetime.timedelta = LEAF_VALIDITY

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ControllerOptions:
        return cls(kubeconfig=args.kubeconfig,
                   router=RouterOptions(image=args.router_image, image_pull_policy=args.router_image_pull_policy),
                   watch_namespace=args.watch_namespace or None, leader_elect=args.leader_elect,
                   leader_election_name=args.leader_election_name,
                   leader_election_namespace=args.leader_election_namespace, identity=args.identity,
                   http_address=args.http_address, workers=args.workers, resync_period=args.resync_period,
                   maintain_crds=not args.disable_crd_maintenance, grant_server_address=args.grant_server_address,
                   grant_server_url=args.grant_server_url, certificate_validity=args.certificate_validity)


class SiteControllerProcess:
    """The running ``run controller`` (controller, leader election, health server) until ``stop`` is set."""

    def __init__(self, options: ControllerOptions, *, on_request: Any = None) -> None:
        if options.workers < 1:
            raise ValueError("--workers must be at least 1")
        if options.resync_period < 0:
            raise ValueError("--resync-period must not be negative")
        self.options = options
        self.metrics = ControllerMetrics()
        self._on_request = on_request
        self.controller: Any = None
        self.observers: Any = None
        self.leading: LeadingWork | None = None
        self.health: HealthServer | None = None
        self.crds_established = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> int:
        from operator_runtime.config import make_api

        from ..networkobserver.compose import ObserverOptions
        from ..networkobserver.controller import NetworkObserverController
        from .controller import SiteController, SiteControllerOptions

        opts = self.options
        api = make_api(opts.kubeconfig, on_request=self.metrics.count_request)
        if self._on_request is not None:
            api.add_request_hook(self._on_request)
        recorder = EventRecorder(api, CONTROLLER_NAME, opts.identity)
        self.controller = SiteController(api, recorder=recorder, metrics=self.metrics, options=SiteControllerOptions(
            router=opts.router, workers=opts.workers, resync_seconds=opts.resync_period or None,
            watch_namespace=opts.watch_namespace, controller_namespace=opts.leader_election_namespace,
            version=package_version(), grant_server_address=opts.grant_server_address,
            grant_server_url=opts.grant_server_url, certificate_validity=opts.certificate_validity))
        self.observers = NetworkObserverController(
            api, recorder=recorder, watch_namespace=opts.watch_namespace, resync_seconds=opts.resync_period or None,
            options=ObserverOptions(image=opts.router.image, image_pull_policy=opts.router.image_pull_policy))
        try:
            if opts.http_address is not None:
                self.health = HealthServer(self.metrics, ready=self._ready, before_scrape=self.controller.observe)
                port = await self.health.start(*opts.http_address)
                log.info("serving /metrics, /healthz, /readyz on %s:%d", opts.http_address[0], port)
            lease = LeaseOptions(opts.leader_election_name, opts.leader_election_namespace, opts.identity,
                                 opts.lease_duration, opts.renew_deadline, opts.retry_period) if opts.leader_elect else None
            self.leading = LeadingWork(api, self._reconcile_all, lease, on_leading=self.metrics.is_leader.set)
            # CRD requests are not the controller's (its request metrics and hook leave them out)
            control = asyncio.create_task(self._control(KubeApi(api.transport), self.leading), name="controller")
            return await self.leading.run_until(stop, control)
        finally:
            if self.health is not None:
                await self.health.stop()
            await api.close()

    async def _control(self, api: KubeApi, leading: LeadingWork) -> None:
        """CRD maintenance and the Established wait, then the controller (behind the Lease if elected)."""
        from operator_runtime.crdmaintenance import ensure_crds

        from ..crd.generate import installed_crds
        from ..crd.maintenance import MAINTENANCE

        await ensure_crds(api, installed_crds(), maintain=self.options.maintain_crds, how=MAINTENANCE)
        self.crds_established.set()
        await leading.start()

    async def _reconcile_all(self) -> None:
        """The site controller and the NetworkObserver controller, together (one ends: both end)."""
        tasks = [asyncio.create_task(self.controller.run(), name="site-controller"),
                 asyncio.create_task(self.observers.run(), name="networkobserver-controller")]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _ready(self) -> bool:
        if not self.crds_established.is_set():
            return False     # never ready while the CRDs are not served
        if self.leading is not None and self.leading.standing_by:
            return True      # a standby is healthy
        return bool(self.controller is not None and self.controller.synced and self.observers is not None
                    and self.observers.synced)


async def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, args.log_level)
    options = ControllerOptions.from_args(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    log.info("starting the service-network site controller (router image %s, %s, leader election %s, "
             "CRD maintenance %s)", options.router.image, f"namespace {options.watch_namespace}"
             if options.watch_namespace else "all namespaces", "on" if options.leader_elect else "off",
             "on" if options.maintain_crds else "off")
    return await SiteControllerProcess(options).run(stop)
