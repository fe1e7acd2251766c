"""``service-network observer --router URL``: the network observer (API, metrics and console) for the network a
router sees, until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal

from operator_runtime.observability import parse_http_address

from .server import serve

log = logging.getLogger("service_network.observer")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument("--router", default=env("OBSERVER_ROUTER", "http://127.0.0.1:9090"),
                        help="the router's metrics endpoint, whose /observe is read (default "
                             "http://127.0.0.1:9090); env OBSERVER_ROUTER")
    parser.add_argument("--listen", type=parse_http_address, default=env("OBSERVER_LISTEN", "127.0.0.1:8080"),
                        help="HOST:PORT of the API, /metrics and the console (default 127.0.0.1:8080, as "
                             "upstream's); env OBSERVER_LISTEN")
    parser.add_argument("--interval", type=float, default=float(env("OBSERVER_INTERVAL", "2")),
                        help="seconds between reads of the router (default 2)")


async def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.router.startswith(("http://", "https://")):
        log.error("--router must be an http:// or https:// URL, not %r", args.router[:100])
        return 2
    if args.interval <= 0:
        log.error("--interval must be positive")
        return 2
    host, port = args.listen
    task = asyncio.create_task(serve(args.router, host, port, interval=args.interval,
                                     ready=lambda p: print(f"console: http://{host}:{p}/", flush=True)))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return 0
