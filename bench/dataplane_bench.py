"""The service network's router (Rust) against the HAProxy baseline and direct connections, in the same run,
alternating; JSON on stdout.

Two topologies, each built twice (once per engine, on its own loopback addresses, both running throughout):
- ``one_hop``: client -> West -> backend (a Listener and a local Connector, no TLS);
- ``two_hops``: client -> West -> (mutual TLS) -> Middle -> (mutual TLS) -> East -> backend, Middle and East with a
  router access, West dialing Middle and Middle dialing East (certificates as the site controller issues them).
Every Rust router runs with its adaptor (this process) as in a router Pod; HAProxy runs as the baseline that
``haproxy_baseline.py`` renders from the same documents (static routes, no adaptor). "router CPU" is what the
data-plane processes used (the Rust router processes, or the HAProxy processes), read from ``/proc``.

Measured, each as ``--repeats`` rounds of direct, HAProxy and Rust runs in turn (medians reported, all values
kept): ``throughput`` (one TCP stream to a sink, Gbit/s, router CPU-seconds per GB), ``connections`` (new
connections per second with 50 clients, wrk with ``Connection: close`` against an HAProxy that answers itself;
router CPU µs per connection), ``latency`` (64-byte round trips on one connection, p50/p99 and the p99 the routers
add). ``memory``: RSS the West, Middle and East routers add per open idle connection (``--idle`` connections held
through the two hops), and what a Rust router's RSS grows by per idle link (``--links`` routers linked to one).
``machine.limits``, measured first and alone (``machine_limits.py``): what the machine allows any relay, stated beside
the results (issue 45): two processes waking each other on two CPUs and on one (a hand-over between processes), and
the router's AEAD figures per CPU-second with the bound they set on two TLS hops. ``floor``, a side of the throughput
runs: a minimal reference relay in the routers' places (``relay_floor.py``: spliced on one hop; the router's own TLS
code and nothing of its design on two), what the router's building blocks carry here without its design;
``rust_over_haproxy`` gives the router's share of it (``of_floor``), its share of direct (``floor_of_direct``) and its
ratio to HAProxy (``floor_over_haproxy``). On two hops also ``floor_records``, the reference relay that copies nothing
in user space (each TLS record opened and sealed where it was read: the least per byte a relay with TLS in user space
does), with ``of_floor_records``, ``floor_records_of_direct`` and ``floor_records_over_haproxy``, and ``floor_window``,
the same relay with every socket's buffers fixed (``WINDOW_SOCKET_BUFFER``) so that the bytes in flight between two
relays are about what a link's per-stream window lets a router have, with ``of_floor_window`` and the others. A floor
that cannot start or fails a run is reported as unavailable. ``goals_beside_references`` puts each goal set as a share
of direct beside what those relays carried in the same run (one hop: ``floor``; two hops: ``floor_window``, then
``floor_records``): their share of direct, whether they met the goal, and the router's share of theirs.

Goals (issue 21), as ratios to HAProxy in the same run: two hops: new connections/s >= 5x, router CPU per new
connection <= 1/5, throughput >= 1x with router CPU per GB <= 1x; one hop: throughput >= 0.9x, new connections/s >=
1x, p99 added latency <= 1x; memory: <= 64 KiB per open connection through a router, <= 2 MiB per idle link. Goals
(issue 45): one hop: one stream >= 60 % of direct; two hops: one stream >= 1.5x HAProxy and >= 20 % of direct;
memory: <= 4 KiB per open connection per router (each in ``goals_met``, beside ``machine.limits``).
Loopback only (127.0.66-68.x, 127.0.70-76.x and the backends' 127.0.50.201); every loop is bounded in count and time. Run it
alone: ``flock /tmp/heavy.lock python bench/dataplane_bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import haproxy_baseline as hb
import machine_limits
import relay_floor as rf
import router_bench as rb

from service_network.router.dataplane import router_binary
from service_network.router.names import CONTROL_SNI, KEY_SNI_WILDCARD
from service_network.router.rust_adaptor import RustAdaptor
from service_network.router.sources import FileConfigSource
from service_network.site import pki

ENGINES = ("haproxy", "rust")
MEASUREMENTS = ("throughput", "connections", "latency", "memory")
KINDS = ("sink", "echo", "http", "idle")
#: a target that serves many connections at once (router_bench's echo serves one at a time): the memory measure
_CONCURRENT_ECHO = """
import asyncio, sys
async def serve(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    writer.close()
async def main():
    server = await asyncio.start_server(serve, sys.argv[1], int(sys.argv[2]), backlog=4096)
    print("ready", flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


def _concurrent_echo(host: str, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _CONCURRENT_ECHO, host, str(port)], stdout=subprocess.PIPE,
                            text=True)
    if proc.stdout is None or proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the concurrent echo backend did not start")
    return proc


def _progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)
#: loopback addresses per engine: West, Middle, East
HOSTS = {"haproxy": {"west": "127.0.70.200", "middle": "127.0.71.200", "east": "127.0.72.200"},
         "rust": {"west": "127.0.73.200", "middle": "127.0.74.200", "east": "127.0.75.200"},
         "floor": {"west": "127.0.66.200", "middle": "127.0.67.200", "east": "127.0.68.200"},
         "floor_records": {"west": "127.0.66.201", "middle": "127.0.67.201", "east": "127.0.68.201"},
         "floor_window": {"west": "127.0.66.202", "middle": "127.0.67.202", "east": "127.0.68.202"}}
#: the socket buffers (``SO_SNDBUF``, ``SO_RCVBUF``; Linux doubles them, 128 KiB each) that bound the bytes in flight
#: between two of ``floor_window``'s relays to about what a link's per-stream window (256 KiB) lets a router have (the
#: TLS legs only: the client's and the sink's sockets keep TCP's autotuning, as they do with the routers)
WINDOW_SOCKET_BUFFER = 65536
#: the reference relays of each topology, by side name: (``relay_floor.start``'s keyword options); on two hops also the
#: one that copies nothing in user space, with TCP's autotuned buffers and with bytes in flight bounded like a window
FLOORS: dict[str, dict[str, dict[str, Any]]] = {
    "one_hop": {"floor": {}},
    "two_hops": {"floor": {}, "floor_records": {"records": True},
                 "floor_window": {"records": True, "socket_buffer": WINDOW_SOCKET_BUFFER}}}
#: a running router: the Rust router's adaptor, or an HAProxy process of the baseline
Router = RustAdaptor | hb.Baseline


class _CA:
    """A site CA writing PEM files; certificates name their holder's site id as the site controller's do."""

    def __init__(self, directory: Path, name: str) -> None:
        self.dir, self.pair = directory, pki.new_ca(name)
        directory.mkdir(parents=True, exist_ok=True)
        self.ca_file = directory / "ca.crt"
        self.ca_file.write_bytes(self.pair.cert)

    def issue(self, file: str, cn: str, *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = (),
              client: bool = False) -> dict[str, str]:
        issued = pki.issue(self.pair, cn, dns=dns, ips=ips, client=client, server=not client)
        cert, key = self.dir / f"{file}.crt", self.dir / f"{file}.key"
        cert.write_bytes(issued.cert)
        key.write_bytes(issued.key)
        return {"ca": str(self.ca_file), "cert": str(cert), "key": str(key)}


def _doc(name: str) -> dict[str, Any]:
    return {"version": 1, "site": {"id": f"{name}-uid", "name": name}, "tlsProfiles": [], "listeners": [],
            "connectors": [], "links": [], "routerAccess": [], "router": {}}


def _two_hop_documents(state: Path, hosts: dict[str, str], backends: dict[str, int]) -> dict[str, dict[str, Any]]:
    docs = {name: _doc(name) for name in hosts}
    cas = {name: _CA(state / f"{name}-ca", f"{name}-ca") for name in ("middle", "east")}
    for name in ("middle", "east"):
        files = cas[name].issue(f"{name}-access", f"{name}-uid", dns=(KEY_SNI_WILDCARD, CONTROL_SNI),
                                ips=(hosts[name],))
        docs[name]["tlsProfiles"].append({"name": "site", "files": files})
        docs[name]["routerAccess"] = [{"name": "inter-router", "host": hosts[name], "tlsProfile": "site",
                                       "port": rb._free_port(hosts[name])}]
    for src, dst in (("west", "middle"), ("middle", "east")):
        files = cas[dst].issue(f"{src}-to-{dst}", f"{src}-uid", client=True)
        docs[src]["tlsProfiles"].append({"name": f"to-{dst}", "files": files})
        docs[src]["links"].append({"name": f"to-{dst}", "host": hosts[dst], "tlsProfile": f"to-{dst}", "cost": 1,
                                   "port": docs[dst]["routerAccess"][0]["port"]})
    docs["east"]["connectors"] = [{"name": k, "routingKey": k, "port": backends[k], "targets": [{"host": rb.BACKEND}]}
                                  for k in KINDS]
    docs["west"]["listeners"] = [{"name": k, "routingKey": k, "host": hosts["west"],
                                  "port": rb._free_port(hosts["west"])} for k in KINDS]
    return docs


def _one_hop_documents(hosts: dict[str, str], backends: dict[str, int]) -> dict[str, dict[str, Any]]:
    west = _doc("solo")
    west["connectors"] = [{"name": k, "routingKey": k, "port": backends[k], "targets": [{"host": rb.BACKEND}]}
                          for k in KINDS]
    west["listeners"] = [{"name": k, "routingKey": k, "host": hosts["west"], "port": rb._free_port(hosts["west"])}
                         for k in KINDS]
    return {"west": west}


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(process group, CPU ticks used, RSS pages) of a process; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[2]), int(fields[11]) + int(fields[12]), int(fields[21])


def _router_pids(routers: dict[str, Router]) -> dict[str, int]:
    """The data-plane process of each router: its Rust router process, or its HAProxy process."""
    pids = {name: r.plane.pid if isinstance(r, RustAdaptor) else r.pid for name, r in routers.items()}
    return {name: pid for name, pid in pids.items() if pid is not None}


def _cpu(pids: set[int]) -> float:
    return sum(st[1] for p in pids if (st := _stat(p)) is not None) / os.sysconf("SC_CLK_TCK")


def _rss(pids: set[int]) -> int:
    return sum(st[2] for p in pids if (st := _stat(p)) is not None) * os.sysconf("SC_PAGE_SIZE")


@contextlib.asynccontextmanager
async def _network(state: Path, engine: str, docs: dict[str, dict[str, Any]], haproxy: str,
                   router_binary: str | None = None) -> AsyncIterator[tuple[dict[str, Router], dict[str, int]]]:
    """The routers of ``docs`` running: ``engine`` ``rust`` (each with its adaptor; ``router_binary``, else the
    default one) or ``haproxy`` (the baseline), West's Listeners all routed."""
    await asyncio.to_thread(state.mkdir, parents=True, exist_ok=True)
    async with contextlib.AsyncExitStack() as stack:
        if engine == "haproxy":
            routers: dict[str, Router] = dict(await asyncio.to_thread(
                stack.enter_context, hb.network(haproxy, state / "haproxy", docs)))
        else:
            routers = dict(await stack.enter_async_context(_rust_routers(state, docs, router_binary)))
        listeners = {x["name"]: x["port"] for x in docs["west"]["listeners"]}
        host = docs["west"]["listeners"][0]["host"]
        deadline = time.monotonic() + 30
        while not all(_listening(host, p) for p in listeners.values()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{engine}: West's Listeners not all accepting after 30 s")
            await asyncio.sleep(0.05)
        yield routers, listeners


@contextlib.asynccontextmanager
async def _rust_routers(state: Path, docs: dict[str, dict[str, Any]], router_binary: str | None
                        ) -> AsyncIterator[dict[str, RustAdaptor]]:
    """A Rust router with its adaptor per document, East first (so that links find their far end)."""
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    adaptors: dict[str, RustAdaptor] = {}
    try:
        for name in ("east", "middle", "west"):
            if name not in docs:
                continue
            path = state / f"rust-{name}.json"
            path.write_text(json.dumps(docs[name]))
            adaptor = RustAdaptor(FileConfigSource(path), state / f"rust-{name}", router_binary=router_binary)
            adaptors[name] = adaptor
            task = asyncio.create_task(adaptor.run(stop))
            tasks.append(task)
            await _started(task, adaptor, f"rust router {name!r}")
        yield adaptors
    finally:
        stop.set()
        for t in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t, 30)


async def _started(task: asyncio.Task[None], adaptor: RustAdaptor, what: str) -> None:
    """Returns once ``adaptor`` has applied its first document; raises, naming ``what`` and the cause, when its task
    ended first (the router could not start) or nothing was applied within 60 s."""
    applied = asyncio.create_task(adaptor.applied.wait())
    try:
        await asyncio.wait({task, applied}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    finally:
        applied.cancel()
    if adaptor.applied.is_set():
        return
    if task.done():
        cause = task.exception() if not task.cancelled() else None
        raise RuntimeError(f"{what} did not start: {cause or 'it stopped'}") from cause
    raise RuntimeError(f"{what}: no document applied after 60 s")


def _listening(host: str, port: int) -> bool:
    local = f"{socket.inet_aton(host)[::-1].hex().upper()}:{port:04X}"
    with open("/proc/net/tcp") as table:
        return any(f[1] == local and f[3] == "0A" for f in (line.split() for line in table) if len(f) > 3)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


#: a side of a measurement: (port, host) a client connects to, and the router processes on its path by name
Side = tuple[int, str, dict[str, int]]


def _rounds(args: argparse.Namespace, sides: dict[str, Side], run: Callable[[int, str], dict[str, Any]],
            failed: dict[str, str] | None = None) -> dict[str, list[tuple[dict[str, Any], float]]]:
    """``--repeats`` rounds of each side in turn: per side a list of (result, router CPU seconds); each result also
    holds ``router_cpu_s``, the CPU seconds of each router process by name. With ``failed``, a side whose run
    fails (a stall past the client's timeout, a reset, a wrong byte count) is left out from then on and ``failed``
    says why; without it, the failure ends the measurement."""
    out: dict[str, list[tuple[dict[str, Any], float]]] = {side: [] for side in sides}
    for _ in range(args.repeats):
        for side, (port, host, pids) in sides.items():
            if failed is not None and side in failed:
                continue
            before, machine = {name: _cpu({pid}) for name, pid in pids.items()}, _machine()
            try:
                result = run(port, host)
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                if failed is None:
                    raise
                failed[side] = f"{type(e).__name__}: {e}"
                continue
            after = _machine()
            result["machine_busy_s"], result["machine_idle_s"] = (after[0] - machine[0], after[1] - machine[1])
            result["router_cpu_s"] = {name: _cpu({pid}) - before[name] for name, pid in pids.items()}
            out[side].append((result, sum(result["router_cpu_s"].values())))
    return {side: results for side, results in out.items() if results}


def _per_router(results: list[tuple[dict[str, Any], float]], scale: float) -> dict[str, float]:
    """Each router process's CPU seconds over all ``results``, times ``scale``."""
    names = results[0][0]["router_cpu_s"] if results else {}
    return {name: round(sum(r["router_cpu_s"][name] for r, _ in results) * scale, 3) for name in names}


def machine(args: argparse.Namespace, **versions: str) -> dict[str, Any]:
    """What a result was measured on and how: CPUs, load, versions, repeats and durations."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(), **versions,
            "load_average": os.getloadavg(), "repeats": args.repeats, "seconds": args.seconds}


def _machine() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine so far, every process and the kernel's own work included (time
    the hypervisor stole is neither)."""
    user, nice, system, idle, iowait, irq, softirq = (
        int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8])
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, (idle + iowait) / tick


def measure_sides(args: argparse.Namespace, wrk: str, sides: Callable[[str], dict[str, Side]], what: str,
                  failed: dict[str, str] | None = None, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """The measurements of ``args.only`` among throughput, connections and latency, each as ``--repeats`` rounds of
    every side in turn, ``sides(kind)`` giving the sides for a backend kind (``sink``, ``http``, ``echo``); a side
    named ``direct`` (the backend itself, no router) is the reference of the latency the others add. Router CPU is
    given in all and per router process (``by_router``). With ``failed``, a side that fails a measurement is left
    out of the rest (``_rounds``), ``failed`` saying which measurement failed and how. A side in ``optional`` (a
    reference beside the routers) that fails is left out of the throughput and reported there as unavailable, and
    never ends the measurement."""
    max_bytes = int(args.max_gib * 1024**3)
    result: dict[str, Any] = {}

    skipped: dict[str, str] = {}

    def rounds(measure: str, kind: str, run: Callable[[int, str], dict[str, Any]]
               ) -> dict[str, list[tuple[dict[str, Any], float]]]:
        now: dict[str, str] | None = None if failed is None and not optional else {}
        out = _rounds(args, {s: x for s, x in sides(kind).items() if not failed or s not in failed}, run, now)
        for side, why in (now or {}).items():
            if side in optional:
                skipped[side] = f"{measure}: {why}"
                out.pop(side, None)
            elif failed is None:
                raise RuntimeError(f"{side}: {measure}: {why}")
            else:
                failed[side] = f"{measure}: {why}"
        return out

    if "throughput" in args.only:
        _progress(f"{what}: throughput")
        runs = rounds("throughput", "sink", lambda p, h: rb._throughput(p, h, args.seconds, max_bytes))
        tp: dict[str, Any] = {}
        for side, results in runs.items():
            gbit = [r["gbit_per_s"] for r, _ in results]
            gb = sum(r["bytes"] for r, _ in results) / 1e9
            busy = sum(r["machine_busy_s"] for r, _ in results)
            idle = sum(r["machine_idle_s"] for r, _ in results)
            tp[side] = {"gbit_per_s": _median(gbit), "all_gbit_per_s": gbit,
                        "machine_cpu_seconds_per_gb": round(busy / max(gb, 1e-9), 3),
                        "machine_idle_share": round(idle / max(busy + idle, 1e-9), 3)}
            if by_router := _per_router(results, 1 / max(gb, 1e-9)):
                tp[side]["router_cpu_seconds_per_gb"] = round(sum(c for _, c in results) / max(gb, 1e-9), 3)
                tp[side]["router_cpu_seconds_per_gb_by_router"] = by_router
        tp.update({side: {"unavailable": why[:500]} for side, why in skipped.items()})
        result["throughput"] = tp
    if "connections" in args.only:
        _progress(f"{what}: connections")
        runs = rounds("connections", "http", lambda p, h: rb._wrk(wrk, p, h, args.seconds, args.clients))
        cs: dict[str, Any] = {"clients": args.clients}
        for side, results in runs.items():
            rate = [r["connections_per_s"] for r, _ in results]
            count = sum(r["connections"] for r, _ in results)
            cs[side] = {"connections_per_s": _median(rate), "all_connections_per_s": rate}
            if by_router := _per_router(results, 1e6 / max(1, count)):
                cs[side]["router_cpu_us_per_connection"] = round(sum(c for _, c in results) * 1e6 / max(1, count))
                cs[side]["router_cpu_us_per_connection_by_router"] = {k: round(v) for k, v in by_router.items()}
        result["connections"] = cs
    if "latency" in args.only:
        _progress(f"{what}: latency")
        runs = rounds("latency", "echo", lambda p, h: rb._latency(p, h, args.round_trips, args.seconds * 3))
        lat: dict[str, Any] = {}
        for side, results in runs.items():
            lat[side] = {"p50_us": _median([r["p50_us"] for r, _ in results]),
                         "p99_us": _median([r["p99_us"] for r, _ in results])}
        for side in [s for s in lat if s != "direct" and "direct" in lat]:
            lat[side]["added_p99_us"] = round(lat[side]["p99_us"] - lat["direct"]["p99_us"], 1)
            lat[side]["added_p50_us"] = round(lat[side]["p50_us"] - lat["direct"]["p50_us"], 1)
        result["latency"] = lat
    return result


def _measure(args: argparse.Namespace, wrk: str, backends: dict[str, int],
             nets: dict[str, tuple[dict[str, Router], dict[str, int]]], topology: str,
             floors: dict[str, rf.Relays] | None = None) -> dict[str, Any]:
    """``floors``: the reference relays (``relay_floor.py``) by side name, sides of the throughput runs whose
    failure ends nothing."""
    def sides(kind: str) -> dict[str, Side]:
        out: dict[str, Side] = {"direct": (backends[kind], rb.BACKEND, {})}
        for engine, (adaptors, listeners) in nets.items():
            out[engine] = (listeners[kind], HOSTS[engine]["west"], _router_pids(adaptors))
        for name, relays in (floors or {}).items():
            if kind == "sink":
                out[name] = (relays.port, HOSTS[name]["west"], relays.pids)
        return out

    _progress(f"{topology}: measuring")
    result = measure_sides(args, wrk, sides, topology, optional=tuple(sorted(HOSTS.keys() - set(ENGINES))))
    if "memory" in args.only and topology == "two_hops":
        _progress(f"{topology}: memory per connection")
        result["memory_per_connection"] = {
            engine: _idle_connections(args, adaptors, listeners["idle"], HOSTS[engine]["west"])
            for engine, (adaptors, listeners) in nets.items()}
    return result


def _idle_connections(args: argparse.Namespace, adaptors: dict[str, Router], port: int, host: str
                      ) -> dict[str, Any]:
    """RSS the three routers add per open connection: ``--idle`` connections opened through them, each answered
    (the echo backend's greeting passes every hop), held, then closed."""
    pids = set(_router_pids(adaptors).values())
    before = _rss(pids)
    held: list[socket.socket] = []
    deadline = time.monotonic() + 120
    try:
        for _ in range(args.idle):
            if time.monotonic() > deadline:
                break
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(b"x")
            s.recv(1)
            held.append(s)
        time.sleep(1)
        after = _rss(pids)
    finally:
        for s in held:
            s.close()
    per_router = (after - before) / max(1, len(held)) / max(1, len(adaptors))
    return {"connections": len(held), "routers": len(adaptors), "rss_before_bytes": before,
            "rss_after_bytes": after, "bytes_per_connection_per_router": round(per_router)}


def _idle_links(state: Path, count: int) -> dict[str, Any]:
    """RSS a Rust router grows by per idle link: ``count`` routers (processes run from documents) link to a hub."""
    binary = router_binary()
    hub_host = "127.0.76.1"
    ca = _CA(state / "hub-ca", "hub-ca")
    hub = _doc("hub")
    hub["tlsProfiles"] = [{"name": "site", "files": ca.issue("hub", "hub-uid", dns=(CONTROL_SNI,), ips=(hub_host,))}]
    port = rb._free_port(hub_host)
    hub["routerAccess"] = [{"name": "inter-router", "host": hub_host, "port": port, "tlsProfile": "site"}]
    procs: list[subprocess.Popen[bytes]] = []

    def run(doc: dict[str, Any], name: str) -> subprocess.Popen[bytes]:
        path = state / f"{name}.json"
        path.write_text(json.dumps(doc))
        sock = state / f"{name}.sock"
        return subprocess.Popen([binary, "--config", str(path), "--control-socket", str(sock), "--threads", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    try:
        procs.append(run(hub, "hub"))
        deadline = time.monotonic() + 20
        while not _listening(hub_host, port):
            if time.monotonic() > deadline:
                raise RuntimeError("the hub router did not listen")
            time.sleep(0.05)
        time.sleep(0.5)
        before = _rss({procs[0].pid})
        for i in range(count):
            spoke = _doc(f"spoke{i}")
            spoke["tlsProfiles"] = [{"name": "hub", "files": ca.issue(f"spoke{i}", f"spoke{i}-uid", client=True)}]
            spoke["links"] = [{"name": "hub", "host": hub_host, "port": port, "tlsProfile": "hub"}]
            procs.append(run(spoke, f"spoke{i}"))
        time.sleep(3 + count * 0.05)       # links up, advertisements exchanged
        after = _rss({procs[0].pid})
        per_link = (after - before) / count
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
            p.kill()
    return {"links": count, "hub_rss_before_bytes": before, "hub_rss_after_bytes": after,
            "bytes_per_idle_link": round(per_link), "data_connections_per_link": 2}


def _ratios(result: dict[str, Any]) -> dict[str, Any]:
    """Rust / HAProxy per measurement (and Rust / direct for one stream), and the goals of issues 21 and 45 (judged
    on the ratios as measured, reported rounded)."""
    raw: dict[str, dict[str, float]] = {}
    goals: dict[str, Any] = {}
    for topology in ("one_hop", "two_hops"):
        r = result.get(topology, {})
        ratio: dict[str, float] = {}
        if "throughput" in r:
            t = r["throughput"]
            ratio["throughput"] = t["rust"]["gbit_per_s"] / t["haproxy"]["gbit_per_s"]
            ratio["of_direct"] = t["rust"]["gbit_per_s"] / t["direct"]["gbit_per_s"]
            ratio["cpu_per_gb"] = t["rust"]["router_cpu_seconds_per_gb"] / t["haproxy"]["router_cpu_seconds_per_gb"]
            for name in FLOORS.get(topology, {}):
                # the reference relays (relay_floor.py): the router's building blocks without its design; with
                # records moved in place, the least a TLS relay does per byte (with TCP's buffers, then a window's)
                if "gbit_per_s" in t.get(name, {}):
                    ratio[f"of_{name}"] = t["rust"]["gbit_per_s"] / t[name]["gbit_per_s"]
                    ratio[f"{name}_of_direct"] = t[name]["gbit_per_s"] / t["direct"]["gbit_per_s"]
                    ratio[f"{name}_over_haproxy"] = t[name]["gbit_per_s"] / t["haproxy"]["gbit_per_s"]
        if "connections" in r:
            c = r["connections"]
            ratio["connections_per_s"] = c["rust"]["connections_per_s"] / c["haproxy"]["connections_per_s"]
            ratio["cpu_per_connection"] = (c["rust"]["router_cpu_us_per_connection"]
                                           / max(1, c["haproxy"]["router_cpu_us_per_connection"]))
        raw[topology] = ratio
        out: dict[str, Any] = {k: round(v, 3 if k in ("of_direct", "cpu_per_connection") or k.startswith("of_floor")
                                        or (k.startswith("floor") and k.endswith("_of_direct")) else 2)
                               for k, v in ratio.items()}
        if "latency" in r:
            out["added_p99_us"] = {"rust": r["latency"]["rust"]["added_p99_us"],
                                   "haproxy": r["latency"]["haproxy"]["added_p99_us"]}
        goals[topology] = out
    two, one = raw.get("two_hops", {}), raw.get("one_hop", {})
    met: dict[str, bool] = {}
    if "connections_per_s" in two:
        met["two_hops_connections_ge_5x"] = two["connections_per_s"] >= 5
        met["two_hops_cpu_per_connection_le_one_fifth"] = two["cpu_per_connection"] <= 0.2
    if "throughput" in two:
        met["two_hops_throughput_ge_1x"] = two["throughput"] >= 1
        met["two_hops_cpu_per_gb_le_1x"] = two["cpu_per_gb"] <= 1
        # issue 45
        met["two_hops_throughput_ge_1_5x"] = two["throughput"] >= 1.5
        met["two_hops_throughput_ge_20_pct_of_direct"] = two["of_direct"] >= 0.2
    if "throughput" in one:
        met["one_hop_throughput_ge_0_9x"] = one["throughput"] >= 0.9
        met["one_hop_throughput_ge_60_pct_of_direct"] = one["of_direct"] >= 0.6
    if "connections_per_s" in one:
        met["one_hop_connections_ge_1x"] = one["connections_per_s"] >= 1
    added = goals.get("one_hop", {}).get("added_p99_us")
    if added:
        met["one_hop_added_p99_le_haproxy"] = added["rust"] <= added["haproxy"]
    memory = result.get("two_hops", {}).get("memory_per_connection", {}).get("rust")
    if memory:
        met["memory_per_connection_le_64_kib"] = memory["bytes_per_connection_per_router"] <= 64 * 1024
        met["memory_per_connection_le_4_kib"] = memory["bytes_per_connection_per_router"] <= 4 * 1024
    if "idle_links" in result:
        met["memory_per_idle_link_le_2_mib"] = result["idle_links"]["bytes_per_idle_link"] <= 2 * 1024 * 1024
    # beside the goals set as shares of direct, what the reference relays that copy nothing carried in the same run:
    # spliced on one hop; on two hops with a window's bytes in flight (the bound the router keeps), then with TCP's
    beside: dict[str, Any] = {}
    for key, shares, goal, names in (("one_hop_throughput_ge_60_pct_of_direct", one, 0.6, ("floor",)),
                                     ("two_hops_throughput_ge_20_pct_of_direct", two, 0.2,
                                      ("floor_window", "floor_records"))):
        found = {name: {"of_direct": round(shares[f"{name}_of_direct"], 3),
                        "meets_goal": shares[f"{name}_of_direct"] >= goal,
                        "router_of_it": round(shares[f"of_{name}"], 3)}
                 for name in names if f"{name}_of_direct" in shares}
        if found:
            beside[key] = {"router_of_direct": round(shares["of_direct"], 3), **found}
    return {"rust_over_haproxy": goals, "goals_met": met, "goals_beside_references": beside}


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    haproxy = hb.find_haproxy()
    wrk = hb.find_wrk()
    state = Path(tempfile.mkdtemp(prefix="dp-bench-", dir="/tmp"))
    backends = {k: rb._free_port(rb.BACKEND) for k in KINDS}
    procs: list[subprocess.Popen[Any]] = []
    result: dict[str, Any] = {}
    try:
        # what the machine allows a relay, measured first, alone (machine_limits.py): beside the streams' results
        limits = None
        if "throughput" in args.only:
            _progress("the machine's wake-up cost and cipher figures")
            limits = await asyncio.to_thread(machine_limits.measure)
        procs.append(rb._start_backend("sink", rb.BACKEND, backends["sink"]))
        procs.append(rb._start_backend("echo", rb.BACKEND, backends["echo"]))
        procs.append(hb.http_responder(haproxy, rb.BACKEND, backends["http"], state))
        procs.append(_concurrent_echo(rb.BACKEND, backends["idle"]))
        for topology in args.topologies:
            async with contextlib.AsyncExitStack() as stack:
                nets = {}
                for engine in ENGINES:
                    docs = (_two_hop_documents(state / f"{topology}-{engine}", HOSTS[engine], backends)
                            if topology == "two_hops" else _one_hop_documents(HOSTS[engine], backends))
                    nets[engine] = await stack.enter_async_context(
                        _network(state / f"{topology}-{engine}", engine, docs, haproxy))
                floors: dict[str, rf.Relays] = {}
                why: dict[str, str] = {}
                for name, options in FLOORS[topology].items() if "throughput" in args.only else ():
                    # the reference relays in the routers' places, sides of the throughput runs: the router's
                    # splice and TLS code without its design (a build of the example, when missing, off the loop)
                    certs = (_two_hop_documents(state / f"{topology}-{name}", HOSTS[name], backends)
                             if topology == "two_hops" else None)
                    try:
                        floors[name] = await asyncio.to_thread(
                            functools.partial(rf.start, stack, topology, HOSTS[name], backends, certs, **options))
                    except (RuntimeError, OSError) as e:
                        why[name] = str(e)[:500]
                result[topology] = await asyncio.to_thread(_measure, args, wrk, backends, nets, topology, floors)
                for name, reason in why.items():
                    result[topology]["throughput"][name] = {"unavailable": reason}
        if "memory" in args.only:
            _progress("memory per idle link")
            result["idle_links"] = await asyncio.to_thread(_idle_links, state, args.links)
        result.update(_ratios(result))
        result["machine"] = machine(args, haproxy=hb.version(haproxy))
        if limits is not None:
            result["machine"]["limits"] = limits
        return result
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(state, ignore_errors=True)


def add_measure_arguments(parser: argparse.ArgumentParser, *, seconds: float, round_trips: int, sides: str) -> None:
    """The options ``measure_sides`` reads (but ``--only``): durations, sizes and rounds."""
    parser.add_argument("--seconds", type=float, default=seconds, help="duration of each throughput/rate run")
    parser.add_argument("--max-gib", type=float, default=20.0, help="cap of bytes per throughput run")
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients of the connection-rate run")
    parser.add_argument("--round-trips", type=int, default=round_trips, help="round trips per latency run")
    parser.add_argument("--repeats", type=int, default=3, help=f"rounds of {sides} runs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_measure_arguments(parser, seconds=3.0, round_trips=20000, sides="direct, HAProxy and Rust")
    parser.add_argument("--idle", type=int, default=2000, help="idle connections held for the memory measure")
    parser.add_argument("--links", type=int, default=20, help="routers linked to one for the per-link memory")
    parser.add_argument("--topologies", default="one_hop,two_hops", help="one_hop, two_hops or both")
    parser.add_argument("--only", default=",".join(MEASUREMENTS),
                        help=f"comma-separated subset of {','.join(MEASUREMENTS)}")
    args = parser.parse_args()
    args.only = {m.strip() for m in args.only.split(",") if m.strip()}
    args.topologies = [t.strip() for t in args.topologies.split(",") if t.strip()]
    if args.only - set(MEASUREMENTS) or set(args.topologies) - {"one_hop", "two_hops"}:
        parser.error("unknown measurement or topology")
    print(json.dumps(asyncio.run(_main(args)), indent=2))


if __name__ == "__main__":
    main()
