"""``service-network run router``: the router of a site in its Pod: the router process and its adaptor, configured
from the router ConfigMap and the TLS Secrets of the Pod's namespace (watched), bound to the Pod IP; its network
status is copied into its key of the ``skupper-network-status`` ConfigMap (``status_publisher.py``).

Runs until SIGTERM/SIGINT (the router process is stopped with it; the stop is bounded, see ``shutdown.py``, and a
second signal ends the process at once). In a cluster it uses the Pod's service account
(in-cluster configuration; the Role the site controller creates allows exactly the reads it makes); outside one,
``--kubeconfig``. Exit codes are those of ``service-network router`` (2 invalid settings or state directory, 3 the
router binary missing, 4 the router did not start, 1 other errors).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from operator_runtime.commands import parse_http_address
from operator_runtime.errors import KubeError

from ..constants import ADAPTOR_PORT, NETWORK_STATUS_NAME, ROUTER_CONFIG_KEY, ROUTER_NAME, ROUTER_STATE_DIR
from .early import EarlyRouter, start_early
from .errors import RouterError, exit_code
from .names import is_ip_address
from .routed import listening_in_status_texts
from .shutdown import STEP_SECONDS, StopSignals, before_exit, bounded, cancel_and_wait

if TYPE_CHECKING:
    from .rust_adaptor import RustAdaptor
    from .status_publisher import StatusPublisher

__all__ = ["add_arguments", "run"]

log = logging.getLogger("service_network.router")
def _namespace() -> str | None:
    if value := os.environ.get("POD_NAMESPACE"):
        return value
    from operator_runtime.config import default_service_account_dir

    try:
        return (Path(default_service_account_dir()) / "namespace").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    pod_ip = env("POD_IP") or None
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    parser.add_argument("--namespace", default=_namespace(),
                        help="the site's namespace [$POD_NAMESPACE, else the service account's namespace]")
    parser.add_argument("--config-map", default=env("ROUTER_CONFIG_MAP", ROUTER_NAME),
                        help=f"ConfigMap holding the router document [$ROUTER_CONFIG_MAP] (default {ROUTER_NAME})")
    parser.add_argument("--state-dir", type=Path, default=Path(env("ROUTER_STATE_DIR", ROUTER_STATE_DIR)),
                        help="the control socket, TLS material and network.json [$ROUTER_STATE_DIR]")
    parser.add_argument("--bind-address", default=pod_ip,
                        help="address bound for Listeners and the metrics endpoint [$POD_IP] (default: all "
                             "interfaces)")
    parser.add_argument("--metrics-address", type=parse_http_address,
                        default=env("ROUTER_METRICS_ADDRESS") or f"{pod_ip or '0.0.0.0'}:{ADAPTOR_PORT}",
                        help=f"HOST:PORT of the adaptor's /metrics, /healthz, /readyz [$ROUTER_METRICS_ADDRESS] "
                             f"(default $POD_IP:{ADAPTOR_PORT})")
    parser.add_argument("--router-binary", default=env("ROUTER_BIN"),
                        help="the router executable [$ROUTER_BIN]")
    parser.add_argument("--log-level", default=env("CONSOLE_LOG_LEVEL", "INFO"), help="[$CONSOLE_LOG_LEVEL]")


def _state_dir(path: Path) -> Path:
    """``path`` made absolute and created (an emptyDir volume's directory in a Pod); ``OSError`` when it cannot be."""
    path = Path(os.path.abspath(path))
    path.mkdir(parents=True, exist_ok=True)
    return path


async def _publish(adaptor: RustAdaptor, publisher: StatusPublisher) -> None:
    """Run ``publisher`` with the adaptor's network status, waking it whenever the adaptor writes a new one."""
    async def follow() -> None:
        while True:
            await adaptor.status_changed.wait()
            adaptor.status_changed.clear()
            publisher.changed()
    follower = asyncio.create_task(follow(), name="network-status-follower")
    try:
        await publisher.run(lambda: adaptor.status)
    finally:
        await cancel_and_wait(follower, STEP_SECONDS)


async def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=str(args.log_level).upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.namespace:
        print("service-network run router: no namespace: set POD_NAMESPACE or --namespace", file=sys.stderr)
        return 2
    if args.bind_address and not is_ip_address(args.bind_address):
        print(f"service-network run router: --bind-address {args.bind_address[:100]!r} is not an IP address",
              file=sys.stderr)
        return 2
    metrics = args.metrics_address if not isinstance(args.metrics_address, str) else parse_http_address(args.metrics_address)
    try:
        state_dir = _state_dir(args.state_dir)
    except OSError as e:
        print(f"service-network run router: {e}", file=sys.stderr)
        return 2
    # a restarted container: the router runs its last document and answers the kubelet's probes before the
    # imports below (early.py)
    early = await start_early(state_dir, args.bind_address or None, args.router_binary, metrics)
    try:
        if early is not None:
            # imported beside the event loop, which meanwhile answers the kubelet's probes
            await asyncio.to_thread(_import_adaptor)
        return await _run(args, state_dir, metrics, early)
    finally:
        if early is not None and early.server is not None:
            early.abort()       # the adaptor never took it over


def _import_adaptor() -> None:
    """What the adaptor needs beyond ``early.py``: most of the container's start."""
    for module in ("operator_runtime.config", ".kube", ".options", ".rust_adaptor", ".status_publisher"):
        importlib.import_module(module, __package__)


async def _run(args: argparse.Namespace, state_dir: Path, metrics: tuple[str, int] | None,
               early: EarlyRouter | None) -> int:
    from operator_runtime.config import ConfigError, make_api

    from .kube import ConfigMapSource, SecretTlsResolver
    from .options import AdaptorOptions
    from .rust_adaptor import adaptor_for
    from .status_publisher import StatusPublisher

    try:
        api = make_api(args.kubeconfig)
    except ConfigError as e:
        print(f"service-network run router: {e}", file=sys.stderr)
        return 2
    source = ConfigMapSource(api, args.namespace, args.config_map, ROUTER_CONFIG_KEY)
    resolver = SecretTlsResolver(api, args.namespace, on_change=source.refresh)
    stop = asyncio.Event()
    # warm_start: a restarted container's router runs its last document again at once (the state directory is the
    # Pod's emptyDir), before the API server has answered anything
    options = AdaptorOptions(state_dir=state_dir, metrics_address=metrics, tls_resolver=resolver,
                             bind_host=args.bind_address or None, router_binary=args.router_binary,
                             warm_start=True, early=early)
    log.info("router of namespace %s from ConfigMap %s, bound to %s", args.namespace, args.config_map,
             args.bind_address or "all interfaces")
    publishing: asyncio.Task[None] | None = None
    try:
        adaptor = adaptor_for(source, options)
        # what every router of the site listened for before (a new Pod has no network.json of its own)
        publisher = StatusPublisher(
            api, args.namespace, NETWORK_STATUS_NAME, f"{args.config_map}.json",
            field_manager=f"service-network-router-{args.config_map}",
            on_synced=lambda data: adaptor.routes.remember(listening_in_status_texts(data.values())))
        with StopSignals(stop, kill=adaptor.kill, on_hangup=source.refresh):
            publishing = asyncio.create_task(_publish(adaptor, publisher), name="network-status-publisher")
            await adaptor.run(stop)
    except RouterError as e:
        print(f"service-network run router: {e}", file=sys.stderr)
        return exit_code(e)
    except KubeError as e:
        print(f"service-network run router: {e}", file=sys.stderr)
        return 1
    finally:
        # the router process is stopped (adaptor.run); what is left talks to the API server, which may be gone or
        # slow
        steps = [bounded(resolver.stop(), STEP_SECONDS, "stopping the Secrets watch"),
                 bounded(source.stop(), STEP_SECONDS, "stopping the ConfigMap watch")]
        if publishing is not None:
            steps.append(cancel_and_wait(publishing, STEP_SECONDS))
        await asyncio.gather(*steps)
        await bounded(api.close(), STEP_SECONDS, "closing the API client")
        before_exit()
    return 0
