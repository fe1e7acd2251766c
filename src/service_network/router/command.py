"""``service-network router --config FILE``: run the router from a configuration file until SIGTERM/SIGINT;
SIGHUP re-reads the file and the TLS material it references. The stop is bounded (``shutdown.py``): a second
SIGTERM/SIGINT ends the process at once."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from operator_runtime.observability import parse_http_address

from .errors import RouterError, exit_code
from .options import AdaptorOptions
from .rust_adaptor import adaptor_for
from .shutdown import StopSignals, before_exit
from .sources import FileConfigSource

log = logging.getLogger("service_network.router")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument("--config", type=Path, default=env("ROUTER_CONFIG"), required=not env("ROUTER_CONFIG"),
                        help="router configuration (JSON, docs/service-network-router.md); env ROUTER_CONFIG")
    parser.add_argument("--state-dir", type=Path, default=Path(env("ROUTER_STATE_DIR", ".state/router")),
                        help="where the control socket, TLS material and network.json are kept (default "
                             ".state/router); "
                             "env ROUTER_STATE_DIR")
    parser.add_argument("--metrics-address", type=parse_http_address, default=env("ROUTER_METRICS_ADDRESS"),
                        help="HOST:PORT of the adaptor's /metrics, /healthz, /readyz (port 0: any free port; "
                             "default: not served); env ROUTER_METRICS_ADDRESS")
    parser.add_argument("--router-binary", default=env("ROUTER_BIN"),
                        help="the router executable (default: the installed service-network-router); "
                             "env ROUTER_BIN")
    parser.add_argument("--log-level", default=env("CONSOLE_LOG_LEVEL", "INFO"), help="log level (default INFO)")


def _options(args: argparse.Namespace, metrics: tuple[str, int] | None) -> AdaptorOptions:
    return AdaptorOptions(state_dir=Path(os.path.abspath(args.state_dir)), metrics_address=metrics,
                          router_binary=args.router_binary)


async def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=str(args.log_level).upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    metrics = args.metrics_address
    if isinstance(metrics, str):
        metrics = parse_http_address(metrics)
    source = FileConfigSource(Path(args.config))
    stop = asyncio.Event()
    try:
        adaptor = adaptor_for(source, _options(args, metrics))
        with StopSignals(stop, kill=adaptor.kill, on_hangup=source.refresh):
            await adaptor.run(stop)
    except RouterError as e:
        print(f"service-network router: {e}", file=sys.stderr)
        return exit_code(e)
    finally:
        before_exit()
    return 0
