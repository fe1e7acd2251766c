"""What the router's protocol observers cost: the same HTTP/1 traffic through three Listeners of one Rust router,
``observer: none``, ``http1`` and ``auto``, alternating in the same run, with direct connections to the backends as
the reference; JSON on stdout.

Measured, each as ``--repeats`` rounds of direct, none, http1 and auto in turn (medians reported, all values kept):
- ``requests``: HTTP/1 requests per second on kept-alive connections (wrk, ``--clients`` connections, an HAProxy
  that answers every request itself: ``haproxy_baseline.http_responder``): the observer parses every request and
  response head;
- ``connections``: new connections per second (wrk with ``Connection: close``): a session per connection;
- ``upload``: one HTTP/1 POST whose body streams to a sink, Gbit/s: an observed connection is copied through user
  space for its whole life (``none`` may splice after 64 KiB);
and the router's CPU time per request, per connection and per GB (``/proc``), which varies less than rates on a
shared machine.

Goal (issue 25): with observation on (``http1``, ``auto``), <= 10 % fewer requests/s and new connections/s than
``none``; the upload throughput is reported beside it. Loopback only (router 127.0.76.200, backends 127.0.50.201);
every loop is bounded in count and time. Run it alone: ``flock /tmp/heavy.lock python bench/observer_bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import dataplane_bench as dp
import haproxy_baseline as hb
import router_bench as rb

HOST = "127.0.76.200"
MODES = ("none", "http1", "auto")
MEASUREMENTS = ("requests", "connections", "upload")
CHUNK = 1024 * 1024


def _document(backends: dict[str, int]) -> dict[str, Any]:
    doc = dp._doc("observed")
    doc["connectors"] = [{"name": k, "routingKey": k, "port": backends[k], "targets": [{"host": rb.BACKEND}]}
                         for k in ("http", "sink")]
    doc["listeners"] = [{"name": f"{k}-{mode}", "routingKey": k, "host": HOST, "port": rb._free_port(HOST),
                         "observer": mode} for k in ("http", "sink") for mode in MODES]
    return doc


def _wrk(wrk: str, port: int, host: str, seconds: float, clients: int, close: bool) -> dict[str, float]:
    command = [wrk, "-t", "2", "-c", str(clients), "-d", f"{max(1, round(seconds))}s"]
    if close:
        command += ["-H", "Connection: close"]
    out = subprocess.run([*command, f"http://{host}:{port}/"], capture_output=True, text=True,
                         timeout=seconds + 60, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])  # type: ignore[index]
    total = int(re.search(r"(\d+) requests in", out)[1])  # type: ignore[index]
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {"per_s": round(rate), "requests": total,
            "socket_errors": sum(int(x) for x in errors.groups()) if errors else 0}


def _upload(port: int, host: str, seconds: float, max_bytes: int) -> dict[str, float]:
    """One POST with a Content-Length of ``max_bytes``; its body is sent for ``seconds`` (then the connection is
    half-closed: the sink answers with what it counted, head included)."""
    data = memoryview(bytes(CHUNK))
    head = f"POST /upload HTTP/1.1\r\nHost: bench\r\nContent-Length: {max_bytes}\r\n\r\n".encode()
    with socket.create_connection((host, port), timeout=30) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * CHUNK)
        s.sendall(head)
        sent = 0
        start = time.perf_counter()
        while sent + CHUNK <= max_bytes and time.perf_counter() - start < seconds:
            s.sendall(data)
            sent += CHUNK
        s.shutdown(socket.SHUT_WR)
        received = int.from_bytes(s.recv(8), "big")
        elapsed = time.perf_counter() - start
    if received != sent + len(head):
        raise RuntimeError(f"sink received {received} of {sent + len(head)} bytes")
    return {"bytes": sent, "seconds": round(elapsed, 3), "gbit_per_s": round(sent * 8 / elapsed / 1e9, 2)}


def _rounds(args: argparse.Namespace, sides: dict[str, tuple[int, str]], pids: set[int], run: Any
            ) -> dict[str, list[tuple[dict[str, Any], float]]]:
    out: dict[str, list[tuple[dict[str, Any], float]]] = {side: [] for side in sides}
    for _ in range(args.repeats):
        for side, (port, host) in sides.items():
            before = dp._cpu(pids)
            result = run(port, host)
            out[side].append((result, dp._cpu(pids) - before))
    return out


def _summarize(runs: dict[str, list[tuple[dict[str, Any], float]]], key: str, unit: str, per: str,
               scale: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side, results in runs.items():
        values = [r[key] for r, _ in results]
        out[side] = {key: dp._median(values), f"all_{key}": values}
        if side != "direct":
            amount = sum(r[per] for r, _ in results)
            out[side][unit] = round(sum(c for _, c in results) / amount * scale, 3) if amount else None
    return out


def _measure(args: argparse.Namespace, wrk: str, backends: dict[str, int], listeners: dict[str, int],
             pids: set[int]) -> dict[str, Any]:
    def sides(kind: str) -> dict[str, tuple[int, str]]:
        out = {"direct": (backends[kind], rb.BACKEND)}
        out.update({mode: (listeners[f"{kind}-{mode}"], HOST) for mode in MODES})
        return out

    result: dict[str, Any] = {}
    if "requests" in args.only:
        dp._progress("requests on kept-alive connections")
        runs = _rounds(args, sides("http"), pids,
                       lambda p, h: _wrk(wrk, p, h, args.seconds, args.clients, close=False))
        result["requests"] = {"clients": args.clients,
                              **_summarize(runs, "per_s", "router_cpu_us_per_request", "requests", 1e6)}
    if "connections" in args.only:
        dp._progress("new connections")
        runs = _rounds(args, sides("http"), pids,
                       lambda p, h: _wrk(wrk, p, h, args.seconds, args.clients, close=True))
        result["connections"] = {"clients": args.clients,
                                 **_summarize(runs, "per_s", "router_cpu_us_per_connection", "requests", 1e6)}
    if "upload" in args.only:
        dp._progress("upload")
        max_bytes = int(args.max_gib * 1024**3)
        runs = _rounds(args, sides("sink"), pids, lambda p, h: _upload(p, h, args.seconds, max_bytes))
        result["upload"] = _summarize(runs, "gbit_per_s", "router_cpu_seconds_per_gb", "bytes", 1e9)
    return result


def _ratios(result: dict[str, Any]) -> dict[str, Any]:
    ratios: dict[str, Any] = {}
    for measure, key in (("requests", "per_s"), ("connections", "per_s"), ("upload", "gbit_per_s")):
        if measure in result and result[measure]["none"][key]:
            for mode in ("http1", "auto"):
                ratios[f"{measure}_{mode}_vs_none"] = round(result[measure][mode][key] / result[measure]["none"][key], 3)
    goals = {f"{m}_{mode}_at_least_0.9": ratios[f"{m}_{mode}_vs_none"] >= 0.9
             for m in ("requests", "connections") for mode in ("http1", "auto") if f"{m}_{mode}_vs_none" in ratios}
    return {"ratios": ratios, "goals": goals}


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    haproxy = hb.find_haproxy()
    wrk = hb.find_wrk()
    state = Path(tempfile.mkdtemp(prefix="observer-bench-", dir="/tmp"))
    backends = {k: rb._free_port(rb.BACKEND) for k in ("http", "sink")}
    procs: list[subprocess.Popen[Any]] = []
    try:
        procs.append(hb.http_responder(haproxy, rb.BACKEND, backends["http"], state))
        procs.append(rb._start_backend("sink", rb.BACKEND, backends["sink"]))
        docs = {"west": _document(backends)}
        async with dp._network(state / "routers", "rust", docs, haproxy) as (adaptors, listeners):
            pids = set(dp._router_pids(adaptors).values())
            result = await asyncio.to_thread(_measure, args, wrk, backends, listeners, pids)
        result.update(_ratios(result))
        result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "load_average": os.getloadavg(), "repeats": args.repeats, "seconds": args.seconds}
        return result
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(state, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each run")
    parser.add_argument("--max-gib", type=float, default=20.0, help="cap of bytes per upload run")
    parser.add_argument("--clients", type=int, default=50, help="concurrent wrk connections")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of direct, none, http1 and auto in turn")
    parser.add_argument("--only", default=",".join(MEASUREMENTS),
                        help=f"comma-separated subset of {','.join(MEASUREMENTS)}")
    args = parser.parse_args()
    args.only = {m.strip() for m in args.only.split(",") if m.strip()}
    if args.only - set(MEASUREMENTS) or args.repeats < 1 or args.seconds <= 0:
        parser.error("unknown measurement, or repeats/seconds out of range")
    print(json.dumps(asyncio.run(_main(args)), indent=2))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
