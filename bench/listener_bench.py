"""Listener controller at scale: N NodePort Listeners created at once on M simulated nodes; JSON on stdout.

The operator runs as a real subprocess (``listener-operator run controller``) so that its CPU time and peak RSS
are its own; kubesim (API server + simulated nodes) runs in this process. Each Listener gets one EndpointSlice
(as if one Pod backed it, on node ``i % M``) before the Listeners are created, so a Listener is "addressed" when
its status lists that node.

Reported:
- ``seconds_to_all_addressed``: from the first Listener create until every Listener has an ingress address (seen
  through a watch on the Listeners);
- ``writes_per_listener``: operator API writes (create/update/patch/apply/delete) divided by N, from the operator's
  own ``/metrics`` counters (goal: 2 = Service apply + status apply);
- ``idle_writes``: operator writes during ``--idle`` seconds after convergence (goal: 0);
- ``operator_cpu_seconds`` and ``operator_peak_rss_mib`` of the operator process (getrusage of the child).

    python bench/listener_bench.py                          # 2,000 Listeners, 50 nodes, 60 s idle
    python bench/listener_bench.py --listeners 200 --idle 5 # quick run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import resource
import signal
import socket
import sys
import time
from typing import Any

import aiohttp

from kubesim.sim import KubeSim
from listener_operator.crd.generate import all_crds

NAMESPACE = "bench"
CLASS = "bench-nodeport"
LISTENERS = "listeners.listeners.stackable.tech"
WRITE_VERBS = ("create", "update", "patch", "apply", "delete")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
        try:
            async with session.get(f"{base}/readyz") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("operator did not become ready")


class AddressedTracker:
    """Counts addressed Listeners from a watch (not by listing 2,000 objects again and again in the process that
    also runs the API server, which would slow down what is measured)."""

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


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cluster_options: dict[str, Any] = {"nodes": args.nodes} if args.simulated_nodes else {}
    async with KubeSim(**cluster_options) as sim:
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
                node["status"] = {"addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250 + 1}"}]}
                await api.update("nodes", node, subresource="status")
        names = [f"listener-{i:05d}" for i in range(args.listeners)]

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

        await create_in_batches(make_slice)

        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "listener_operator.cli", "run", "controller",
            "--kubeconfig", str(sim.kubeconfig_path), "--no-leader-elect", "--listener-class-preset", "none",
            "--http-address", f"127.0.0.1:{port}", "--log-level", "WARNING", "--workers", str(args.workers),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        try:
            async with aiohttp.ClientSession() as session:
                await _wait_ready(session, base, proc)
                startup = await _scrape_writes(session, base)
                tracker = AddressedTracker(sim, len(names))
                tracking = asyncio.create_task(tracker.run())
                await tracker.started.wait()
                start = time.perf_counter()
                await create_in_batches(make_listener)
                created = time.perf_counter() - start
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(tracker.all_addressed.wait(), args.timeout)
                converged = time.perf_counter() - start
                tracking.cancel()
                await asyncio.gather(tracking, return_exceptions=True)
                addressed = len(tracker.addressed)
                await asyncio.sleep(1.0)  # let trailing watch events settle before the idle window starts
                after_converge = await _scrape_writes(session, base)
                await asyncio.sleep(args.idle)
                after_idle = await _scrape_writes(session, base)
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            try:
                _, stderr = await asyncio.wait_for(proc.communicate(), 30)
            except TimeoutError:
                proc.kill()
                _, stderr = await proc.communicate()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        converge_writes = _diff(after_converge, startup)
        idle_writes = _diff(after_idle, after_converge)
        return {
            "listeners": len(names),
            "nodes": len(nodes),
            "simulated_cluster": bool(args.simulated_nodes),
            "workers": args.workers,
            "all_addressed": addressed == len(names),
            "addressed": addressed,
            "seconds_to_create_listeners": round(created, 3),
            "seconds_to_all_addressed": round(converged, 3),
            "writes_per_listener": round(sum(converge_writes.values()) / len(names), 3),
            "writes_by_kind": converge_writes,
            "idle_seconds": args.idle,
            "idle_writes": int(sum(idle_writes.values())),
            "operator_exit_code": proc.returncode,
            "operator_cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "operator_peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
            "operator_stderr_tail": stderr.decode(errors="replace")[-500:] if proc.returncode else "",
            "python": platform.python_version(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listeners", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--idle", type=float, default=60.0, help="idle period after convergence, seconds")
    parser.add_argument("--workers", type=int, default=8, help="operator reconcile workers")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up waiting for convergence after this")
    parser.add_argument("--simulated-nodes", action=argparse.BooleanOptionalAction, default=True,
                        help="run kubesim's simulated cluster with --nodes kubelets (else plain Node objects)")
    args = parser.parse_args()
    if args.listeners < 1 or args.nodes < 1:
        parser.error("--listeners and --nodes must be positive")
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
