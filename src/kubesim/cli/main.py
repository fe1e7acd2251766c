"""`kubesim serve --host H --port P --kubeconfig PATH`: run the API server until SIGINT/SIGTERM;
`kubesim node stop|start|restart NODE` / `kubesim node list`: control the nodes of a running kubesim."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import signal
import sys
from pathlib import Path
from typing import Any

from kubesim.addresses import AddressBlockError
from kubesim.errors import ApiError
from kubesim.registry.services import parse_node_port_range
from kubesim.sim import KubeSim
from kubesim.store.persist import StoreFileError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubesim", description="A local Kubernetes API server for development."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the API server until SIGINT/SIGTERM")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    serve.add_argument(
        "--kubeconfig", type=Path, required=True, help="where to write the kubeconfig (bearer token)"
    )
    serve.add_argument("--token", default=None, help="bearer token (random when omitted)")
    serve.add_argument("--nodes", type=int, default=0, help="simulated nodes (0 = API server only)")
    serve.add_argument("--state-dir", type=Path, default=None)
    serve.add_argument(
        "--store", type=Path, default=None, metavar="FILE",
        help="keep the cluster in this SQLite file and resume what it holds when it exists (default: in memory)"
    )
    serve.add_argument("--watch-window", type=int, default=10_000, help="retained watch events")
    serve.add_argument(
        "--address-block",
        type=_block,
        default=None,
        help="loopback block 127.N.0.0/16 (N in 1-254) for every address the cluster hands out; "
        "default: the lowest block no other kubesim holds",
    )
    serve.add_argument(
        "--service-cidr", default=None, help="range for Service clusterIPs (default: the block's 127.N.16.0/20)"
    )
    serve.add_argument(
        "--service-node-port-range",
        type=_node_port_range,
        default=None,
        help="FIRST-LAST range for Service nodePorts (default 30000-32767, as the apiserver)",
    )
    serve.add_argument(
        "--load-balancer-ips", default=None, help="LB pool: comma-separated IPs, a-b ranges or CIDRs"
    )
    serve.add_argument("--load-balancer-hostnames", default=None, help="LB hostnames, comma-separated")
    serve.add_argument(
        "--node-external-ips", action="store_true", help="give every node an ExternalIP 127.B.2.N"
    )
    serve.add_argument(
        "--node-internal-dns", action="store_true", help="give every node InternalDNS <name>.kubesim.internal"
    )
    serve.add_argument(
        "--insecure-http", action="store_true", help="serve plain HTTP (kubectl then sends no token)"
    )
    serve.add_argument("--faults", default=None, help="fault settings as JSON (see kubesim.faults)")
    serve.add_argument(
        "--no-installed-images", action="store_true",
        help="do not load the images installed packages provide (entry points 'kubesim.images') onto the nodes"
    )
    serve.add_argument(
        "--no-host-names", action="store_true",
        help="no DNS server and SOCKS5 proxy for cluster names on the block's 127.B.0.10 / 127.B.0.11"
    )
    serve.add_argument(
        "--default-toleration-seconds", type=int, default=300,
        help="tolerationSeconds of the not-ready/unreachable NoExecute tolerations every Pod gets (default 300)"
    )
    node = sub.add_parser("node", help="stop, start or restart a simulated node of a running kubesim")
    node.add_argument("action", choices=["stop", "start", "restart", "list"])
    node.add_argument("node", nargs="?", help="the node (not for list)")
    node.add_argument("--kubeconfig", type=Path, default=None,
                      help="the running kubesim's kubeconfig (default $KUBECONFIG, else ~/.kube/config)")
    return parser


def _node_port_range(text: str) -> tuple[int, int]:
    try:
        return parse_node_port_range(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _block(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a block number: {text[:20]!r}") from None


def cluster_options(args: argparse.Namespace) -> dict[str, Any]:
    """Simulated-cluster options given on the command line (absent ones keep the cluster's defaults)."""
    options: dict[str, Any] = {}
    if args.load_balancer_ips:
        options["load_balancer_ips"] = [x.strip() for x in args.load_balancer_ips.split(",") if x.strip()]
    if args.load_balancer_hostnames:
        options["load_balancer_hostnames"] = [
            x.strip() for x in args.load_balancer_hostnames.split(",") if x.strip()
        ]
    if args.node_external_ips:
        options["node_external_ips"] = True
    if args.node_internal_dns:
        options["node_internal_dns"] = True
    if options and not args.nodes:
        raise ValueError("cluster options (--load-balancer-*, --node-*) need --nodes N")
    return options


def load_installed_images(runtime: Any) -> list[str]:
    """Run every ``kubesim.images`` entry point (``function(runtime)``: registers an image's handler on the nodes),
    as ``kind load`` puts a project's image on kind's nodes; the names of those that loaded."""
    loaded = []
    for entry in importlib.metadata.entry_points(group="kubesim.images"):
        try:
            entry.load()(runtime)
        except Exception as error:  # a broken plugin must not stop the cluster; say so
            print(f"kubesim: image plugin {entry.name} failed: {type(error).__name__}: {str(error)[:200]}",
                  file=sys.stderr, flush=True)
            continue
        loaded.append(entry.name)
    return loaded


def host_name_lines(sim: KubeSim) -> list[str]:
    """How to reach cluster names from the host (when the cluster serves them)."""
    if sim.dns_address is None or sim.proxy_address is None:
        return []
    (dns_host, dns_port), (proxy_host, proxy_port) = sim.dns_address, sim.proxy_address
    port = "" if dns_port == 53 else f" -p {dns_port}"
    return [f"cluster DNS at {dns_host}:{dns_port} (dig @{dns_host}{port} <service>.<namespace>.svc.cluster.local)",
            f"SOCKS5 proxy resolving cluster names at {proxy_host}:{proxy_port} (curl --proxy "
            f"socks5h://{proxy_host}:{proxy_port} http://<service>.<namespace>.svc.cluster.local:<port>)"]


async def serve(args: argparse.Namespace) -> int:
    faults = json.loads(args.faults) if args.faults else None
    from kubesim.cluster.runtime import default_registry

    # images go on the nodes before they start, so the Pods of a resumed cluster run at once
    runtime = default_registry()
    loaded = [] if not args.nodes or args.no_installed_images else load_installed_images(runtime)
    nodes_runtime: dict[str, Any] = {"runtime": runtime} if args.nodes else {}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with KubeSim(
        host=args.host,
        port=args.port,
        token=args.token,
        kubeconfig_path=args.kubeconfig,
        nodes=args.nodes,
        state_dir=args.state_dir,
        watch_window=args.watch_window,
        service_cidr=args.service_cidr,
        service_node_port_range=args.service_node_port_range,
        address_block=args.address_block,
        faults=faults,
        tls=not args.insecure_http,
        host_names=bool(args.nodes) and not args.no_host_names,
        store_path=args.store,
        default_toleration_seconds=args.default_toleration_seconds,
        **cluster_options(args),
        **nodes_runtime,
    ) as sim:
        print(sim.url, flush=True)
        print(f"kubesim: {sim.address_block.describe(node_external_ips=bool(args.node_external_ips))}",
              file=sys.stderr, flush=True)
        if args.store is not None:
            what = f"resumed {sim.resumed} objects from" if sim.resumed else "keeping the cluster in"
            print(f"kubesim: {what} {args.store}", file=sys.stderr, flush=True)
        if loaded:
            print(f"kubesim: images on the nodes from installed packages: {', '.join(loaded)}", file=sys.stderr,
                  flush=True)
        for line in host_name_lines(sim):
            print(f"kubesim: {line}", file=sys.stderr, flush=True)
        await stop.wait()
    return 0


def node_command(args: argparse.Namespace) -> int:
    from kubesim.cli.node import NodeCommandError, run

    if args.action != "list" and not args.node:
        print(f"kubesim: node {args.action} needs the name of a node", file=sys.stderr)
        return 2
    try:
        lines = asyncio.run(run(args.action, args.node, args.kubeconfig))
    except NodeCommandError as error:
        print(f"kubesim: {error}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "node":
        return node_command(args)
    if args.command == "serve":
        try:
            return asyncio.run(serve(args))
        except (ValueError, ApiError, AddressBlockError, StoreFileError) as e:
            print(f"kubesim: {e}", file=sys.stderr)
            return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
