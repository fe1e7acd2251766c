"""Service-network router (the Rust router with its adaptor) against direct connections and the HAProxy baseline
(``haproxy_baseline.py``, from the same document), in the same run; JSON on stdout.

Measured, each through the router, through HAProxy and directly to the backend:
- ``throughput``: one TCP stream, bytes pushed by a blocking-socket sender to a sink in another process (the sink
  reports what it received); Gbit/s over ``--seconds`` (at most ``--max-gib`` GiB).
- ``connections``: new connections per second with 50 concurrent clients: ``wrk`` (Debian package, C, two threads)
  sending ``Connection: close`` HTTP requests to an HAProxy instance that answers 200 itself (so the backend is not
  the bottleneck); every request is one new TCP connection. Python cannot open connections fast enough to show the
  router's rate, hence wrk.
- ``latency``: round trips of 64 bytes on one established connection to an echo server in another process;
  p50/p99 in microseconds, and the router's added p50/p99.

Each measurement alternates direct, HAProxy and router runs ``--repeats`` times (the machine is shared) and reports
the median run of each with all values, and the router's ratio to HAProxy.

Goals (issue 11): throughput >= 50 % of direct, >= 3,400 new connections/s through the router, p99 added latency
<= 1 ms. Every address is on loopback; every loop is bounded in count and time. Run it alone:
``flock /tmp/heavy.lock python bench/router_bench.py``.

``--on-kubesim``: the router is a site's router Pod on kubesim instead of one started from a document: kubesim with
one node runs in this process with the site controller; a Site, one Connector per backend (``host`` = the backend's
address in the cluster's loopback block) and one Listener each are applied; the router Pod runs ``service-network run
router`` as a host process bound to its Pod IP (kubesim's host-process runtime, ``devenv.image``). "router" then means client -> router Pod
IP and the Listener's router port (the endpoint its Service forwards to; kubesim's user-space kube-proxy, a test relay
and not a data plane, is left out) -> backend; "direct" means client -> backend, both on the block's addresses. The
HAProxy baseline runs on this host either way (listeners on 127.0.50.202), in front of the same backends.
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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import haproxy_baseline as hb

from devenv.ports import listen_port
from service_network.router.rust_adaptor import RustAdaptor
from service_network.router.sources import FileConfigSource

HOST = "127.0.50.200"       # router listeners
BACKEND = "127.0.50.201"    # sink, echo, HTTP backend
BASELINE_HOST = "127.0.50.202"   # the HAProxy baseline's listeners
CHUNK = 1024 * 1024
KINDS = ("sink", "echo", "http")


def _free_port(host: str) -> int:
    return listen_port(host)


# --- backends (run in child processes: `python router_bench.py _serve KIND PORT`) ----------------------------------

def _serve(kind: str, host: str, port: int) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # a thread per connection: one that a router never ends (a stalled run) does not hold up the next runs
        threading.Thread(target=_serve_one, args=(kind, conn), daemon=True).start()


def _serve_one(kind: str, conn: socket.socket) -> None:
    # a connection reset by its client (a run that gave up) ends that connection, not the backend
    with conn, contextlib.suppress(ConnectionError):
        if kind == "sink":          # count bytes until EOF, answer with the count
            buf = bytearray(CHUNK)
            total = 0
            while n := conn.recv_into(buf):
                total += n
            conn.sendall(total.to_bytes(8, "big"))
        else:                       # echo
            while data := conn.recv(65536):
                conn.sendall(data)


def _start_backend(kind: str, host: str, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, __file__, "_serve", kind, host, str(port)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"{kind} backend did not start")
    return proc


# --- measurements --------------------------------------------------------------------------------------------------

def _throughput(port: int, host: str, seconds: float, max_bytes: int) -> dict[str, float]:
    data = memoryview(bytes(CHUNK))
    with socket.create_connection((host, port), timeout=30) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * CHUNK)
        sent = 0
        start = time.perf_counter()
        while sent < max_bytes and time.perf_counter() - start < seconds:
            s.sendall(data)
            sent += CHUNK
        s.shutdown(socket.SHUT_WR)
        received = int.from_bytes(s.recv(8), "big")
        elapsed = time.perf_counter() - start
    if received != sent:
        raise RuntimeError(f"sink received {received} of {sent} bytes")
    return {"bytes": sent, "seconds": round(elapsed, 3), "gbit_per_s": round(sent * 8 / elapsed / 1e9, 2)}


def _latency(port: int, host: str, count: int, seconds: float) -> dict[str, float]:
    msg = b"x" * 64
    samples: list[float] = []
    with socket.create_connection((host, port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(200):    # warm up
            s.sendall(msg)
            s.recv(64)
        deadline = time.perf_counter() + seconds
        while len(samples) < count and time.perf_counter() < deadline:
            t0 = time.perf_counter()
            s.sendall(msg)
            got = 0
            while got < len(msg):
                got += len(s.recv(64 - got))
            samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return {"round_trips": len(samples), "p50_us": round(statistics.median(samples), 1),
            "p99_us": round(samples[int(len(samples) * 0.99) - 1], 1)}


def _wrk(wrk: str, port: int, host: str, seconds: float, clients: int) -> dict[str, float]:
    out = subprocess.run([wrk, "-t", "2", "-c", str(clients), "-d", f"{max(1, round(seconds))}s",
                          "-H", "Connection: close", f"http://{host}:{port}/"],
                         capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])  # type: ignore[index]
    total = int(re.search(r"(\d+) requests in", out)[1])  # type: ignore[index]
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"connections_per_s": round(rate), "connections": total,
            "socket_errors": sum(int(x) for x in errors.groups()) if errors else 0,
            "non_2xx": int(non2xx[1]) if non2xx else 0}


Endpoints = dict[str, tuple[str, int]]     # kind -> (host, port)


def _document(host: str, direct: Endpoints) -> tuple[dict[str, Any], Endpoints]:
    """A router document with one Listener on ``host`` per backend, and where each Listener is."""
    ports = {k: _free_port(host) for k in direct}
    doc = {"version": 1, "site": {"id": "bench", "name": "bench"},
           "listeners": [{"name": k, "routingKey": k, "host": host, "port": ports[k]} for k in direct],
           "connectors": [{"name": k, "routingKey": k, "port": port, "targets": [{"host": backend}]}
                          for k, (backend, port) in direct.items()]}
    return doc, {k: (host, p) for k, p in ports.items()}


async def _accepting(endpoints: Endpoints, seconds: float = 30) -> None:
    """Returns once every endpoint accepts a connection (its router applied the document)."""
    deadline = time.monotonic() + seconds
    for host, port in endpoints.values():
        while True:
            try:
                _, writer = await asyncio.open_connection(host, port)
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nothing accepts on {host}:{port} after {seconds:g} s") from None
                await asyncio.sleep(0.05)
                continue
            writer.close()
            break


@contextlib.asynccontextmanager
async def _bare_router(state: Path, direct: Endpoints) -> AsyncIterator[Endpoints]:
    """The Rust router with its adaptor, started from a document: one Listener per backend on ``HOST``."""
    doc, endpoints = _document(HOST, direct)
    path = state / "router.json"
    path.write_text(json.dumps(doc))
    adaptor = RustAdaptor(FileConfigSource(path), state / "router")
    stop = asyncio.Event()
    task = asyncio.create_task(adaptor.run(stop))
    try:
        await asyncio.wait_for(adaptor.applied.wait(), 60)
        await _accepting(endpoints)
        yield endpoints
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


@contextlib.contextmanager
def _baseline(haproxy: str, state: Path, direct: Endpoints) -> Iterator[Endpoints]:
    """The HAProxy baseline for the same document, its Listeners on ``BASELINE_HOST``."""
    doc, endpoints = _document(BASELINE_HOST, direct)
    with hb.network(haproxy, state, {"bench": doc}):
        yield endpoints


@contextlib.asynccontextmanager
async def _kubesim_site(state: Path, direct: Endpoints, sim: Any) -> AsyncIterator[Endpoints]:
    """A site on kubesim (see the module docstring): the router Pod's IP and each Listener's router port."""
    from devenv.image import load_project_image
    from service_network.crd.generate import all_crds
    from service_network.site.command import ControllerOptions, SiteControllerProcess
    from service_network.site.resources import RouterOptions

    api = sim.api
    for crd in all_crds():
        await api.create("customresourcedefinitions.apiextensions.k8s.io", crd)
    load_project_image(sim.cluster.runtime)
    await api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
    stop = asyncio.Event()
    controller = SiteControllerProcess(ControllerOptions(
        kubeconfig=str(sim.kubeconfig_path), http_address=None, leader_elect=False,
        router=RouterOptions(image="localhost/listener-operator:bench")))
    task = asyncio.create_task(controller.run(stop))
    try:
        group = "skupper.io/v2alpha1"
        await api.create("sites.skupper.io", {"apiVersion": group, "kind": "Site",
                                              "metadata": {"name": "bench", "namespace": "bench"}}, "bench")
        for kind, (host, port) in direct.items():
            await api.create("connectors.skupper.io", {
                "apiVersion": group, "kind": "Connector", "metadata": {"name": kind, "namespace": "bench"},
                "spec": {"routingKey": kind, "host": host, "port": port}}, "bench")
            await api.create("listeners.skupper.io", {
                "apiVersion": group, "kind": "Listener", "metadata": {"name": kind, "namespace": "bench"},
                "spec": {"routingKey": kind, "host": kind, "port": port}}, "bench")
        deadline = time.monotonic() + 60
        while True:
            site = await api.get("sites.skupper.io", "bench", "bench")
            listeners, _ = await api.list("listeners.skupper.io", "bench")
            if (site.get("status") or {}).get("status") == "Ready" and all(
                    (x.get("status") or {}).get("status") == "Ready" for x in listeners):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the site did not become Ready within 60 s")
            await asyncio.sleep(0.2)
        pods, _ = await api.list("pods", "bench", label_selector="skupper.io/component=router")
        pod_ip = pods[0]["status"]["podIP"]
        endpoints: Endpoints = {}
        for kind in direct:
            service = await api.get("services", kind, "bench")
            endpoints[kind] = (pod_ip, int(service["spec"]["ports"][0]["targetPort"]))
        for host, port in endpoints.values():     # the router listens (its document has been applied)
            while True:
                with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the router does not accept on {host}:{port}")
                await asyncio.sleep(0.1)
        yield endpoints
    finally:
        for deployment in (await api.list("deployments.apps", "bench"))[0]:
            await api.delete("deployments.apps", deployment["metadata"]["name"], "bench")
        stop.set()
        await asyncio.wait_for(task, 30)
        for pod in (await api.list("pods", "bench"))[0]:
            await api.delete("pods", pod["metadata"]["name"], "bench")
        deadline = time.monotonic() + 30
        while True:     # the kubelet stops the router's process before the Pod goes
            remaining, _ = await api.list("pods", "bench")
            if not remaining or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    haproxy = hb.find_haproxy()
    wrk = hb.find_wrk()
    state = Path(tempfile.mkdtemp(prefix="snr-bench-", dir="/tmp"))
    procs: list[subprocess.Popen[Any]] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(_kill_all, procs)
            if args.on_kubesim:
                from kubesim.sim import KubeSim
                sim = await stack.enter_async_context(KubeSim(nodes=1, state_dir=state / "cluster"))
                backend_host = sim.address_block.client_ip(201)
            else:
                backend_host = BACKEND
            direct = {k: (backend_host, _free_port(backend_host)) for k in KINDS}
            procs.append(_start_backend("sink", *direct["sink"]))
            procs.append(_start_backend("echo", *direct["echo"]))
            procs.append(hb.http_responder(haproxy, *direct["http"], state))
            routed = await stack.enter_async_context(
                _kubesim_site(state, direct, sim) if args.on_kubesim else _bare_router(state, direct))
            baseline = await asyncio.to_thread(stack.enter_context, _baseline(haproxy, state, direct))
            result = await asyncio.to_thread(_measure, args, wrk, direct, routed, baseline)
            result["setup"] = ("site on kubesim: router Pod (service-network run router) bound to its Pod IP, "
                               "Listeners and Connectors from the site controller" if args.on_kubesim
                               else "the router started from a document")
            result["addresses"] = {"router": routed, "haproxy": baseline, "direct": direct}
            result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "haproxy": hb.version(haproxy), "load_average": os.getloadavg()}
            return result
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _kill_all(procs: list[subprocess.Popen[Any]]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def _measure(args: argparse.Namespace, wrk: str, direct: Endpoints, routed: Endpoints, baseline: Endpoints
             ) -> dict[str, Any]:
    max_bytes = int(args.max_gib * 1024**3)
    result: dict[str, Any] = {}
    sides = {"direct": direct, "haproxy": baseline, "router": routed}

    def each(fn: Any, kind: str, key: str, *a: Any) -> dict[str, Any]:
        """Direct, HAProxy and router runs in turn, ``--repeats`` times; per side the run with the median ``key``,
        and the router's median over HAProxy's."""
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        for _ in range(args.repeats):
            for side, endpoints in sides.items():
                runs[side].append(fn(endpoints[kind][1], endpoints[kind][0], *a))
        out: dict[str, Any] = {}
        for side, results in runs.items():
            results.sort(key=lambda r: r[key])
            out[side] = {**results[len(results) // 2], f"all_{key}": [r[key] for r in results]}
        out["router_over_haproxy"] = round(out["router"][key] / max(out["haproxy"][key], 1e-9), 2)
        return out

    tp = each(_throughput, "sink", "gbit_per_s", args.seconds, max_bytes)
    for side in ("router", "haproxy"):
        tp[f"{side}_percent_of_direct"] = round(100 * tp[side]["gbit_per_s"] / tp["direct"]["gbit_per_s"], 1)
    result["throughput"] = tp
    conns = each(lambda p, h: _wrk(wrk, p, h, args.seconds, args.clients), "http", "connections_per_s")
    conns["clients"] = args.clients
    conns["tool"] = "wrk 4 (Debian), 2 threads, Connection: close"
    result["connections"] = conns
    lat = each(_latency, "echo", "p99_us", args.round_trips, args.seconds * 3)
    for side, prefix in (("router", ""), ("haproxy", "haproxy_")):
        lat[f"{prefix}added_p50_us"] = round(lat[side]["p50_us"] - lat["direct"]["p50_us"], 1)
        lat[f"{prefix}added_p99_us"] = round(lat[side]["p99_us"] - lat["direct"]["p99_us"], 1)
    result["latency"] = lat
    result["goals"] = {
        "throughput_ge_50_percent": tp["router_percent_of_direct"] >= 50,
        "connections_ge_3400_per_s": conns["router"]["connections_per_s"] >= 3400,
        "added_p99_le_1ms": lat["added_p99_us"] <= 1000,
    }
    return result


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "_serve":
        _serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each throughput/rate run")
    parser.add_argument("--max-gib", type=float, default=20.0, help="cap of bytes per throughput run")
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients of the connection-rate run")
    parser.add_argument("--round-trips", type=int, default=20000, help="round trips per latency run")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds of direct, HAProxy and router runs of each measurement")
    parser.add_argument("--on-kubesim", action="store_true",
                        help="run the router as a site's router Pod on kubesim (see the module docstring)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_main(args)), indent=2))


if __name__ == "__main__":
    main()
