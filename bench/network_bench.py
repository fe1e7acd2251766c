"""Service network across sites: a client at West reaches backends at East through Middle (two mutual-TLS links,
three routers), through the Rust routers (each with its adaptor) and through the HAProxy baseline (three HAProxy
processes rendered from the same router documents by ``haproxy_baseline.py``), against direct connections to the
backends, in the same run, alternating; JSON on stdout.

Measured as in ``router_bench.py`` (whose backends and measurement functions this reuses), each over both networks'
two hops and directly:
- ``throughput``: one TCP stream to a sink, Gbit/s;
- ``connections``: new connections per second with 50 concurrent clients (``wrk``, ``Connection: close``): each
  is a new TCP connection at West; through HAProxy also a new TLS connection on each of the two hops (resumed
  sessions), through the Rust routers a new stream on each link already up;
- ``latency``: 64-byte round trips on one established connection, p50/p99 in microseconds.
Also the TLS statistics of HAProxy's Middle and East after the connection run (``show info``): the share of resumed
sessions and the handshakes that needed a key exchange; the CPU time each network's three router processes used
per new connection and per GB carried (``/proc``), which varies less than rates on a shared machine; and the CPU
time the sender (this process) and the sink used per GB, directly and over the two hops (what is left of two CPUs
for the routers). The links speak TLS 1.3 (the default); the connection rate is measured once more with links
pinned to TLS 1.2 (``links[].tlsVersion: "1.2"``, ``routerAccess[].minTlsVersion: "1.2"``), whose resumed
handshakes need no key exchange (HAProxy's hops).

The routers, the clients and the backends share the machine's CPUs. Each router runs its default number of
threads (one per CPU) unless ``--threads N`` sets ``router.threads`` (HAProxy's ``nbthread`` for the baseline).

``plain_chain``: the throughput once more through three plain HAProxy processes on the baseline's addresses (no TLS,
the same buffer size), without and with splicing: the floor that copying every byte through three user-space
proxies sets on these CPUs before any encryption. ``--only throughput,connections,latency,tls12,plain_chain`` runs a
subset; ``--buffer-size N`` sets ``router.bufferSize`` (HAProxy ``tune.bufsize``; the baseline's default in a
network is 64 KiB), to compare buffer sizes.

Goals (issue 12), for the Rust routers (HAProxy's reported beside them): >= 25 % of direct throughput; >= 1,000 new
connections/s across the two links. Every address is on loopback (HAProxy: West 127.0.60.200, Middle 127.0.61.200,
East 127.0.62.200; Rust: 127.0.63-65.200; backends 127.0.50.201); every loop is bounded. Run it alone: ``flock
/tmp/heavy.lock python bench/network_bench.py``.
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
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import haproxy_baseline as hb
import router_bench as rb

from service_network.router.names import CONTROL_SNI, KEY_SNI_WILDCARD
from service_network.router.rust_adaptor import RustAdaptor
from service_network.router.sources import FileConfigSource
from service_network.site import pki

MEASUREMENTS = ("throughput", "connections", "latency", "tls12", "plain_chain")
ENGINES = ("haproxy", "rust")
HOSTS = {"haproxy": {"west": "127.0.60.200", "middle": "127.0.61.200", "east": "127.0.62.200"},
         "rust": {"west": "127.0.63.200", "middle": "127.0.64.200", "east": "127.0.65.200"}}
KINDS = ("sink", "echo", "http")


def _documents(state: Path, hosts: dict[str, str], backend_ports: dict[str, int], tls: str, router: dict[str, int]
               ) -> dict[str, dict[str, Any]]:
    """Router documents: West (Listeners, link to Middle), Middle (access, link to East), East (access, Connectors);
    certificates made as the site controller makes them (``pki``)."""
    cas = {name: _CA(state / f"{name}-ca", pki.new_ca(f"{name}-ca")) for name in ("middle", "east")}
    docs: dict[str, dict[str, Any]] = {}
    for name in hosts:
        docs[name] = {"version": 1, "site": {"id": f"{name}-uid", "name": name}, "tlsProfiles": [],
                      "listeners": [], "connectors": [], "links": [],
                      "router": dict(router)}
    for name in ("middle", "east"):
        cert, key = cas[name].issue(f"{name}-access", cn=f"{name}-uid", dns=(KEY_SNI_WILDCARD, CONTROL_SNI),
                                    ips=(hosts[name],))
        docs[name]["tlsProfiles"].append({"name": "site", "files": {
            "ca": str(cas[name].ca_file), "cert": str(cert), "key": str(key)}})
        docs[name]["routerAccess"] = [{"name": "inter-router", "host": hosts[name], "minTlsVersion": tls,
                                       "port": rb._free_port(hosts[name]), "tlsProfile": "site"}]
    for src, dst in (("west", "middle"), ("middle", "east")):
        cert, key = cas[dst].issue(f"{src}-to-{dst}", cn=f"{src}-uid", client=True)
        docs[src]["tlsProfiles"].append({"name": f"to-{dst}", "files": {
            "ca": str(cas[dst].ca_file), "cert": str(cert), "key": str(key)}})
        docs[src]["links"].append({"name": f"to-{dst}", "host": hosts[dst],
                                   "port": docs[dst]["routerAccess"][0]["port"], "tlsProfile": f"to-{dst}",
                                   "cost": 1, "tlsVersion": tls})
    docs["east"]["connectors"] = [{"name": k, "routingKey": k, "port": backend_ports[k],
                                   "targets": [{"host": rb.BACKEND}]} for k in KINDS]
    docs["west"]["listeners"] = [{"name": k, "routingKey": k, "host": hosts["west"],
                                  "port": rb._free_port(hosts["west"])} for k in KINDS]
    return docs


class _CA:
    """A site CA whose certificates are written as PEM files for the router documents; a certificate's common name
    is its holder's site id, as the site controller issues them (the Rust router binds router ids to it)."""

    def __init__(self, directory: Path, pair: pki.KeyPair) -> None:
        self.dir, self.pair = directory, pair
        directory.mkdir(parents=True, exist_ok=True)
        self.ca_file = directory / "ca.crt"
        self.ca_file.write_bytes(pair.cert)

    def issue(self, name: str, *, cn: str, dns: tuple[str, ...] = (), ips: tuple[str, ...] = (),
              client: bool = False) -> tuple[Path, Path]:
        issued = pki.issue(self.pair, cn, dns=dns, ips=ips, client=client, server=not client)
        cert, key = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        cert.write_bytes(issued.cert)
        key.write_bytes(issued.key)
        return cert, key


def _stat(proc_dir: Path) -> tuple[int, int] | None:
    """A process's group and the CPU clock ticks (user + system) it used so far; None once it is gone."""
    try:
        fields = (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[2]), int(fields[11]) + int(fields[12])


class _Network:
    """One engine's three routers: their processes (for CPU time), West's Listeners, and HAProxy's ``show info``
    (the baseline only)."""

    def __init__(self, engine: str, pids: Callable[[], set[int]], listeners: dict[str, int],
                 baselines: dict[str, hb.Baseline] | None = None) -> None:
        self.engine, self._pids, self.listeners, self.baselines = engine, pids, listeners, baselines

    @property
    def west(self) -> str:
        return HOSTS[self.engine]["west"]

    def cpu_seconds(self) -> float:
        return _process_cpu_seconds(self._pids())

    def ssl_info(self) -> dict[str, dict[str, int]] | None:
        if self.baselines is None:
            return None
        keys = ("CumSslConns", "SslFrontendSessionReuse_pct", "SslFrontendKeyRate", "SslFrontendMaxKeyRate",
                "SslBackendMaxKeyRate")
        return {name: {k: int(info[k]) for k in keys}
                for name in ("middle", "east") if (info := self.baselines[name].info())}


def _plain_chain(haproxy: str, state: Path, sink_port: int, buffer_size: int, splice: bool
                 ) -> tuple[list[subprocess.Popen[bytes]], int]:
    """Three plain HAProxy processes in a row on the baseline's addresses (no TLS, no adaptor) in front of the sink:
    what three hops of copying cost alone. Returns the processes and the first one's port."""
    procs: list[subprocess.Popen[bytes]] = []
    target = (rb.BACKEND, sink_port)
    hosts = HOSTS["haproxy"]
    try:
        for name in ("east", "middle", "west"):
            port = rb._free_port(hosts[name])
            cfg = state / f"plain-{name}.cfg"
            cfg.write_text(
                f"global\n    maxconn 1000\n    tune.bufsize {buffer_size}\n    tune.pipesize 262144\n"
                "defaults\n    mode tcp\n    timeout client 1m\n    timeout server 1m\n    timeout connect 5s\n"
                + ("    option splice-request\n    option splice-response\n" if splice else "")
                + f"listen hop\n    bind {hosts[name]}:{port}\n    server next {target[0]}:{target[1]}\n")
            procs.append(subprocess.Popen([haproxy, "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
            target = (hosts[name], port)
            deadline = time.monotonic() + 10
            while not _listening(*target):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"plain HAProxy {name} did not start")
                time.sleep(0.05)
    except BaseException:
        for proc in procs:
            proc.kill()
            proc.wait()
        raise
    return procs, target[1]


def _listening(host: str, port: int) -> bool:
    """Whether a socket listens on ``host:port`` (``/proc/net/tcp``; a test connection would reach the sink)."""
    local = f"{socket.inet_aton(host)[::-1].hex().upper()}:{port:04X}"
    with open("/proc/net/tcp") as table:
        return any(f[1] == local and f[3] == "0A" for f in (line.split() for line in table) if len(f) > 3)


def _plain_chain_throughput(args: argparse.Namespace, haproxy: str, state: Path, sink_port: int,
                            endpoints: set[int]) -> dict[str, Any]:
    """Single-stream throughput through three plain HAProxies (no TLS) without and with splicing, against direct,
    alternating: the floor that copying through three user-space proxies sets before any encryption."""
    max_bytes = int(args.max_gib * 1024**3)
    buffer_size = args.buffer_size or hb.NETWORK_BUFFER_SIZE
    out: dict[str, Any] = {"buffer_size": buffer_size}
    for splice in (False, True):
        procs, port = _plain_chain(haproxy, state, sink_port, buffer_size, splice)
        try:
            pids = {p.pid for p in procs}
            runs: dict[str, list[float]] = {"direct": [], "chain": []}
            chain_bytes, chain_cpu, endpoint_cpu = 0.0, 0.0, 0.0
            for _ in range(args.repeats):
                runs["direct"].append(rb._throughput(sink_port, rb.BACKEND, args.seconds, max_bytes)["gbit_per_s"])
                before, before_endpoints = _process_cpu_seconds(pids), _process_cpu_seconds(endpoints)
                run = rb._throughput(port, HOSTS["haproxy"]["west"], args.seconds, max_bytes)
                chain_cpu += _process_cpu_seconds(pids) - before
                endpoint_cpu += _process_cpu_seconds(endpoints) - before_endpoints
                runs["chain"].append(run["gbit_per_s"])
                chain_bytes += run["bytes"]
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
        direct, chain = sorted(runs["direct"]), sorted(runs["chain"])
        out["splice" if splice else "no_splice"] = {
            "direct_gbit_per_s": direct[len(direct) // 2], "chain_gbit_per_s": chain[len(chain) // 2],
            "all_chain_gbit_per_s": runs["chain"], "all_direct_gbit_per_s": runs["direct"],
            "chain_percent_of_direct": round(100 * chain[len(chain) // 2] / direct[len(direct) // 2], 1),
            "proxies_cpu_seconds_per_gb": round(chain_cpu / (chain_bytes / 1e9), 3),
            "sender_and_sink_cpu_seconds_per_gb": round(endpoint_cpu / (chain_bytes / 1e9), 3)}
    return out


def _process_cpu_seconds(pids: set[int]) -> float:
    """CPU time (user + system) used so far by the given processes."""
    stats = (_stat(Path(f"/proc/{pid}")) for pid in pids)
    return sum(stat[1] for stat in stats if stat is not None) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def _networks(state: Path, haproxy: str, ports: dict[str, int], tls: str, router: dict[str, int]
                    ) -> AsyncIterator[dict[str, _Network]]:
    """Both engines' West, Middle and East running (the Rust routers' adaptors in this process), each West's
    Listeners accepting (routed to East)."""
    async with contextlib.AsyncExitStack() as stack:
        nets: dict[str, _Network] = {}
        docs = _documents(state / f"haproxy-tls-{tls}", HOSTS["haproxy"], ports, tls, router)
        baselines = await asyncio.to_thread(stack.enter_context,
                                            hb.network(haproxy, state / f"haproxy-{tls}", docs))
        nets["haproxy"] = _Network("haproxy", lambda: {b.pid for b in baselines.values()},
                                   {x["name"]: x["port"] for x in docs["west"]["listeners"]}, baselines)
        docs = _documents(state / f"rust-tls-{tls}", HOSTS["rust"], ports, tls, router)
        adaptors = await stack.enter_async_context(_rust_routers(state / f"rust-{tls}", docs))
        nets["rust"] = _Network("rust", lambda: {a.plane.pid for a in adaptors.values() if a.plane.pid is not None},
                                {x["name"]: x["port"] for x in docs["west"]["listeners"]})
        deadline = time.monotonic() + 30
        for net in nets.values():
            while not all(_listening(net.west, p) for p in net.listeners.values()):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{net.engine}: West's Listeners not all accepting after 30 s")
                await asyncio.sleep(0.05)
        yield nets


@contextlib.asynccontextmanager
async def _rust_routers(state: Path, docs: dict[str, dict[str, Any]]) -> AsyncIterator[dict[str, RustAdaptor]]:
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    adaptors: dict[str, RustAdaptor] = {}
    await asyncio.to_thread(state.mkdir, parents=True, exist_ok=True)
    try:
        for name in ("east", "middle", "west"):
            path = state / f"{name}.json"
            path.write_text(json.dumps(docs[name]))
            adaptor = RustAdaptor(FileConfigSource(path), state / name)
            adaptors[name] = adaptor
            tasks.append(asyncio.create_task(adaptor.run(stop)))
            await asyncio.wait_for(adaptor.applied.wait(), 30)
        yield adaptors
    finally:
        stop.set()
        for t in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t, 30)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    haproxy = hb.find_haproxy()
    wrk = hb.find_wrk()
    state = Path(tempfile.mkdtemp(prefix="snn-bench-", dir="/tmp"))
    ports = {k: rb._free_port(rb.BACKEND) for k in KINDS}
    procs: list[subprocess.Popen[Any]] = []
    try:
        procs.append(rb._start_backend("sink", rb.BACKEND, ports["sink"]))
        procs.append(rb._start_backend("echo", rb.BACKEND, ports["echo"]))
        procs.append(hb.http_responder(haproxy, rb.BACKEND, ports["http"], state))
        endpoints = {os.getpid(), procs[0].pid}
        result: dict[str, Any] = {}
        if set(args.only) - {"tls12", "plain_chain"}:
            async with _networks(state, haproxy, ports, "1.3", args.router) as nets:
                result = await _measure(args, wrk, ports, nets, endpoints)
        if "tls12" in args.only:
            result["connections_tls12_links"] = await _tls12_connections(args, wrk, state, haproxy, ports)
        if "plain_chain" in args.only:
            result["plain_chain_throughput"] = await asyncio.to_thread(
                _plain_chain_throughput, args, haproxy, state, ports["sink"], endpoints)
        result["goals"] = _goals(result)
        result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "haproxy": hb.version(haproxy), "openssl": hb.openssl_version(haproxy),
                             "router_threads": args.threads or "the default (one per CPU)",
                             "router_buffer_size": args.buffer_size or "the router's default",
                             "load_average": os.getloadavg()}
        return result
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(state, ignore_errors=True)


async def _tls12_connections(args: argparse.Namespace, wrk: str, state: Path, haproxy: str, ports: dict[str, int]
                             ) -> dict[str, Any]:
    """The connection rate once more with the links pinned to TLS 1.2 (HAProxy's hops resume without a key
    exchange), both engines in turn."""
    async with _networks(state, haproxy, ports, "1.2", args.router) as nets:
        out: dict[str, Any] = {}
        runs: dict[str, list[dict[str, Any]]] = {engine: [] for engine in nets}
        cpu = dict.fromkeys(nets, 0.0)
        for _ in range(args.repeats):
            for engine, net in nets.items():
                before = net.cpu_seconds()
                runs[engine].append(await asyncio.to_thread(
                    rb._wrk, wrk, net.listeners["http"], net.west, args.seconds, args.clients))
                cpu[engine] += net.cpu_seconds() - before
        for engine, rate in runs.items():
            rate.sort(key=lambda r: r["connections_per_s"])
            out[engine] = {**rate[len(rate) // 2], "all_connections_per_s": [r["connections_per_s"] for r in rate],
                           "router_cpu_us_per_connection": round(
                               cpu[engine] * 1e6 / max(1, sum(r["connections"] for r in rate)))}
        out["haproxy"]["tls"] = await asyncio.to_thread(nets["haproxy"].ssl_info)
        return out


def _goals(result: dict[str, Any]) -> dict[str, bool]:
    """Issue 12's goals, for the Rust routers, for what was measured."""
    goals: dict[str, bool] = {}
    if "throughput" in result:
        goals["throughput_ge_25_percent"] = result["throughput"]["rust_percent_of_direct"] >= 25
    if "connections" in result:
        goals["connections_ge_1000_per_s"] = result["connections"]["rust"]["connections_per_s"] >= 1000
    if "connections_tls12_links" in result:
        goals["connections_ge_1000_per_s_tls12_links"] = (
            result["connections_tls12_links"]["rust"]["connections_per_s"] >= 1000)
    return goals


async def _measure(args: argparse.Namespace, wrk: str, ports: dict[str, int], nets: dict[str, _Network],
                   endpoints: set[int]) -> dict[str, Any]:
    max_bytes = int(args.max_gib * 1024**3)

    def each(fn: Any, kind: str, key: str, *a: Any) -> dict[str, Any]:
        """Direct, HAProxy and Rust runs in turn, ``--repeats`` times: per side the run with the median ``key``,
        every value, the totals, the routers' CPU time and the client's and sink's."""
        runs: dict[str, list[dict[str, Any]]] = {"direct": [], **{engine: [] for engine in nets}}
        cpu = dict.fromkeys(nets, 0.0)
        endpoint_cpu = dict.fromkeys(runs, 0.0)
        for _ in range(args.repeats):
            for side in runs:
                net = nets.get(side)
                before, before_endpoints = (net.cpu_seconds() if net else 0.0), _process_cpu_seconds(endpoints)
                port, host = (net.listeners[kind], net.west) if net else (ports[kind], rb.BACKEND)
                runs[side].append(fn(port, host, *a))
                endpoint_cpu[side] += _process_cpu_seconds(endpoints) - before_endpoints
                if net:
                    cpu[side] += net.cpu_seconds() - before
        out: dict[str, Any] = {"router_cpu_seconds": cpu, "endpoint_cpu_seconds": endpoint_cpu, "totals": {}}
        for side, results in runs.items():
            results.sort(key=lambda r: r[key])
            out[side] = {**results[len(results) // 2], f"all_{key}": [r[key] for r in results]}
            out["totals"][side] = {k: sum(r[k] for r in results) for k in ("bytes", "connections") if k in results[0]}
        out["rust_over_haproxy"] = round(out["rust"][key] / max(out["haproxy"][key], 1e-9), 2)
        return out

    result: dict[str, Any] = {"path": "client -> West -> (mTLS) -> Middle -> (mTLS) -> East -> backend"}
    if "throughput" in args.only:
        tp = await asyncio.to_thread(each, rb._throughput, "sink", "gbit_per_s", args.seconds, max_bytes)
        totals, cpu, endpoint_cpu = tp.pop("totals"), tp.pop("router_cpu_seconds"), tp.pop("endpoint_cpu_seconds")
        for engine in nets:
            tp[f"{engine}_percent_of_direct"] = round(100 * tp[engine]["gbit_per_s"] / tp["direct"]["gbit_per_s"], 1)
            tp[engine]["router_cpu_seconds_per_gb"] = round(cpu[engine] / (totals[engine]["bytes"] / 1e9), 3)
        tp["client_and_sink_cpu_seconds_per_gb"] = {
            side: round(endpoint_cpu[side] / (totals[side]["bytes"] / 1e9), 3) for side in totals}
        result["throughput"] = tp
    if "connections" in args.only:
        conns = await asyncio.to_thread(each, lambda p, h: rb._wrk(wrk, p, h, args.seconds, args.clients), "http",
                                        "connections_per_s")
        totals, cpu = conns.pop("totals"), conns.pop("router_cpu_seconds")
        conns.pop("endpoint_cpu_seconds")
        for engine in nets:
            conns[engine]["router_cpu_us_per_connection"] = round(
                cpu[engine] * 1e6 / max(1, totals[engine]["connections"]))
        conns["clients"] = args.clients
        conns["tool"] = "wrk 4 (Debian), 2 threads, Connection: close"
        result["connections"] = conns
        result["haproxy_tls_after_connection_runs"] = await asyncio.to_thread(nets["haproxy"].ssl_info)
    if "latency" in args.only:
        lat = await asyncio.to_thread(each, rb._latency, "echo", "p99_us", args.round_trips, args.seconds * 3)
        for k in ("router_cpu_seconds", "totals", "endpoint_cpu_seconds"):
            lat.pop(k)
        for engine in nets:
            lat[engine]["added_p50_us"] = round(lat[engine]["p50_us"] - lat["direct"]["p50_us"], 1)
            lat[engine]["added_p99_us"] = round(lat[engine]["p99_us"] - lat["direct"]["p99_us"], 1)
        result["latency"] = lat
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each throughput/rate run")
    parser.add_argument("--max-gib", type=float, default=20.0, help="cap of bytes per throughput run")
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients of the connection-rate run")
    parser.add_argument("--round-trips", type=int, default=20000, help="round trips per latency run")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of direct, HAProxy and Rust runs of each measurement")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads per router (router.threads; HAProxy's nbthread); 0 (default): one per CPU")
    parser.add_argument("--buffer-size", type=int, default=0,
                        help="buffer size per router (router.bufferSize; HAProxy's tune.bufsize); 0 (default): the "
                             "routers' default")
    parser.add_argument("--only", default=",".join(MEASUREMENTS),
                        help=f"comma-separated subset of {','.join(MEASUREMENTS)} (default: all)")
    args = parser.parse_args()
    args.threads = args.threads or None
    args.router = {k: v for k, v in (("threads", args.threads), ("bufferSize", args.buffer_size)) if v}
    args.only = {m.strip() for m in args.only.split(",") if m.strip()}
    if not args.only or args.only - set(MEASUREMENTS):
        parser.error(f"--only takes a comma-separated subset of {','.join(MEASUREMENTS)}")
    print(json.dumps(asyncio.run(_main(args)), indent=2))


if __name__ == "__main__":
    main()
