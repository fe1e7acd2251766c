"""``service-network observer``: the network observer (API, metrics and console) for the network a router sees,
until SIGTERM/SIGINT. It reads one router (``--router URL``), the routers a ConfigMap lists
(``--routers-config-map``: what a NetworkObserver's Pod runs) or the site's router Pods of a namespace
(``--router-namespace``), the last two through the API; it serves HTTP, or HTTPS with
``--tls-cert``/``--tls-key``, and asks for basic authentication on the API with ``--htpasswd``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
import sys
from pathlib import Path

from operator_runtime.observability import parse_http_address

from .access import Htpasswd, ServerTls
from .routers import RouterConfigMap, RouterPods
from .server import serve

log = logging.getLogger("service_network.observer")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument("--router", default=env("OBSERVER_ROUTER", "http://127.0.0.1:9090"),
                        help="the router's metrics endpoint, whose /observe is read (default "
                             "http://127.0.0.1:9090); env OBSERVER_ROUTER")
    parser.add_argument("--router-namespace", default=env("OBSERVER_ROUTER_NAMESPACE"),
                        help="read the router Pods of the site in this namespace instead, found through the "
                             "Kubernetes API (in-cluster, $KUBECONFIG or --kubeconfig); env OBSERVER_ROUTER_NAMESPACE")
    parser.add_argument("--routers-config-map", default=env("OBSERVER_ROUTERS_CONFIG_MAP"),
                        help="instead: the ConfigMap (in --namespace) whose routers.json lists the routers' metrics "
                             "URLs, as a NetworkObserver's controller keeps it (read through the API; the observer "
                             "needs to read that one ConfigMap only); env OBSERVER_ROUTERS_CONFIG_MAP")
    parser.add_argument("--namespace", default=env("POD_NAMESPACE"),
                        help="the namespace of --routers-config-map (default $POD_NAMESPACE)")
    parser.add_argument("--kubeconfig", default=None,
                        help="with --router-namespace or --routers-config-map: the kubeconfig file")
    parser.add_argument("--listen", type=parse_http_address, default=env("OBSERVER_LISTEN", "127.0.0.1:8080"),
                        help="HOST:PORT of the API, /metrics and the console (default 127.0.0.1:8080, as "
                             "upstream's); env OBSERVER_LISTEN")
    parser.add_argument("--listen-metrics", type=parse_http_address, default=None,
                        help="HOST:PORT where /metrics alone is also served (as upstream's -listen-metrics)")
    parser.add_argument("--tls-cert", type=Path, default=None, help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", type=Path, default=None, help="the key of --tls-cert (PEM)")
    parser.add_argument("--htpasswd", type=Path, default=None,
                        help="ask for basic authentication on /api/ against this htpasswd file ({PLAIN}, {SHA} or "
                             "{SSHA} entries; re-read when it changes)")
    parser.add_argument("--interval", type=float, default=float(env("OBSERVER_INTERVAL", "2")),
                        help="seconds between reads of the router (default 2)")


def _fail(message: str) -> int:
    print(f"service-network observer: {message}", file=sys.stderr)
    return 2


async def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.routers_config_map and not args.namespace:
        return _fail("--routers-config-map needs --namespace (or $POD_NAMESPACE)")
    if not args.router_namespace and not args.routers_config_map and not args.router.startswith(
            ("http://", "https://")):
        return _fail(f"--router must be an http:// or https:// URL, not {args.router[:100]!r}")
    if args.interval <= 0:
        return _fail("--interval must be positive")
    if (args.tls_cert is None) != (args.tls_key is None):
        return _fail("--tls-cert and --tls-key go together")
    try:
        tls = ServerTls(args.tls_cert, args.tls_key) if args.tls_cert is not None else None
    except (OSError, ssl.SSLError) as e:
        return _fail(f"cannot load the TLS certificate {args.tls_cert}: {e}")
    users = Htpasswd(args.htpasswd) if args.htpasswd is not None else None
    tasks: list[asyncio.Task[None]] = []
    api = None
    routers: str | RouterPods | RouterConfigMap = args.router
    if args.router_namespace or args.routers_config_map:
        from operator_runtime.config import ConfigError, make_api
        try:
            api = make_api(args.kubeconfig)
        except ConfigError as e:
            return _fail(str(e))
        routers = (RouterConfigMap(api, args.namespace, args.routers_config_map) if args.routers_config_map
                   else RouterPods(api, args.router_namespace))
        tasks.append(asyncio.create_task(routers.run(), name="routers"))
    host, port = args.listen
    scheme = "https" if tls is not None else "http"
    tasks.append(asyncio.create_task(serve(
        routers, host, port, interval=args.interval, tls=tls, users=users, metrics_address=args.listen_metrics,
        ready=lambda p: print(f"console: {scheme}://{host}:{p}/", flush=True)), name="observer"))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stopping = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([*tasks, stopping], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopping and not task.cancelled() and task.exception() is not None:
                log.error("observer stopped: %s", task.exception())
                return 1
        return 0
    finally:
        for task in (*tasks, stopping):
            task.cancel()
        await asyncio.gather(*tasks, stopping, return_exceptions=True)
        if api is not None:
            await api.close()
