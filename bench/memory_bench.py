"""Memory given back: a router's RSS over many rounds of connections opened, carried and closed, beside HAProxy in
the same run; JSON on stdout.

Each round opens ``--connections`` (1,000) connections through West's Listener to a concurrent echo backend, sends
a byte on each and reads it back (so every hop carries each of them), holds them all, then closes them all. After
every round, once the routers had ``--settle`` seconds to tear the connections down, the RSS of each router
process (the Rust router, or the HAProxy baseline's process: ``haproxy_baseline.py``) is read from ``/proc``.
Topologies as ``dataplane_bench.py``: ``one_hop`` (client -> West -> backend) and ``two_hops`` (client -> West ->
Middle -> East -> backend over mutual TLS links).

Goal (issue 35): after ``--rounds`` (100) rounds, each router's RSS is at most 1.2x its RSS after round 10. Reported
per engine, topology and router: RSS after rounds 1, 10 and the last, the ratio last / round 10, and the series.

RSS per open idle connection (issue 45, goal: at most 4 KiB per router on the path): each round also reads every
router's RSS while its connections are held (``--settle`` seconds after the last one answered). "First hold": what
the first round's held connections added to the router's RSS at start, per connection; "later holds": the median
over the later rounds of what a round's held connections added to the RSS after the round before had closed, per
connection (what a router that has carried connections before pays for one more). ``--before PATH`` adds an engine
``rust_before``: another router binary (the version before a change) in the same run.
Loopback only (dataplane_bench's addresses); every loop is bounded in count and time. Run it alone:
``flock /tmp/heavy.lock python bench/memory_bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dataplane_bench as dp
import haproxy_baseline as hb
import router_bench as rb

GOAL_RATIO = 1.2


def _router_rss(adaptors: dict[str, Any]) -> dict[str, int]:
    """RSS per router (name -> bytes): the Rust router process, or the HAProxy process."""
    pids = dp._router_pids(adaptors)
    if set(pids) != set(adaptors):
        raise RuntimeError(f"no data-plane process for {sorted(set(adaptors) - set(pids))}")
    rss = {name: dp._rss({pid}) for name, pid in pids.items()}
    if gone := sorted(name for name, value in rss.items() if not value):
        raise RuntimeError(f"the data-plane process of {gone} is gone")
    return rss


def _round(host: str, port: int, count: int, deadline: float, while_held: Callable[[], Any]) -> Any:
    """One round: ``count`` connections opened through the router, each carrying a byte both ways, held (``while_held``
    called, its result returned), closed."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            if time.monotonic() > deadline:
                raise TimeoutError("the run's time is up")
            s = socket.create_connection((host, port), timeout=10)
            held.append(s)
            s.sendall(b"x")
            if s.recv(1) != b"x":
                raise RuntimeError("the echo did not come back through the router")
        return while_held()
    finally:
        for s in held:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()


def _series(args: argparse.Namespace, adaptors: dict[str, Any], host: str, port: int) -> dict[str, Any]:
    deadline = time.monotonic() + args.max_seconds
    rss: dict[str, list[int]] = {name: [] for name in adaptors}
    held: dict[str, list[int]] = {name: [] for name in adaptors}
    baseline = _router_rss(adaptors)

    def while_held() -> dict[str, int]:
        time.sleep(args.settle)
        return _router_rss(adaptors)

    for _ in range(args.rounds):
        for name, value in _round(host, port, args.connections, deadline, while_held).items():
            held[name].append(value)
        time.sleep(args.settle)
        for name, value in _router_rss(adaptors).items():
            rss[name].append(value)
    out: dict[str, Any] = {}
    for name, values in rss.items():
        tenth = values[min(9, len(values) - 1)]
        out[name] = {"rss_start_bytes": baseline[name], "rss_round_1_bytes": values[0],
                     "rss_round_10_bytes": tenth, "rss_last_bytes": values[-1],
                     "last_over_round_10": round(values[-1] / tenth, 3) if tenth else None,
                     **idle_per_connection(baseline[name], held[name], values, args.connections),
                     "series_mib": [round(v / 2**20, 1) for v in values]}
    return out


def idle_per_connection(start: int, held: list[int], closed: list[int], count: int) -> dict[str, float | None]:
    """KiB of RSS per open idle connection: the first round's held connections over the RSS at start, and the
    median over later rounds of each round's held connections over the RSS after the round before closed."""
    later = [(h - c) / count / 1024 for h, c in zip(held[1:], closed[:-1], strict=True)]
    return {"idle_kib_per_connection_first_hold": round((held[0] - start) / count / 1024, 1),
            "idle_kib_per_connection_later_holds": round(statistics.median(later), 1) if later else None}


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    haproxy = hb.find_haproxy()
    state = Path(tempfile.mkdtemp(prefix="mem-bench-", dir="/tmp"))
    backends = {k: rb._free_port(rb.BACKEND) for k in dp.KINDS}
    echo: subprocess.Popen[str] | None = None
    result: dict[str, Any] = {}
    try:
        echo = dp._concurrent_echo(rb.BACKEND, backends["idle"])
        for topology in args.topologies:
            for engine in args.engines + (["rust_before"] if args.before else []):
                kind, binary = ("rust", args.before) if engine == "rust_before" else (engine, None)
                docs = (dp._two_hop_documents(state / f"{topology}-{engine}", dp.HOSTS[kind], backends)
                        if topology == "two_hops" else dp._one_hop_documents(dp.HOSTS[kind], backends))
                async with dp._network(state / f"{topology}-{engine}-routers", kind, docs, haproxy, binary) as (
                        adaptors, listeners):
                    dp._progress(f"{topology} {engine}: {args.rounds} rounds of {args.connections} connections")
                    host = docs["west"]["listeners"][0]["host"]
                    measured = await asyncio.to_thread(_series, args, adaptors, host, listeners["idle"])
                result.setdefault(topology, {})[engine] = measured
        rust = [r["last_over_round_10"] for t in result.values() for r in t.get("rust", {}).values()]
        result["goal"] = {"last_over_round_10_at_most": GOAL_RATIO,
                          "rust_worst": max((r for r in rust if r is not None), default=None),
                          "met": bool(rust) and all(r is not None and r <= GOAL_RATIO for r in rust)}
        result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "haproxy": hb.version(haproxy), "load_average": os.getloadavg(),
                             "rounds": args.rounds, "connections": args.connections,
                             "before": args.before}
        return result
    finally:
        if echo is not None:
            echo.kill()
            echo.wait()
        shutil.rmtree(state, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--settle", type=float, default=0.5, help="seconds after a round before RSS is read")
    parser.add_argument("--topologies", type=lambda s: s.split(","), default=["one_hop", "two_hops"])
    parser.add_argument("--engines", type=lambda s: s.split(","), default=list(dp.ENGINES))
    parser.add_argument("--before", help="another router binary, run as engine rust_before in the same run")
    parser.add_argument("--max-seconds", type=float, default=1800.0, help="a run stops with an error after this")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_main(args)), indent=2))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
