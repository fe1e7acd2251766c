"""The least relay, in the routers' places: the reference a benchmark measures beside the router (issue 45).

``router/examples/relay_floor.rs`` is a relay that does only what any relay on the path must: a connection in, a
connection out, bytes both ways; plain legs spliced (the router's own ``splice::PipeSplice``), TLS legs through the
router's own TLS code (handshake, suites, record layer) with 256 KiB copies between them. What it leaves out is
everything the router adds: streams multiplexed on links, frames, per-stream credit, routing, an adaptor. Placed where
the routers are (one hop: West alone, spliced; two hops: West plain in and mutual TLS out, Middle TLS both sides, East
TLS in and plain out, with the two-hop network's certificates), the stream it carries is what this machine gives a
relay with this router's TLS; the router's share of it is what its own design costs. Not a router: one TLS connection
per client connection, as sites are never linked.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import machine_limits
import router_bench as rb

BINARY = machine_limits.REPO / "router" / "target" / "release" / "examples" / "relay_floor"
TOPOLOGIES = ("one_hop", "two_hops", "plain_chain")


def binary(build: bool = True) -> Path | str:
    """The example's path (built offline when missing and ``build``), or why there is none."""
    return machine_limits.example_binary(BINARY, build)


def start(stack: contextlib.ExitStack | contextlib.AsyncExitStack, topology: str, hosts: dict[str, str],
          backends: dict[str, int], docs: dict[str, dict[str, Any]] | None = None, *,
          copy: bool = False) -> tuple[int, dict[str, int]]:
    """The relays of ``topology`` on ``hosts`` (west, middle, east), ending at the sink backend, stopped with
    ``stack``: the port West listens on and each relay's process id by name. Two hops take their certificates from
    ``docs``, the routers' documents of a two-hop network (``dataplane_bench._two_hop_documents``). ``copy``: one
    hop copied through user space rather than spliced. RuntimeError says which relay did not start and why."""
    path = binary()
    if isinstance(path, str):
        raise RuntimeError(path)
    ports = {name: rb._free_port(hosts[name]) for name in ("west", "middle", "east")}
    sink = f"{rb.BACKEND}:{backends['sink']}"
    plan: dict[str, tuple[str, list[str]]]
    if topology == "one_hop":
        plan = {"west": (sink, ["--copy"] if copy else [])}
    elif topology == "plain_chain":
        # the two-hop path's three relays with nothing but TCP between them, copied as a TLS relay must
        plan = {"east": (sink, ["--copy"]), "middle": (f"{hosts['east']}:{ports['east']}", ["--copy"]),
                "west": (f"{hosts['middle']}:{ports['middle']}", ["--copy"])}
    elif topology == "two_hops":
        if docs is None:
            raise ValueError("two hops take the certificates of a two-hop network's documents")
        profiles = {name: {p["name"]: p["files"] for p in doc["tlsProfiles"]} for name, doc in docs.items()}

        def files(name: str, profile: str) -> str:
            f = profiles[name][profile]
            return f"{f['ca']},{f['cert']},{f['key']}"

        # the last relay first: each dials the next only when a client arrives, but listens at once
        plan = {"east": (sink, ["--accept", files("east", "site")]),
                "middle": (f"{hosts['east']}:{ports['east']}",
                           ["--accept", files("middle", "site"), "--connect", files("middle", "to-east")]),
                "west": (f"{hosts['middle']}:{ports['middle']}", ["--connect", files("west", "to-middle")])}
    else:
        raise ValueError(f"the relay floor has no topology {topology!r} ({', '.join(TOPOLOGIES)})")
    pids: dict[str, int] = {}
    for name, (target, options) in plan.items():
        # its errors to a file, not a pipe nobody drains while it runs
        errors = stack.enter_context(tempfile.TemporaryFile("w+"))
        proc = subprocess.Popen([str(path), f"{hosts[name]}:{ports[name]}", target, *options],
                                stdout=subprocess.PIPE, stderr=errors, text=True)
        stack.callback(proc.wait)
        stack.callback(proc.kill)
        assert proc.stdout is not None
        stack.callback(proc.stdout.close)
        if proc.stdout.readline().strip() != "ready":
            proc.kill()
            proc.wait()
            errors.seek(0)
            raise RuntimeError(f"relay_floor {name} did not start: {errors.read()[-500:].strip()}")
        pids[name] = proc.pid
    return ports["west"], pids
