"""Mixed paths (our router beside upstream's skrouterd 3.5.1) against upstream-only paths, in one run, alternating;
JSON on stdout (issue 43, item 7).

A path is a chain of routers West -> ... -> East, each ``up`` (upstream's skupper-router 3.5.1, configured as
upstream's controller writes ``skrouterd.json``) or ``ours`` (this router, with its adaptor as in a router Pod):
the client connects to West's listener (skrouterd's ``tcpListener``, our Listener), East's connectors
(``tcpConnector``, Connector) reach the backends. Each router dials the next over mutual TLS, as users link sites:
skrouterd to skrouterd an ``inter-router`` connector to an ``inter-router`` listener (``sslProfile``, SASL
``EXTERNAL``, ``authenticatePeer``); ours to skrouterd a Link to that listener (AMQP); skrouterd to ours its
connector to our router access (AMQP); ours to ours a Link (our native protocol). Paths:

- one hop (two routers): ``up-up`` (upstream only), ``ours-up`` and ``up-ours`` (mixed), ``ours-ours``;
- two hops (three routers): ``up-up-up`` (upstream only), ``up-ours-up`` (ours in the middle), ``ours-up-up`` and
  ``up-up-ours`` (ours at an end), ``ours-ours-ours``.

The ``ours-*`` only paths are a reference (``--paths`` picks any). Every network of a topology runs throughout its
measurements; a path that does not carry bytes (a network that does not route its keys within ``--ready-seconds``,
e.g. transit through our router between two skrouterds where it is not built) is reported with the reason and left
out. Measured as ``dataplane_bench.py`` measures (its machinery): ``throughput`` (one stream to a sink; router CPU
per GB in all and per router process), ``connections`` (new connections per second, wrk with ``Connection:
close``; router CPU per connection), ``latency`` (64-byte round trips, p50/p99), each as ``--repeats`` rounds of
direct and every path in turn, medians. ``mixed_over_upstream`` gives, per mixed path, its ratio to the upstream-only
path of the same length for each measure, and ``goals_met`` the issue's goal: a path through one of our routers is
not slower (throughput and connections/s >= 1x, p50/p99 <= 1x). Loopback only (127.0.0.1 and the backends'
127.0.50.201); every loop is bounded in count and time. Run it alone: ``flock /tmp/heavy.lock python
bench/mixed_bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dataplane_bench as db
import haproxy_baseline as hb
import router_bench as rb

from devenv.upstream_images import peers_dir
from service_network.router.names import CONTROL_SNI, KEY_SNI_WILDCARD

ROLES = ("west", "middle", "east")
PATHS = {"one_hop": ("up-up", "ours-up", "up-ours", "ours-ours"),
         "two_hops": ("up-up-up", "up-ours-up", "ours-up-up", "up-up-ours", "ours-ours-ours")}
DEFAULT_PATHS = tuple(p for paths in PATHS.values() for p in paths if "up" in p.split("-"))
MEASURES = ("throughput", "connections", "latency")
#: the backends every path reaches (router_bench's sink and echo, HAProxy answering HTTP)
KINDS = ("sink", "echo", "http")
#: where the routers listen; skrouterd's connectors dial ``localhost`` (its certificate check wants a host name)
HOST, DIAL_HOST = "127.0.0.1", "localhost"
#: the common name of upstream's router access certificate, the same on every upstream site
UP_SERVER_CN = "skupper-router"


class PeersMissing(Exception):
    """Upstream's router is not on this machine."""


def skrouterd_home() -> Path:
    """skupper-router 3.5.1's directory among the peers (``$UPSTREAM_PEERS``, else ``shared/peers`` beside the
    checkout); PeersMissing names what is missing."""
    home = peers_dir() / "skupper-router-3.5.1"
    if not (home / "sbin" / "skrouterd").is_file():
        raise PeersMissing(f"upstream's router is missing: {home}/sbin/skrouterd does not exist "
                           "(../shared/peers/ beside the checkout, or $UPSTREAM_PEERS)")
    return home


def parse_path(name: str) -> tuple[str, ...]:
    """The routers of a path, West first; ValueError names what is wrong."""
    kinds = tuple(name.split("-"))
    if name not in PATHS["one_hop"] + PATHS["two_hops"]:
        raise ValueError(f"{name!r}: a path is one of {', '.join(PATHS['one_hop'] + PATHS['two_hops'])}")
    return kinds


def topology(kinds: tuple[str, ...]) -> str:
    return "one_hop" if len(kinds) == 2 else "two_hops"


# --- configurations: pure, from the path and where things are -------------------------------------------------------

@dataclass
class Router:
    """One router of a path: what it is, and what it is given: its document (ours) or its entities (skrouterd)."""

    name: str
    kind: str
    uid: str
    listeners: dict[str, int] = field(default_factory=dict)
    config: Any = None


def _names(kinds: tuple[str, ...]) -> tuple[str, ...]:
    return ("west", "east") if len(kinds) == 2 else ROLES


def skrouterd_entities(router_id: str, uid: str) -> list[Any]:
    """skrouterd's ``router`` entity as upstream's controller writes it (``internal/qdr``: interior, its Site's uid
    in the metadata, HELLO max age 3 s)."""
    metadata = json.dumps({"id": uid, "version": "2.2.1"})
    return [["router", {"id": router_id, "mode": "interior", "helloMaxAgeSeconds": "3", "metadata": metadata}]]


def ssl_profile(name: str, files: dict[str, str]) -> list[Any]:
    return ["sslProfile", {"name": name, "caCertFile": files["ca"], "certFile": files["cert"],
                           "privateKeyFile": files["key"]}]


def path_configs(state: Path, kinds: tuple[str, ...], backends: dict[str, int]) -> list[Router]:
    """The routers of a path with their configurations: each dials the next over mutual TLS with a certificate of
    the next one's site CA, West has a listener per backend kind, East a connector per kind."""
    names = _names(kinds)
    routers = [Router(name, kind, f"{name}-uid") for name, kind in zip(names, kinds, strict=True)]
    for r in routers:
        r.config = skrouterd_entities(f"{r.name}-skupper-router-0", r.uid) if r.kind == "up" else db._doc(r.name)
    for i, (dialer, far) in enumerate(itertools.pairwise(routers)):
        ca = db._CA(state / f"{far.name}-ca", f"{far.name}-ca")
        port = rb._free_port(HOST)
        if far.kind == "up":
            server = ca.issue(f"{far.name}-access", UP_SERVER_CN, dns=(DIAL_HOST,), ips=(HOST,))
            far.config += [ssl_profile("skupper-site-server", server),
                           ["listener", {"name": "skupper-inter-router", "host": HOST, "port": port,
                                         "role": "inter-router", "sslProfile": "skupper-site-server",
                                         "saslMechanisms": "EXTERNAL", "authenticatePeer": True}]]
        else:
            server = ca.issue(f"{far.name}-access", far.uid, dns=(KEY_SNI_WILDCARD, CONTROL_SNI, DIAL_HOST),
                              ips=(HOST,))
            far.config["tlsProfiles"].append({"name": "site", "files": server})
            far.config["routerAccess"] = [{"name": "inter-router", "host": HOST, "port": port, "tlsProfile": "site"}]
        client = ca.issue(f"{dialer.name}-to-{far.name}", dialer.uid, client=True)
        link = f"link-{i}-to-{far.name}"
        if dialer.kind == "up":
            dialer.config += [ssl_profile(f"{link}-profile", client),
                              ["connector", {"name": link, "host": DIAL_HOST, "port": port, "role": "inter-router",
                                             "sslProfile": f"{link}-profile", "cost": 1}]]
        else:
            dialer.config["tlsProfiles"].append({"name": link, "files": client})
            dialer.config["links"].append({"name": link, "host": HOST, "port": port, "tlsProfile": link, "cost": 1})
    west, east = routers[0], routers[-1]
    west.listeners = {k: rb._free_port(HOST) for k in KINDS}
    for k in KINDS:
        if west.kind == "up":
            west.config.append(["tcpListener", {"name": k, "host": HOST, "port": west.listeners[k], "address": k}])
        else:
            west.config["listeners"].append({"name": k, "routingKey": k, "host": HOST, "port": west.listeners[k]})
        if east.kind == "up":
            east.config.append(["tcpConnector", {"name": k, "host": rb.BACKEND, "port": backends[k], "address": k}])
        else:
            east.config["connectors"].append({"name": k, "routingKey": k, "port": backends[k],
                                              "targets": [{"host": rb.BACKEND}]})
    return routers


# --- running a path --------------------------------------------------------------------------------------------------

@dataclass
class Running:
    """A path's routers running: West's listener per kind, and each router's process id by name."""

    listeners: dict[str, int]
    pids: dict[str, int]
    logs: dict[str, Path]


@contextlib.contextmanager
def _skrouterd(home: Path, state: Path, name: str, entities: list[Any]) -> Iterator[subprocess.Popen[bytes]]:
    config, log = state / f"skrouterd-{name}.json", state / f"skrouterd-{name}.log"
    config.write_text(json.dumps(entities))
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(home / "sbin" / "skrouterd"), "-c", str(config),
                                 "-I", str(home / "lib" / "skupper-router" / "python")],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def running(home: Path, state: Path, routers: list[Router]) -> AsyncIterator[Running]:
    """Every router of a path started (East first); returns once started, not once routed (see ``carries``)."""
    await asyncio.to_thread(state.mkdir, parents=True, exist_ok=True)
    async with contextlib.AsyncExitStack() as stack:
        pids: dict[str, int] = {}
        logs: dict[str, Path] = {}
        ours = {r.name: r.config for r in routers if r.kind == "ours"}
        if ours:
            adaptors = await stack.enter_async_context(db._rust_routers(state, ours, None))
            pids.update(db._router_pids(dict(adaptors)))
        for r in reversed(routers):
            if r.kind == "up":
                proc = stack.enter_context(_skrouterd(home, state, r.name, r.config))
                pids[r.name] = proc.pid
                logs[r.name] = state / f"skrouterd-{r.name}.log"
        yield Running(routers[0].listeners, pids, logs)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _round_trip(port: int, timeout: float) -> bool:
    """Whether 64 bytes come back through ``port`` (the echo backend's Listener) within ``timeout``."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.sendall(b"x" * 64)
            got = b""
            while len(got) < 64:
                chunk = s.recv(64 - len(got))
                if not chunk:
                    return False
                got += chunk
            return True
    except OSError:
        return False


async def carries(net: Running, seconds: float) -> str | None:
    """None once the path carries bytes (West's listeners all accept, a round trip through to the echo backend);
    otherwise, after ``seconds``, why not."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if gone := [name for name, pid in net.pids.items() if not _alive(pid)]:
            last = {name: net.logs[name].read_text()[-400:] for name in gone if name in net.logs}
            return f"router {', '.join(gone)} exited ({last or 'our router: see its adaptor'})"
        if all(db._listening(HOST, p) for p in net.listeners.values()) and await asyncio.to_thread(
                _round_trip, net.listeners["echo"], 5):
            return None
        await asyncio.sleep(0.2)
    listening = {k: db._listening(HOST, p) for k, p in net.listeners.items()}
    errors = {name: lines for name, log in net.logs.items() if (lines := _errors(log))}
    return (f"no round trip through the path within {seconds:g} s (West's listeners accepting: {listening}"
            + (f"; skrouterd errors: {errors}" if errors else "") + ")")


def _errors(log: Path, most: int = 3) -> list[str]:
    """The last ``most`` error lines of a skrouterd log (each cut to 300 characters), for a path that did not carry."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line[:300] for line in lines if "(error)" in line][-most:]


# --- measuring and comparing -----------------------------------------------------------------------------------------

def ratios(result: dict[str, Any]) -> dict[str, Any]:
    """Per topology, each mixed path's measures over the upstream-only path's of the same run."""
    out: dict[str, Any] = {}
    for top, paths in PATHS.items():
        r = result.get(top, {})
        upstream = paths[0]
        per: dict[str, Any] = {}
        for path in paths[1:]:
            x: dict[str, float] = {}
            tp, cs, lat = r.get("throughput", {}), r.get("connections", {}), r.get("latency", {})
            if path in tp and upstream in tp:
                x["throughput"] = _over(tp[path]["gbit_per_s"], tp[upstream]["gbit_per_s"])
                x["router_cpu_per_gb"] = _over(tp[path]["router_cpu_seconds_per_gb"],
                                               tp[upstream]["router_cpu_seconds_per_gb"])
            if path in cs and upstream in cs:
                x["connections_per_s"] = _over(cs[path]["connections_per_s"], cs[upstream]["connections_per_s"])
                x["router_cpu_per_connection"] = _over(cs[path]["router_cpu_us_per_connection"],
                                                       cs[upstream]["router_cpu_us_per_connection"])
            if path in lat and upstream in lat:
                x["p50"] = _over(lat[path]["p50_us"], lat[upstream]["p50_us"])
                x["p99"] = _over(lat[path]["p99_us"], lat[upstream]["p99_us"])
            if x:
                per[path] = x
        if per:
            out[top] = {"over": upstream, **per}
    return out


def _over(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("inf")


def goals(over: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The issue's goal per mixed path: not slower than upstream-only (the ``ours-*`` only paths are not mixed); a
    mixed path that did not carry bytes or failed a measurement has not met it, and says why."""
    met: dict[str, Any] = {}
    for top, paths in PATHS.items():
        r = result.get(top, {})
        broken = {**r.get("not_carried", {}), **r.get("failed", {})}
        for path in paths[1:]:
            if "up" not in path.split("-") or path not in result["paths"]:
                continue
            if path in broken or paths[0] in broken or paths[0] not in result["paths"]:
                met[path] = {"not_slower": False,
                             "why": broken.get(path) or f"{paths[0]} (the upstream-only path) was not measured"}
                continue
            x = over.get(top, {}).get(path, {})
            checks = {}
            if "throughput" in x:
                checks["throughput_ge_1x"] = x["throughput"] >= 1
            if "connections_per_s" in x:
                checks["connections_per_s_ge_1x"] = x["connections_per_s"] >= 1
            if "p50" in x:
                checks["p50_le_1x"], checks["p99_le_1x"] = x["p50"] <= 1, x["p99"] <= 1
            met[path] = {**checks, "not_slower": all(checks.values())}
    return met


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    home = skrouterd_home()
    haproxy, wrk = hb.find_haproxy(), hb.find_wrk()
    state = Path(tempfile.mkdtemp(prefix="mixed-bench-", dir="/tmp"))
    backends = {k: rb._free_port(rb.BACKEND) for k in KINDS}
    procs: list[subprocess.Popen[Any]] = []
    result: dict[str, Any] = {"paths": args.paths}
    try:
        procs.append(rb._start_backend("sink", rb.BACKEND, backends["sink"]))
        procs.append(rb._start_backend("echo", rb.BACKEND, backends["echo"]))
        procs.append(hb.http_responder(haproxy, rb.BACKEND, backends["http"], state))
        for top, paths in PATHS.items():
            chosen = [p for p in paths if p in args.paths]
            if not chosen:
                continue
            async with contextlib.AsyncExitStack() as stack:
                nets: dict[str, Running] = {}
                not_carried: dict[str, str] = {}
                for path in chosen:
                    where = state / path
                    routers = path_configs(where, parse_path(path), backends)
                    nets[path] = await stack.enter_async_context(running(home, where, routers))
                db._progress(f"{top}: waiting for {', '.join(chosen)} to carry bytes")
                reasons = await asyncio.gather(*(carries(net, args.ready_seconds) for net in nets.values()))
                for path, reason in zip(list(nets), reasons, strict=True):
                    if reason is not None:
                        not_carried[path] = reason
                        del nets[path]

                def sides(kind: str, nets: dict[str, Running] = nets) -> dict[str, db.Side]:
                    out: dict[str, db.Side] = {"direct": (backends[kind], rb.BACKEND, {})}
                    out.update({path: (net.listeners[kind], HOST, net.pids) for path, net in nets.items()})
                    return out

                failed: dict[str, str] = {}
                result[top] = await asyncio.to_thread(db.measure_sides, args, wrk, sides, top, failed) if nets else {}
                if not_carried:
                    result[top]["not_carried"] = not_carried
                if failed:
                    result[top]["failed"] = failed
        over = ratios(result)
        result["mixed_over_upstream"] = over
        result["goals_met"] = goals(over, result)
        result["machine"] = db.machine(args, skrouterd=_version(home))
        return result
    finally:
        rb._kill_all(procs)
        if args.keep_state:
            print(f"mixed_bench: configurations and logs kept in {state}", file=sys.stderr)
        else:
            shutil.rmtree(state, ignore_errors=True)


def _version(home: Path) -> str:
    out = subprocess.run([str(home / "sbin" / "skrouterd"), "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    db.add_measure_arguments(parser, seconds=2.0, round_trips=10000, sides="direct and every path's")
    parser.add_argument("--ready-seconds", type=float, default=30.0,
                        help="how long a path may take to carry its first bytes")
    parser.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                        help=f"comma-separated, among {','.join(PATHS['one_hop'] + PATHS['two_hops'])}")
    parser.add_argument("--keep-state", action="store_true",
                        help="keep the configurations, certificates and skrouterd's logs (the path is printed)")
    parser.add_argument("--only", default=",".join(MEASURES), help=f"comma-separated subset of {','.join(MEASURES)}")
    args = parser.parse_args()
    args.only = {m.strip() for m in args.only.split(",") if m.strip()}
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    try:
        for path in args.paths:
            parse_path(path)
    except ValueError as e:
        parser.error(str(e))
    if args.only - set(MEASURES) or not args.only:
        parser.error(f"--only: a subset of {','.join(MEASURES)}")
    if not (0.1 <= args.seconds <= 60 and 1 <= args.repeats <= 50 and 1 <= args.clients <= 1000
            and 1 <= args.round_trips <= 1_000_000 and 1 <= args.ready_seconds <= 300):
        parser.error("--seconds 0.1-60, --repeats 1-50, --clients 1-1000, --round-trips 1-1000000, "
                     "--ready-seconds 1-300")
    try:
        result = asyncio.run(_main(args))
    except PeersMissing as e:       # haproxy or wrk missing: SystemExit saying how to install them
        sys.exit(f"mixed_bench: {e}")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
