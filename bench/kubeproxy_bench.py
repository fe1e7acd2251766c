"""Benchmark: kubesim's kube-proxy hop against a direct connection, in the same run (prints JSON).

Three processes, so that the proxy does not share an event loop with either end: this one runs kubesim (API
server, one node, kube-proxy) with a selector-less Service whose EndpointSlice names a backend server; a backend
process serves on a loopback address of the cluster's block; a client process measures, against the backend
directly and through the Service's clusterIP:

- connection rate: ``--connections`` new connections (``--concurrency`` at a time), each sending one byte and
  reading a one-byte answer before closing;
- throughput: one stream of ``--megabytes`` MB sent, half-closed, and the byte count read back.

Every address is on loopback; every loop is bounded in count and in time (``--max-seconds`` per measurement).
Goal (issue 9): the proxied connection rate is at least a third of the direct one.

    flock /tmp/heavy.lock python bench/kubeproxy_bench.py [--connections 3000] [--concurrency 20] [--megabytes 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHUNK = 256 * 1024


# ----------------------------------------------------------------------------------------------- backend role


async def backend(host: str) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            mode = await reader.read(1)
            if mode == b"r":  # rate: one byte back, then close
                writer.write(b"k")
            elif mode == b"s":  # stream: count everything until the client half-closes
                total = 0
                while chunk := await reader.read(CHUNK):
                    total += len(chunk)
                writer.write(struct.pack("!Q", total))
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, host, 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    server.close()


# ------------------------------------------------------------------------------------------------ client role


async def connection_rate(host: str, port: int, count: int, concurrency: int, max_seconds: float) -> dict[str, Any]:
    done = failed = begun = 0
    started = time.perf_counter()
    deadline = started + max_seconds

    async def worker() -> None:
        nonlocal done, failed, begun
        while begun < count and time.perf_counter() < deadline:
            begun += 1
            try:
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(b"r")
                if await reader.read(1) == b"k":
                    done += 1
                else:
                    failed += 1
                writer.close()
                await writer.wait_closed()
            except OSError:
                failed += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {"connections": done, "failed": failed, "seconds": round(elapsed, 3),
            "connections_per_s": round(done / elapsed, 1)}


async def throughput(host: str, port: int, megabytes: int, max_seconds: float) -> dict[str, Any]:
    payload = b"x" * CHUNK
    target = megabytes * 1024 * 1024
    reader, writer = await asyncio.open_connection(host, port)
    started = time.perf_counter()
    writer.write(b"s")
    sent = 0
    while sent < target and time.perf_counter() - started < max_seconds:
        writer.write(payload)
        await writer.drain()
        sent += len(payload)
    writer.write_eof()
    counted = struct.unpack("!Q", await reader.readexactly(8))[0]
    elapsed = time.perf_counter() - started
    writer.close()
    return {"bytes": sent, "counted_by_backend": counted, "seconds": round(elapsed, 3),
            "megabytes_per_s": round(sent / elapsed / 1e6, 1)}


async def client(args: argparse.Namespace) -> None:
    routes = {"direct": (args.direct_host, args.direct_port), "kube_proxy": (args.proxy_host, args.proxy_port)}
    results: dict[str, Any] = {name: {} for name in routes}
    for round_ in range(args.rounds):  # alternate, so drift in machine load hits both routes alike
        for name, (host, port) in routes.items():
            rate = await connection_rate(host, port, args.connections, args.concurrency, args.max_seconds)
            stream = await throughput(host, port, args.megabytes, args.max_seconds)
            best = results[name]
            if rate["connections_per_s"] > best.get("connection_rate", {}).get("connections_per_s", 0):
                best["connection_rate"] = rate
            if stream["megabytes_per_s"] > best.get("throughput", {}).get("megabytes_per_s", 0):
                best["throughput"] = stream
            best["rounds"] = round_ + 1
    print(json.dumps(results), flush=True)


# ------------------------------------------------------------------------------------------------ main role


async def _child(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, __file__, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from kubesim.sim import KubeSim

    state = Path(tempfile.mkdtemp(prefix="kpb", dir="/tmp"))
    backend_proc: asyncio.subprocess.Process | None = None
    try:
        async with KubeSim(nodes=1, state_dir=state, tls=False) as sim:
            backend_host = sim.address_block.client_ip(10)
            backend_proc = await _child("--role", "backend", "--host", backend_host)
            assert backend_proc.stdout is not None
            backend_port = int(await asyncio.wait_for(backend_proc.stdout.readline(), 30))
            await sim.api.create("services", {
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": "bench", "namespace": "default"},
                "spec": {"ports": [{"name": "tcp", "port": 80}]}}, "default")
            await sim.api.create("endpointslices.discovery.k8s.io", {
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "bench-1", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "bench"}},
                "addressType": "IPv4", "ports": [{"name": "tcp", "port": backend_port, "protocol": "TCP"}],
                "endpoints": [{"addresses": [backend_host], "conditions": {"ready": True}}]}, "default")
            service = await sim.api.get("services", "bench", "default")
            cluster_ip = service["spec"]["clusterIP"]
            deadline = time.monotonic() + 10
            while (cluster_ip, 80) not in sim.cluster.proxy.listening():  # no watch exists for a bound socket
                if time.monotonic() > deadline:
                    raise RuntimeError("kube-proxy did not listen on the Service within 10 s")
                await asyncio.sleep(0.01)
            client_proc = await _child(
                "--role", "client", "--direct-host", backend_host, "--direct-port", str(backend_port),
                "--proxy-host", cluster_ip, "--proxy-port", "80", "--connections", str(args.connections),
                "--concurrency", str(args.concurrency), "--megabytes", str(args.megabytes),
                "--rounds", str(args.rounds), "--max-seconds", str(args.max_seconds))
            out, _ = await client_proc.communicate()
            results = json.loads(out)
    finally:
        if backend_proc is not None and backend_proc.returncode is None:
            assert backend_proc.stdin is not None
            backend_proc.stdin.close()
            await asyncio.wait_for(backend_proc.wait(), 10)
        shutil.rmtree(state, ignore_errors=True)
    direct, proxied = results["direct"], results["kube_proxy"]
    rate_cost = direct["connection_rate"]["connections_per_s"] / max(proxied["connection_rate"]["connections_per_s"], 1e-9)
    throughput_cost = direct["throughput"]["megabytes_per_s"] / max(proxied["throughput"]["megabytes_per_s"], 1e-9)
    return {
        "benchmark": "kubeproxy",
        "parameters": {"connections": args.connections, "concurrency": args.concurrency,
                       "megabytes": args.megabytes, "rounds": args.rounds, "best_of_rounds": True},
        "machine": {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)},
        "direct": direct,
        "kube_proxy": proxied,
        "connection_rate_cost": round(rate_cost, 2),
        "throughput_cost": round(throughput_cost, 2),
        "goal": "connection_rate_cost <= 3",
        "goal_met": rate_cost <= 3,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["main", "backend", "client"], default="main")
    parser.add_argument("--host", default="")
    parser.add_argument("--direct-host", default="")
    parser.add_argument("--direct-port", type=int, default=0)
    parser.add_argument("--proxy-host", default="")
    parser.add_argument("--proxy-port", type=int, default=0)
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--megabytes", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    for host in (args.host, args.direct_host, args.proxy_host):
        if host and not host.startswith("127."):
            parser.error(f"only loopback addresses are used: {host}")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.role == "backend":
        asyncio.run(backend(arguments.host))
    elif arguments.role == "client":
        asyncio.run(client(arguments))
    else:
        print(json.dumps(asyncio.run(main(arguments)), indent=2))
