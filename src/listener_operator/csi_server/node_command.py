"""``listener-operator run node``: the CSI Identity + Node services for one node, plus health/metrics.

Next to the CSI socket it serves ``/metrics`` (CSI calls by method and code, latencies, mounts waiting),
``/healthz`` (the process answers) and ``/readyz`` (socket served and API server reachable, see ``readiness``) over
HTTP, by default on port 8081 so that it does not clash with ``run controller`` (8080) on a host network.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal

from listener_operator.csi_server.metrics import CsiMetrics
from listener_operator.csi_server.node import DEFAULT_LISTENER_WAIT_SECONDS
from listener_operator.csi_server.readiness import NodeReadiness
from listener_operator.csi_server.server import node_servicers, socket_path_from_endpoint, start_csi_server
from listener_operator.observability import (
    LOG_FORMATS,
    HealthServer,
    MetricsRegistry,
    parse_http_address,
    setup_logging,
)

__all__ = ["DEFAULT_HTTP_ADDRESS", "add_arguments", "run"]

log = logging.getLogger(__name__)

#: Seconds in-flight calls get to finish on SIGTERM.
SHUTDOWN_GRACE_SECONDS = 5.0
#: One above the controller's 8080: both may share a host network.
DEFAULT_HTTP_ADDRESS = "0.0.0.0:8081"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--csi-endpoint", default=os.environ.get("CSI_ENDPOINT"),
                        help="unix:///path/csi.sock to serve on (env CSI_ENDPOINT)")
    parser.add_argument("--node-name", default=os.environ.get("KUBERNETES_NODE_NAME"),
                        help="this node's name, the CSI node id (env KUBERNETES_NODE_NAME)")
    parser.add_argument("--kubelet-dir", default=os.environ.get("KUBELET_DIR", "/var/lib/kubelet"),
                        help="kubelet's root directory; every target path must lie inside it (env KUBELET_DIR)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, in-cluster, "
                                                           "~/.kube/config)")
    parser.add_argument("--listener-wait-seconds", type=float, default=DEFAULT_LISTENER_WAIT_SECONDS,
                        help="how long a mount waits for a Listener address before failing with UNAVAILABLE")
    parser.add_argument("--http-address", type=parse_http_address,
                        default=os.environ.get("HTTP_ADDRESS") or DEFAULT_HTTP_ADDRESS,
                        help="HOST:PORT for /metrics, /healthz, /readyz (port 0: any free port) "
                             f"(env HTTP_ADDRESS, default {DEFAULT_HTTP_ADDRESS})")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=os.environ.get("CONSOLE_LOG_FORMAT", "plain"),
                        help="console log format (env CONSOLE_LOG_FORMAT)")
    parser.add_argument("--log-level", default=os.environ.get("CONSOLE_LOG_LEVEL", "INFO"),
                        help="console log level (env CONSOLE_LOG_LEVEL)")


async def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, args.log_level)
    if not args.csi_endpoint:
        log.error("--csi-endpoint (or CSI_ENDPOINT) is required")
        return 2
    if not args.node_name:
        log.error("--node-name (or KUBERNETES_NODE_NAME) is required")
        return 2
    from operator_runtime.config import make_api

    try:
        socket_path = socket_path_from_endpoint(args.csi_endpoint)
    except ValueError as error:
        log.error("%s", error)
        return 2
    api = make_api(args.kubeconfig)
    registry = MetricsRegistry()
    metrics = CsiMetrics(registry.registry)
    readiness = NodeReadiness(api, args.node_name, socket_path)
    health = HealthServer(registry, ready=readiness.check, not_ready_detail=lambda: readiness.detail)
    server = None
    servicers = None
    try:
        host, port = args.http_address
        try:
            port = await health.start(host, port)
        except OSError as error:
            log.error("cannot serve /metrics, /healthz, /readyz on %s:%d: %s", host, port, error)
            return 1
        log.info("serving /metrics, /healthz, /readyz on %s:%d", host, port)
        servicers = node_servicers(api, args.node_name, args.kubelet_dir,
                                   listener_wait_seconds=args.listener_wait_seconds, metrics=metrics)
        server = await start_csi_server(args.csi_endpoint, servicers, metrics=metrics)
        readiness.csi_serving = True
        node = servicers.node
        assert node is not None
        try:
            await node.start()  # volumes published before this process started stay current too
        except Exception as error:  # the API server may be down at start; new publishes are tracked anyway
            log.warning("could not find the listener volumes published earlier: %s", error)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        log.info("shutting down the CSI node service")
        readiness.csi_serving = False
        if server is not None:
            await server.stop(SHUTDOWN_GRACE_SECONDS)
            with contextlib.suppress(FileNotFoundError):
                socket_path.unlink()
        if servicers is not None and servicers.node is not None:
            await servicers.node.close()
        await health.stop()
        await api.close()
    return 0
