"""Throughput of router variants side by side (two hops, or one), in the same run, alternating; JSON on stdout.

Each side is a whole two-hop network as ``dataplane_bench.py`` builds it (client -> West -> mutual TLS -> Middle ->
mutual TLS -> East -> sink), on its own loopback addresses; one TCP stream per run (``--streams N``: N at once, their
rates summed), the sides in turn, for ``--rounds`` rounds. Every round builds every network afresh and starts with the
next side: on two CPUs the five processes of a stream settle on the CPUs in a way that stays for the processes' life,
and that alone moved the same binary's throughput by 10 % between two networks of one run. A side is ``haproxy`` (the
baseline, ``haproxy_baseline.py``), ``rust``, or ``rust`` with router settings and/or another binary:
``rust:threads=1``, ``rust:bufferSize=524288``, ``rust:bin=/tmp/old-router``, ``rust:bin=/tmp/old-router,threads=1``;
``haproxy:splice=0`` (plain hops relayed through user space, with ``tune.bufsize`` the baseline's network buffer, 64
KiB, unless ``bufferSize=`` says otherwise); or ``direct`` (the sink itself, no router); or ``floor``
(``relay_floor.py``: a minimal reference relay in the routers' places, the router's splice and TLS code and nothing of
its design; ``floor:topology=one_hop,copy=1`` copies one hop instead of splicing it; ``floor:records=1`` moves two
hops' TLS records in place, with no copy in user space; ``socketBuffer=BYTES`` fixes every relay socket's buffers,
bounding what is in flight between two relays as a link's window does; the client's and the sink's sockets keep
TCP's autotuning). ``--topology one_hop``: each
network is West alone with a Listener and a local Connector, plain TCP (the spliced relay). ``--topology
plain_chain``: the two-hop path's five processes and four loopback connections with nothing on the hops but TCP (each
router's Listener to a Connector whose target is the next router's Listener): what the machine carries through that
pipeline without TLS or framing, the reference for two hops. A side may name its own topology
(``haproxy:splice=0,bufferSize=262144,topology=plain_chain`` beside ``haproxy`` and ``rust`` on two hops: the copying
relay's pipeline in the same rounds as the TLS paths). For each side: the median Gbit/s, every run, the CPUs the whole
machine left idle meanwhile (the share of the run's CPU time, every process and the kernel included) and, with a
``direct`` side, the median as a share of direct's.

Meant for deciding between variants of the data plane on a noisy machine: a single run of a single stream moves by
10-20 % here from one run to the next, so variants are compared only within one run, by their medians over rounds.
Loopback only (127.0.80-87.x and the sink's 127.0.50.201); every run is bounded in time. Run it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dataplane_bench as db
import haproxy_baseline as hb
import relay_floor as rf
import router_bench as rb

TOPOLOGIES = ("two_hops", "one_hop", "plain_chain")
SETTINGS = {"threads": int, "bufferSize": int}
HAPROXY_SETTINGS: dict[str, Callable[[str], Any]] = {"splice": lambda v: bool(int(v)), "bufferSize": int}


def parse_side(text: str) -> tuple[str, str | None, dict[str, Any]]:
    """(engine, binary, router settings) of a side's description; ValueError names what is wrong."""
    if text == "direct":
        return text, None, {}
    engine, _, options = text.partition(":")
    if engine not in (*db.ENGINES, "floor"):
        raise ValueError(f"{text!r}: the engine is haproxy, rust or floor")
    binary: str | None = None
    settings: dict[str, Any] = {}
    for option in filter(None, options.split(",")):
        key, sep, value = option.partition("=")
        if not sep:
            raise ValueError(f"{text!r}: options are key=value")
        if key == "topology":
            allowed = rf.TOPOLOGIES if engine == "floor" else TOPOLOGIES
            if value not in allowed:
                raise ValueError(f"{text!r}: topology= is one of {', '.join(allowed)}")
            settings[key] = value
            continue
        if engine == "floor":
            if key == "socketBuffer" and value.isascii() and value.isdigit() and 4096 <= int(value) <= 16 << 20:
                settings["socket_buffer"] = int(value)
                continue
            if key not in ("copy", "records") or value not in ("0", "1"):
                raise ValueError(f"{text!r}: floor takes topology=, copy=0|1, records=0|1 and "
                                 "socketBuffer=4096-16777216")
            settings[key] = value == "1"
            continue
        if engine == "haproxy":
            if key not in HAPROXY_SETTINGS:
                raise ValueError(f"{text!r}: unknown option {key!r} for haproxy ({', '.join(HAPROXY_SETTINGS)})")
            try:
                settings[key] = HAPROXY_SETTINGS[key](value)
            except ValueError:
                raise ValueError(f"{text!r}: {key}= takes a number") from None
            continue
        if key == "bin":
            if not value:
                raise ValueError(f"{text!r}: bin= names a router binary")
            binary = value
        elif key in SETTINGS:
            settings[key] = SETTINGS[key](value)
        else:
            raise ValueError(f"{text!r}: unknown option {key!r} (bin, {', '.join(SETTINGS)})")
    return engine, binary, settings


def _plain_chain_documents(hosts: dict[str, str], backends: dict[str, int]) -> dict[str, dict[str, Any]]:
    """West -> Middle -> East -> sink, every hop plain TCP: each router's Listeners lead to Connectors whose target
    is the next router's Listener of the same name (East's: the sink's backends)."""
    docs = {name: db._doc(name) for name in hosts}
    ports = {name: {k: rb._free_port(host) for k in db.KINDS} for name, host in hosts.items()}
    after = {"west": "middle", "middle": "east"}
    for name, doc in docs.items():
        doc["listeners"] = [{"name": k, "routingKey": k, "host": hosts[name], "port": ports[name][k]}
                            for k in db.KINDS]
        nxt = after.get(name)
        doc["connectors"] = [{"name": k, "routingKey": k, "port": ports[nxt][k] if nxt else backends[k],
                              "targets": [{"host": hosts[nxt] if nxt else rb.BACKEND}]} for k in db.KINDS]
    return docs


async def _round(args: argparse.Namespace, state: Path, backends: dict[str, int], haproxy: str, order: list[str],
                 runs: dict[str, list[tuple[float, float]]]) -> None:
    """Every side's network built afresh (new processes: the kernel places them anew), one run of each, in
    ``order``, then all torn down."""
    async with contextlib.AsyncExitStack() as stack:
        nets: dict[str, tuple[int, str]] = {}
        for side in order:
            i = args.sides.index(side)
            engine, binary, settings = parse_side(side)
            if engine == "direct":
                nets[side] = (backends["sink"], rb.BACKEND)
                continue
            hosts = {name: f"127.0.{80 + i}.{200 + j}" for j, name in enumerate(("west", "middle", "east"))}
            where = Path(tempfile.mkdtemp(prefix=f"side-{i}-", dir=state))
            if engine == "floor":
                topology = settings.get("topology", args.topology)
                docs = db._two_hop_documents(where / "certs", hosts, backends) if topology == "two_hops" else None
                relays = rf.start(stack, topology, hosts, backends, docs, copy=settings.get("copy", False),
                                  records=settings.get("records", False),
                                  socket_buffer=settings.get("socket_buffer"))
                nets[side] = (relays.port, hosts["west"])
                continue
            topology = settings.pop("topology", args.topology)
            if topology == "two_hops":
                docs = db._two_hop_documents(where / "certs", hosts, backends)
            elif topology == "plain_chain":
                docs = _plain_chain_documents(hosts, backends)
            else:
                docs = db._one_hop_documents(hosts, backends)
            for doc in docs.values():
                doc["router"].update(settings)
            _, listeners = await stack.enter_async_context(db._network(where / "routers", engine, docs, haproxy,
                                                                         binary))
            nets[side] = (listeners["sink"], hosts["west"])
        for side in order:
            port, host = nets[side]
            before = db._machine()
            # a thread per stream (the default executor has only a few on two CPUs)
            with concurrent.futures.ThreadPoolExecutor(args.streams) as pool:
                loop = asyncio.get_running_loop()
                results = await asyncio.gather(*(loop.run_in_executor(pool, rb._throughput, port, host, args.seconds,
                                                                      1 << 40) for _ in range(args.streams)))
            after = db._machine()
            busy, idle = after[0] - before[0], after[1] - before[1]
            runs[side].append((sum(r["gbit_per_s"] for r in results), idle / max(busy + idle, 1e-9)))


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    haproxy = hb.find_haproxy()
    state = Path(tempfile.mkdtemp(prefix="two-hop-ab-", dir="/tmp"))
    backends = {k: rb._free_port(rb.BACKEND) for k in db.KINDS}
    sink = rb._start_backend("sink", rb.BACKEND, backends["sink"])
    runs: dict[str, list[tuple[float, float]]] = {side: [] for side in args.sides}
    try:
        for r in range(args.rounds):
            # each round starts with the next side: no side always runs first or after the same one
            shift = r % len(args.sides)
            await _round(args, state, backends, haproxy, args.sides[shift:] + args.sides[:shift], runs)
    finally:
        sink.kill()
        sink.wait()
        shutil.rmtree(state, ignore_errors=True)
    out: dict[str, Any] = {}
    for side, values in runs.items():
        out[side] = {"gbit_per_s": round(statistics.median(g for g, _ in values), 2),
                     "all_gbit_per_s": [g for g, _ in values],
                     "machine_idle_share": round(statistics.median(i for _, i in values), 3)}
    if "direct" in out:
        for side in out.values():
            side["of_direct"] = round(side["gbit_per_s"] / max(out["direct"]["gbit_per_s"], 1e-9), 3)
    return {"sides": out, "topology": args.topology, "streams": args.streams, "rounds": args.rounds,
            "seconds": args.seconds,
            "cpus": os.cpu_count(), "load_average": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sides", nargs="+",
                        help="direct | haproxy[:splice=0][,bufferSize=BYTES][,topology=T] | "
                             "rust[:bin=PATH][,threads=N][,bufferSize=BYTES][,topology=T] | "
                             "floor[:topology=T][,copy=1][,records=1][,socketBuffer=BYTES]")
    parser.add_argument("--topology", choices=TOPOLOGIES, default="two_hops", help="every side's, unless it names its own")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each run")
    parser.add_argument("--streams", type=int, default=1,
                        help="concurrent streams through the network in each run (Gbit/s is their sum)")
    args = parser.parse_args()
    floors = False
    try:
        for side in args.sides:
            engine, _, settings = parse_side(side)
            if engine == "floor":
                floors = True
                if settings.get("copy") and settings.get("topology", args.topology) != "one_hop":
                    raise ValueError(f"{side!r}: copy=1 applies to one hop only (topology=one_hop)")
                if settings.get("records") and settings.get("topology", args.topology) != "two_hops":
                    raise ValueError(f"{side!r}: records=1 applies to two hops only (topology=two_hops)")
    except ValueError as e:
        parser.error(str(e))
    if len(set(args.sides)) != len(args.sides) or not 1 <= args.rounds <= 50 or not 0.5 <= args.seconds <= 60 \
            or not 1 <= args.streams <= 64:
        parser.error("sides are distinct, --rounds 1-50, --seconds 0.5-60, --streams 1-64")
    if floors and isinstance(why := rf.binary(), str):
        parser.error(f"floor: {why}")
    json.dump(asyncio.run(_main(args)), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
