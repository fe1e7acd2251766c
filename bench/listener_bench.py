"""Listener controller at scale: N NodePort Listeners created at once on M simulated nodes; JSON on stdout.

Both processes are measured: kubesim (API server + simulated cluster, in the bench's own process) and the operator
(a real ``listener-operator run controller`` subprocess). Each scale runs in a fresh bench process, so CPU and
memory figures of one scale are not mixed with another's. Each Listener gets one EndpointSlice (as if one Pod backed
it, on node ``i % M``) before the Listeners are created, so a Listener is "addressed" when its status lists that
node. The endpoint addresses are outside 127.0.0.0/8 on purpose: kubesim's kube-proxy evaluates every Service but
binds nothing (a NodePort Service with a loopback endpoint would be 51 listening sockets per Listener) and records one
Warning Event per Service saying why.

The cluster gets a Service CIDR and a node-port range wide enough for every scale (``--node-port-range``, like the
apiserver's ``--service-node-port-range``; the default range 30000-32767 holds 2,768 NodePort Services).

Reported per N (the window is from the first Listener create until every Listener is addressed):
- ``seconds_to_all_addressed`` (seen through a watch on the Listeners);
- ``writes_per_listener``: operator API writes divided by N, from the operator's ``/metrics`` (goal: 2 = Service
  apply + status apply); ``idle_writes``: operator writes during ``--idle`` seconds after convergence (goal: 0);
- per process (``kubesim``, ``operator``): ``cpu_ms_per_listener`` (CPU time in the window / N), ``cpu_seconds``
  (window), ``rss_mib`` (peak for the operator, at convergence for kubesim) and ``rss_kib_per_listener`` (growth
  over the process's RSS before the first EndpointSlice / N: every cached or stored object a Listener brings);
  the operator's ``cpu_seconds_total`` includes start-up; ``cached_bytes_per_object`` is, per kind it caches, the
  memory of one object decoded from the wire and of what its cache keeps (tracemalloc, up to 1,000 objects).
With several scales, ``ratios`` divides the largest scale's per-Listener figures by the smallest's (flat cost = 1).

``--profile DIR`` records both processes during the window with py-spy (``DIR/<process>-<N>.txt``, collapsed
stacks for flamegraph tools, and a top-functions summary in the JSON); without py-spy on PATH, cProfile
(``.pstats`` files) instead.

    python bench/listener_bench.py --scale 500,2000,10000       # the issue-15 run (about two minutes)
    python bench/listener_bench.py --scale 200 --idle 2         # quick run
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import cProfile
import gc
import json
import logging
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from devenv.ports import listen_port
from kubesim.addresses import claim_address_block
from kubesim.sim import KubeSim
from listener_operator.crd.generate import all_crds

NAMESPACE = "bench"
CLASS = "bench-nodeport"
LISTENERS = "listeners.listeners.stackable.tech"
WRITE_VERBS = ("create", "update", "patch", "apply", "delete")

try:  # the operator's cache transforms (trees before them cache whole objects)
    from listener_operator import addresses as _addresses
    from listener_operator.listener_controller import controller as _controller

    CACHE_TRANSFORMS: dict[str, Callable[[Any], Any] | None] = {
        LISTENERS: _controller.LISTENER_CACHE, "listenerclasses.listeners.stackable.tech":
        _controller.LISTENER_CLASS_CACHE, "services": _controller.SERVICE_CACHE,
        "endpointslices.discovery.k8s.io": _addresses.ENDPOINT_SLICE_CACHE, "nodes": _addresses.NODE_CACHE}
except (ImportError, AttributeError):
    CACHE_TRANSFORMS = dict.fromkeys((LISTENERS, "listenerclasses.listeners.stackable.tech", "services",
                                      "endpointslices.discovery.k8s.io", "nodes"))


def _free_port() -> int:
    return listen_port("127.0.0.1")


def proc_cpu_seconds(pid: int) -> float:
    """User+system CPU time of a process from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) of a process, KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def self_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _scrape_writes(session: aiohttp.ClientSession, base: str) -> dict[str, float]:
    """Operator write requests so far, keyed ``verb resource``."""
    async with session.get(f"{base}/metrics") as resp:
        text = await resp.text()
    writes: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("listener_operator_api_requests_total{"):
            continue
        labels, value = line.rsplit(" ", 1)
        parts = dict(p.split("=", 1) for p in labels[labels.index("{") + 1:-1].split(","))
        verb, res = parts["verb"].strip('"'), parts["resource"].strip('"')
        if verb in WRITE_VERBS:
            writes[f"{verb} {res}"] = float(value)
    return writes


def _diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


async def _wait_ready(session: aiohttp.ClientSession, base: str, proc: asyncio.subprocess.Process,
                      within: float = 60) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise RuntimeError(f"operator exited with {proc.returncode}")
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(f"{base}/readyz") as resp:
                if resp.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise RuntimeError("operator did not become ready")


async def _drain(proc: asyncio.subprocess.Process, tail: collections.deque[bytes]) -> None:
    assert proc.stderr is not None
    async for line in proc.stderr:
        tail.append(line)


class AddressedTracker:
    """Counts addressed Listeners from a watch (not by listing N objects again and again in the process that also
    runs the API server, which would slow down what is measured)."""

    def __init__(self, sim: KubeSim, expected: int) -> None:
        self.sim = sim
        self.expected = expected
        self.addressed: set[str] = set()
        self.all_addressed = asyncio.Event()
        self.started = asyncio.Event()

    async def run(self) -> None:
        _, version = await self.sim.api.list(LISTENERS, NAMESPACE)
        self.started.set()
        async for kind, obj in self.sim.api.watch(LISTENERS, NAMESPACE, resource_version=version):
            name = obj["metadata"]["name"]
            if kind != "DELETED" and (obj.get("status") or {}).get("ingressAddresses"):
                self.addressed.add(name)
            else:
                self.addressed.discard(name)
            if len(self.addressed) >= self.expected:
                self.all_addressed.set()


class Profiler:
    """py-spy on both processes during the window (cProfile when py-spy is missing)."""

    def __init__(self, directory: Path | None, scale: int) -> None:
        self.directory = directory
        self.scale = scale
        self.py_spy = shutil.which("py-spy")
        self._spies: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self._cprofile: cProfile.Profile | None = None
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def operator_command(self) -> list[str]:
        """How to start the operator: under cProfile when that is the profiler."""
        if self.directory is not None and self.py_spy is None:
            out = self.directory / f"operator-{self.scale}.pstats"
            return [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "listener_operator.cli"]
        return [sys.executable, "-m", "listener_operator.cli"]

    def start(self, operator_pid: int) -> None:
        if self.directory is None:
            return
        if self.py_spy is None:
            self._cprofile = cProfile.Profile()
            self._cprofile.enable()
            return
        for name, pid in (("kubesim", os.getpid()), ("operator", operator_pid)):
            out = self.directory / f"{name}-{self.scale}.txt"
            spy = subprocess.Popen([self.py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "100",
                                    "--nonblocking", "--output", str(out)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self._spies.append((name, spy, out))

    def stop(self) -> dict[str, Any]:
        if self._cprofile is not None:
            self._cprofile.disable()
            assert self.directory is not None
            out = self.directory / f"kubesim-{self.scale}.pstats"
            self._cprofile.dump_stats(out)
            return {"kubesim": str(out), "operator": str(self.directory / f"operator-{self.scale}.pstats")}
        result: dict[str, Any] = {}
        for name, spy, out in self._spies:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(60)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
            result[name] = {"file": str(out), "top_self": top_functions(out)}
        return result


async def cached_bytes_per_object(sim: KubeSim, sample: int = 1000) -> dict[str, dict[str, Any]]:
    """Memory one cached object of each kind the operator watches takes in a Python process: the object as decoded
    from the wire, and what the operator's cache keeps of it (its transform); tracemalloc, averaged over up to
    ``sample`` objects as kubesim serves them."""
    out: dict[str, dict[str, Any]] = {}
    for kind, transform in CACHE_TRANSFORMS.items():
        items, _ = await sim.api.list(kind)
        texts = [json.dumps(item) for item in items[:sample]]
        if not texts:
            continue
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        decoded = [json.loads(text) for text in texts]
        raw = tracemalloc.get_traced_memory()[0] - base
        kept = [transform(obj) for obj in decoded] if transform is not None else decoded
        del decoded
        gc.collect()
        cached = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        del kept
        out[kind.split(".")[0]] = {"objects": len(items), "wire_bytes": round(sum(map(len, texts)) / len(texts)),
                                       "decoded_bytes": round(raw / len(texts)),
                                       "cached_bytes": round(cached / len(texts))}
    return out


def top_functions(path: Path, count: int = 15) -> list[str]:
    """The functions with the most samples at the top of the stack, from py-spy's collapsed stacks."""
    if not path.exists():
        return []
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        if not stack or not number.isdigit():
            continue
        total += int(number)
        counts[stack.rsplit(";", 1)[-1]] += int(number)
    return [f"{100 * n / total:.1f}% {frame}" for frame, n in counts.most_common(count)] if total else []


async def run_one(args: argparse.Namespace, listeners: int) -> dict[str, Any]:
    logging.getLogger("kubesim").setLevel(logging.ERROR)  # kube-proxy's per-Service refusal would flood stderr
    claim = claim_address_block(None)
    block = claim.block.index
    cluster_options: dict[str, Any] = {"nodes": args.nodes} if args.simulated_nodes else {}
    profiler = Profiler(Path(args.profile) if args.profile else None, listeners)
    async with KubeSim(address_block=claim, service_cidr=f"127.{block}.64.0/18",
                       service_node_port_range=args.node_port_range, **cluster_options) as sim:
        api = sim.api
        for crd in all_crds():
            await api.create("customresourcedefinitions.apiextensions.k8s.io", crd)
        await api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        await api.create("listenerclasses.listeners.stackable.tech", {
            "apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "ListenerClass",
            "metadata": {"name": CLASS}, "spec": {"serviceType": "NodePort"}})
        if args.simulated_nodes:
            nodes = sorted(n["metadata"]["name"] for n in (await api.list("nodes"))[0])
        else:
            nodes = [f"node-{i}" for i in range(args.nodes)]
            for i, name in enumerate(nodes):
                node = await api.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
                node["status"] = {"addresses": [{"type": "InternalIP", "address": f"127.{block}.1.{i + 1}"}]}
                await api.update("nodes", node, subresource="status")
        names = [f"listener-{i:05d}" for i in range(listeners)]

        async def create_in_batches(make: Any) -> None:
            for start in range(0, len(names), 100):
                await asyncio.gather(*(make(i, n) for i, n in enumerate(names[start:start + 100], start)))

        async def make_slice(i: int, name: str) -> None:
            await api.create("endpointslices.discovery.k8s.io", {
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": f"{name}-bench", "namespace": NAMESPACE,
                             "labels": {"kubernetes.io/service-name": name,
                                        "endpointslice.kubernetes.io/managed-by": "listener-bench"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [f"10.244.{i // 250}.{i % 250 + 1}"], "nodeName": nodes[i % len(nodes)],
                               "conditions": {"ready": True}}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}, NAMESPACE)

        async def make_listener(i: int, name: str) -> None:
            await api.create(LISTENERS, {
                "apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"className": CLASS, "ports": [{"name": "http", "port": 8080}]}}, NAMESPACE)

        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        proc = await asyncio.create_subprocess_exec(
            *profiler.operator_command(), "run", "controller",
            "--kubeconfig", str(sim.kubeconfig_path), "--no-leader-elect", "--listener-class-preset", "none",
            "--http-address", f"127.0.0.1:{port}", "--log-level", "WARNING", "--workers", str(args.workers),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        # Read the operator's log as it comes (a full pipe would stop it: failures log a warning each), keep the end.
        log_tail: collections.deque[bytes] = collections.deque(maxlen=20)
        draining = asyncio.create_task(_drain(proc, log_tail))
        try:
            async with aiohttp.ClientSession() as session:
                await _wait_ready(session, base, proc)
                operator_rss_empty = proc_memory_kib(proc.pid)["VmRSS"]
                kubesim_rss_empty = proc_memory_kib(os.getpid())["VmRSS"]
                await create_in_batches(make_slice)
                startup = await _scrape_writes(session, base)
                tracker = AddressedTracker(sim, len(names))
                tracking = asyncio.create_task(tracker.run())
                await tracker.started.wait()
                kubesim_cpu0, operator_cpu0 = self_cpu_seconds(), proc_cpu_seconds(proc.pid)
                profiler.start(proc.pid)
                start = time.perf_counter()
                await create_in_batches(make_listener)
                created = time.perf_counter() - start
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(tracker.all_addressed.wait(), args.timeout)
                converged = time.perf_counter() - start
                kubesim_cpu = self_cpu_seconds() - kubesim_cpu0
                operator_cpu = proc_cpu_seconds(proc.pid) - operator_cpu0
                profiles = profiler.stop()
                tracking.cancel()
                await asyncio.gather(tracking, return_exceptions=True)
                addressed = len(tracker.addressed)
                await asyncio.sleep(1.0)  # let trailing watch events settle before the idle window starts
                after_converge = await _scrape_writes(session, base)
                kubesim_rss = proc_memory_kib(os.getpid())["VmRSS"]
                await asyncio.sleep(args.idle)
                after_idle = await _scrape_writes(session, base)
                operator_memory = proc_memory_kib(proc.pid)
                operator_cpu_total = proc_cpu_seconds(proc.pid)
                per_kind = await cached_bytes_per_object(sim)
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
            await draining
    stderr = b"".join(log_tail)
    converge_writes = _diff(after_converge, startup)
    idle_writes = _diff(after_idle, after_converge)
    n = len(names)
    return {
        "listeners": n,
        "nodes": len(nodes),
        "simulated_cluster": bool(args.simulated_nodes),
        "node_port_range": args.node_port_range,
        "workers": args.workers,
        "all_addressed": addressed == n,
        "addressed": addressed,
        "seconds_to_create_listeners": round(created, 3),
        "seconds_to_all_addressed": round(converged, 3),
        "writes_per_listener": round(sum(converge_writes.values()) / n, 3),
        "writes_by_kind": converge_writes,
        "idle_seconds": args.idle,
        "idle_writes": int(sum(idle_writes.values())),
        "kubesim": {
            "cpu_seconds": round(kubesim_cpu, 2),
            "cpu_ms_per_listener": round(1000 * kubesim_cpu / n, 3),
            "rss_mib": round(kubesim_rss / 1024, 1),
            "rss_kib_per_listener": round((kubesim_rss - kubesim_rss_empty) / n, 2),
        },
        "operator": {
            "cpu_seconds": round(operator_cpu, 2),
            "cpu_ms_per_listener": round(1000 * operator_cpu / n, 3),
            "cpu_seconds_total": round(operator_cpu_total, 2),
            "rss_mib": round(operator_memory["VmHWM"] / 1024, 1),
            "rss_mib_empty": round(operator_rss_empty / 1024, 1),
            "rss_kib_per_listener": round((operator_memory["VmHWM"] - operator_rss_empty) / n, 2),
            "cached_bytes_per_object": per_kind,
            "exit_code": proc.returncode,
            "stderr_tail": stderr.decode(errors="replace")[-500:] if proc.returncode else "",
        },
        **({"profiles": profiles} if profiles else {}),
    }


RATIO_FIELDS = (("seconds_per_listener", lambda r: r["seconds_to_all_addressed"] / r["listeners"]),
                ("kubesim_cpu_ms_per_listener", lambda r: r["kubesim"]["cpu_ms_per_listener"]),
                ("kubesim_rss_kib_per_listener", lambda r: r["kubesim"]["rss_kib_per_listener"]),
                ("operator_cpu_ms_per_listener", lambda r: r["operator"]["cpu_ms_per_listener"]),
                ("operator_rss_kib_per_listener", lambda r: r["operator"]["rss_kib_per_listener"]))


def ratios(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-Listener figures of the largest scale divided by the smallest's."""
    small, large = runs[0], runs[-1]
    out: dict[str, Any] = {"of": f"{large['listeners']}/{small['listeners']}"}
    for name, figure in RATIO_FIELDS:
        low = figure(small)
        out[name] = round(figure(large) / low, 2) if low > 0 else None
    return out


def run_scales(args: argparse.Namespace, scales: list[int]) -> dict[str, Any]:
    """One fresh bench process per scale (``--listeners N``), smallest first."""
    runs = []
    for n in sorted(scales):
        command = [sys.executable, os.path.abspath(__file__), "--listeners", str(n), "--nodes", str(args.nodes),
                   "--idle", str(args.idle), "--workers", str(args.workers), "--timeout", str(args.timeout),
                   "--node-port-range", args.node_port_range,
                   "--simulated-nodes" if args.simulated_nodes else "--no-simulated-nodes"]
        if args.profile:
            command += ["--profile", args.profile]
        done = subprocess.run(command, stdout=subprocess.PIPE, check=True)
        runs.append(json.loads(done.stdout))
        print(f"{n} Listeners: {runs[-1]['seconds_to_all_addressed']} s", file=sys.stderr, flush=True)
    result: dict[str, Any] = {"runs": runs, "python": platform.python_version(), "cpus": os.cpu_count()}
    if len(runs) > 1:
        result["ratios"] = ratios(runs)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default=None,
                        help="comma-separated Listener counts, each run in a fresh process (e.g. 500,2000,10000)")
    parser.add_argument("--listeners", type=int, default=2000, help="one scale, in this process")
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--idle", type=float, default=10.0, help="idle period after convergence, seconds")
    parser.add_argument("--workers", type=int, default=8, help="operator reconcile workers")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up waiting for convergence after this")
    parser.add_argument("--node-port-range", default="30000-49999",
                        help="the cluster's Service node-port range (FIRST-LAST), wide enough for every scale")
    parser.add_argument("--profile", default=None, help="write py-spy (or cProfile) profiles into this directory")
    parser.add_argument("--simulated-nodes", action=argparse.BooleanOptionalAction, default=True,
                        help="run kubesim's simulated cluster with --nodes kubelets (else plain Node objects)")
    args = parser.parse_args()
    if args.scale:
        try:
            scales = [int(s) for s in args.scale.split(",") if s.strip()]
        except ValueError:
            parser.error("--scale takes comma-separated integers")
        if not scales or min(scales) < 1:
            parser.error("--scale needs positive counts")
        print(json.dumps(run_scales(args, scales), indent=2))
        return
    if args.listeners < 1 or args.nodes < 1:
        parser.error("--listeners and --nodes must be positive")
    print(json.dumps(asyncio.run(run_one(args, args.listeners)), indent=2))


if __name__ == "__main__":
    main()
