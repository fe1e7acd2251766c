"""Throughput and watch latency of the kubesim API server, printed as JSON.

Measures, over HTTP with a keep-alive aiohttp client (a thin client, so the figures are the server's):
creates/s, gets/s, merge patches/s, server-side applies/s, list time and deletes/s for N small ConfigMaps with C concurrent requests, and
the write-to-watch-event latency seen by W concurrent watchers (p50/p99/max).

By default the server runs as a subprocess (`kubesim serve`) so that client and server do not share one GIL, as
an operator benchmark would; `--in-process` runs `KubeSim` in this event loop instead.

    python bench/kubesim_bench.py                      # 10,000 objects, concurrency 32, 20 watchers
    python bench/kubesim_bench.py --objects 500 --watch-events 100   # quick run
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import platform
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

NAMESPACE = "bench"
WATCH_NAMESPACE = "bench-watch"


@dataclass
class Endpoint:
    url: str
    token: str
    ssl: ssl.SSLContext | bool  # trusts the kubeconfig's CA; True (default checks) for plain HTTP
    server_pid: int | None = None  # set when the server is a subprocess: its CPU time is then measurable


def process_cpu_seconds(pid: int | None) -> float | None:
    """User+system CPU time of a process from /proc (Linux), or None when unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def endpoint_from_kubeconfig(path: Path) -> Endpoint:
    config = yaml.safe_load(path.read_text())
    cluster = config["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority-data")
    context: ssl.SSLContext | bool = True
    if ca:
        context = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
    return Endpoint(cluster["server"], config["users"][0]["user"]["token"], context)


@contextlib.asynccontextmanager
async def subprocess_server(workdir: Path, tls: bool) -> AsyncIterator[Endpoint]:
    """`kubesim serve` on a free port; the URL is read from its kubeconfig once the file appears."""
    kubeconfig = workdir / "kubeconfig"
    script = Path(sys.executable).parent / "kubesim"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "kubesim.cli.main"]
    proc = await asyncio.create_subprocess_exec(
        *command,
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--kubeconfig",
        str(kubeconfig),
        *([] if tls else ["--insecure-http"]),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not kubeconfig.exists() or not kubeconfig.read_text().strip():
            if proc.returncode is not None or time.monotonic() > deadline:
                _, err = await proc.communicate()
                raise RuntimeError(f"kubesim serve did not start: {err.decode()}")
            await asyncio.sleep(0.05)
        endpoint = endpoint_from_kubeconfig(kubeconfig)
        endpoint.server_pid = proc.pid
        yield endpoint
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


@contextlib.asynccontextmanager
async def in_process_server(workdir: Path, tls: bool) -> AsyncIterator[Endpoint]:
    from kubesim.sim import KubeSim

    async with KubeSim(kubeconfig_path=workdir / "kubeconfig", tls=tls) as sim:
        assert sim.kubeconfig_path is not None
        yield endpoint_from_kubeconfig(sim.kubeconfig_path)


async def run_concurrently(count: int, concurrency: int, op: Callable[[int], Awaitable[None]]) -> float:
    """Run op(0..count-1) with `concurrency` workers; returns operations per second."""
    counter = iter(range(count))

    async def worker() -> None:
        for i in counter:
            await op(i)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count / (time.perf_counter() - start)


async def expect(resp: aiohttp.ClientResponse, status: int) -> None:
    if resp.status != status:
        raise RuntimeError(f"{resp.method} {resp.url} -> {resp.status}: {await resp.text()}")
    await resp.read()


async def throughput(
    session: aiohttp.ClientSession, endpoint: Endpoint, objects: int, concurrency: int
) -> dict[str, float]:
    """Per phase: operations/s seen by the client and, for a subprocess server, the server's CPU time per
    operation (independent of how loaded the shared machine is: 1e6 / that figure = ops/s one core can serve)."""
    collection = f"{endpoint.url}/api/v1/namespaces/{NAMESPACE}/configmaps"

    async def create(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "labels": {"i": str(i)}},
            "data": {"value": str(i)},
        }
        async with session.post(collection, json=body) as resp:
            await expect(resp, 201)

    async def get(i: int) -> None:
        async with session.get(f"{collection}/cm-{i}") as resp:
            await expect(resp, 200)

    async def patch(i: int) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        async with session.patch(
            f"{collection}/cm-{i}", data=json.dumps({"data": {"value": f"p{i}"}}), headers=headers
        ) as resp:
            await expect(resp, 200)

    async def apply(i: int) -> None:
        """Server-side apply, the operator's write path (managedFields bookkeeping included)."""
        headers = {"Content-Type": "application/apply-patch+yaml"}
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}"},
            "data": {"applied": "yes"},
        }
        async with session.patch(
            f"{collection}/cm-{i}", params={"fieldManager": "bench"}, data=json.dumps(body), headers=headers
        ) as resp:
            await expect(resp, 200)

    async def delete(i: int) -> None:
        async with session.delete(f"{collection}/cm-{i}") as resp:
            await expect(resp, 200)

    figures: dict[str, float] = {}

    async def phase(name: str, op: Callable[[int], Awaitable[None]]) -> None:
        cpu_before = process_cpu_seconds(endpoint.server_pid)
        figures[f"{name}_per_s"] = await run_concurrently(objects, concurrency, op)
        cpu_after = process_cpu_seconds(endpoint.server_pid)
        if cpu_before is not None and cpu_after is not None:
            figures[f"{name}_server_cpu_us_per_op"] = (cpu_after - cpu_before) / objects * 1e6

    await phase("creates", create)
    await phase("gets", get)
    await phase("patches", patch)
    await phase("applies", apply)
    start = time.perf_counter()
    async with session.get(collection) as resp:
        listed = await resp.json()
    figures["list_all_ms"] = (time.perf_counter() - start) * 1000
    if len(listed["items"]) != objects:
        raise RuntimeError(f"list returned {len(listed['items'])} of {objects} objects")
    await phase("deletes", delete)
    return figures


async def watch_latency(
    session: aiohttp.ClientSession, url: str, watchers: int, events: int
) -> dict[str, float]:
    """Each write is sent alone; latency = event received by a watcher - write request sent."""
    collection = f"{url}/api/v1/namespaces/{WATCH_NAMESPACE}/configmaps"
    async with session.get(collection) as resp:
        rv = (await resp.json())["metadata"]["resourceVersion"]
    sent: dict[str, float] = {}
    latencies: list[float] = []
    ready = 0
    all_ready = asyncio.Event()

    async def watch() -> None:
        nonlocal ready
        params = {"watch": "1", "resourceVersion": rv}
        async with session.get(collection, params=params, timeout=aiohttp.ClientTimeout(total=None)) as resp:
            ready += 1
            if ready == watchers:
                all_ready.set()
            seen = 0
            async for line in resp.content:
                received = time.perf_counter()
                event = json.loads(line)
                latencies.append(received - sent[event["object"]["metadata"]["name"]])
                seen += 1
                if seen == events:
                    return

    tasks = [asyncio.create_task(watch()) for _ in range(watchers)]
    await asyncio.wait_for(all_ready.wait(), 30)
    await asyncio.sleep(0.2)  # let every watch register with the server before the first write
    for i in range(events):
        name = f"w-{i}"
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        sent[name] = time.perf_counter()
        async with session.post(collection, json=body) as resp:
            await expect(resp, 201)
        await asyncio.sleep(0.002)  # isolated writes: measure latency, not queueing
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000

    return {
        "watchers": watchers,
        "watch_events": events,
        "watch_deliveries": len(ordered),
        "watch_latency_p50_ms": pct(50),
        "watch_latency_p99_ms": pct(99),
        "watch_latency_max_ms": ordered[-1] * 1000,
        "watch_latency_mean_ms": statistics.fmean(ordered) * 1000,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kubesim-bench-") as tmp:
        server = in_process_server if args.in_process else subprocess_server
        async with server(Path(tmp), not args.http) as endpoint:
            headers = {"Authorization": f"Bearer {endpoint.token}"}
            connector = aiohttp.TCPConnector(limit=max(args.concurrency, args.watchers) + 4, ssl=endpoint.ssl)
            async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
                for ns in (NAMESPACE, WATCH_NAMESPACE):
                    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                    async with session.post(f"{endpoint.url}/api/v1/namespaces", json=body) as resp:
                        await expect(resp, 201)
                result: dict[str, Any] = {
                    "objects": args.objects,
                    "concurrency": args.concurrency,
                    "server": "in-process" if args.in_process else "subprocess",
                    "transport": "http" if args.http else "https",
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                }
                result.update(await throughput(session, endpoint, args.objects, args.concurrency))
                result.update(await watch_latency(session, endpoint.url, args.watchers, args.watch_events))
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--objects", type=int, default=10_000, help="ConfigMaps to create/get/patch/delete")
    parser.add_argument(
        "--concurrency", type=int, default=32, help="concurrent requests for the throughput runs"
    )
    parser.add_argument("--watchers", type=int, default=20, help="concurrent watch streams")
    parser.add_argument("--watch-events", type=int, default=1_000, help="writes observed by every watcher")
    parser.add_argument("--in-process", action="store_true", help="run KubeSim in this process instead")
    parser.add_argument("--http", action="store_true", help="plain HTTP instead of the default TLS")
    args = parser.parse_args(argv)
    if min(args.objects, args.concurrency, args.watchers, args.watch_events) < 1:
        parser.error("sizes must be >= 1")
    print(json.dumps(asyncio.run(main_async(args)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
