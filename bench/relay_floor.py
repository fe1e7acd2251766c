"""A minimal reference relay in the routers' places, measured beside the router (issue 45).

``router/examples/relay_floor.rs`` is a relay that does only what any relay on the path must: a connection in, a
connection out, bytes both ways, on one thread; plain legs spliced (the router's own ``splice::PipeSplice``), TLS legs
through the router's own TLS code (handshake, suites, record layer) with 256 KiB copies between them. What it leaves
out is everything the router adds: streams multiplexed on links, frames, per-stream credit, routing, an adaptor.
Placed where the routers are (one hop: West alone, spliced or copied; two hops: West plain in and mutual TLS out,
Middle TLS both sides, East TLS in and plain out, with the two-hop network's certificates; the plain chain: three
relays copying plain TCP), the stream it carries is what the router's building blocks give on this machine without
the router's design; the router's share of it is what that design costs or gains. A reference, not a bound: a relay
built otherwise may do better. Not a router either: one TLS connection per client connection, which is not how sites
link. With ``records`` the two hops' relays copy nothing in user space (each TLS record opened and sealed where it was
read, a client's bytes read straight into the records they travel in): besides the kernel's copies and the cipher,
which no relay with TLS in user space avoids here, it does next to nothing per byte; still a reference, not a bound
(another event loop may leave fewer of the CPUs idle).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import machine_limits
import router_bench as rb

BINARY = machine_limits.EXAMPLES / "relay_floor"
TOPOLOGIES = ("one_hop", "two_hops", "plain_chain")
#: the longest a relay may take to say it listens
START_TIMEOUT = 30.0


class Relays(NamedTuple):
    """Started relays: the port a client connects to (West's), and each relay's port and process id by name."""
    port: int
    ports: dict[str, int]
    pids: dict[str, int]


def binary(build: bool = True) -> Path | str:
    """The example's path (built offline when missing or older than its source, and ``build``), or why there is
    none."""
    return machine_limits.example_binary(BINARY, build)


def _plan(topology: str, hosts: dict[str, str], ports: dict[str, int], sink: str,
          docs: dict[str, dict[str, Any]] | None, copy: bool,
          records: bool = False) -> dict[str, tuple[str, list[str]]]:
    """Each relay's target and options, the last relay first (each listens at once; it dials its target only when
    a client arrives)."""
    if records and topology != "two_hops":
        raise ValueError("records apply to two hops only (the legs of the other topologies are plain)")
    if topology == "one_hop":
        return {"west": (sink, ["--copy"] if copy else [])}
    if copy:
        raise ValueError("copy applies to one hop only (the plain chain always copies; TLS hops are copied)")
    if topology == "plain_chain":
        return {"east": (sink, ["--copy"]), "middle": (f"{hosts['east']}:{ports['east']}", ["--copy"]),
                "west": (f"{hosts['middle']}:{ports['middle']}", ["--copy"])}
    if topology != "two_hops":
        raise ValueError(f"the relay floor has no topology {topology!r} ({', '.join(TOPOLOGIES)})")
    if docs is None:
        raise ValueError("two hops take the certificates of a two-hop network's documents")
    profiles = {name: {p["name"]: p["files"] for p in doc["tlsProfiles"]} for name, doc in docs.items()}

    def files(name: str, profile: str) -> str:
        f = profiles[name][profile]
        return f"{f['ca']},{f['cert']},{f['key']}"

    extra = ["--records"] if records else []
    return {"east": (sink, ["--accept", files("east", "site"), *extra]),
            "middle": (f"{hosts['east']}:{ports['east']}",
                       ["--accept", files("middle", "site"), "--connect", files("middle", "to-east"), *extra]),
            "west": (f"{hosts['middle']}:{ports['middle']}", ["--connect", files("west", "to-middle"), *extra])}


def _ready(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether the relay printed ``ready`` within ``timeout`` seconds."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return False
            chunk = os.read(proc.stdout.fileno(), 64)
            if not chunk:
                return False
            line += chunk
    return line.strip() == b"ready"


def start(stack: contextlib.ExitStack | contextlib.AsyncExitStack, topology: str, hosts: dict[str, str],
          backends: dict[str, int], docs: dict[str, dict[str, Any]] | None = None, *,
          copy: bool = False, records: bool = False, socket_buffer: int | None = None) -> Relays:
    """The relays of ``topology`` on ``hosts`` (west, middle, east), ending at the sink backend, stopped with
    ``stack``. Two hops take their certificates from ``docs``, the routers' documents of a two-hop network
    (``dataplane_bench._two_hop_documents``). ``copy``: one hop copied through user space rather than spliced.
    ``records``: two hops move whole TLS records, opened and sealed in place (no copy in user space).
    ``socket_buffer``: the send and receive buffers of the sockets between two relays (the TLS legs) fixed at that
    many bytes (no autotuning), bounding what is in flight between them as a link's per-stream window does between
    two routers; the client's and the sink's sockets keep TCP's autotuning.
    ValueError for a topology or option it has no relays for; RuntimeError says which relay did not start and why
    (the ones started before it are stopped)."""
    ports = {name: rb._free_port(hosts[name]) for name in ("west", "middle", "east")}
    plan = _plan(topology, hosts, ports, f"{rb.BACKEND}:{backends['sink']}", docs, copy, records)
    if socket_buffer is not None:
        plan = {name: (target, [*options, "--socket-buffer", str(socket_buffer)])
                for name, (target, options) in plan.items()}
    path = binary()
    if isinstance(path, str):
        raise RuntimeError(path)
    pids: dict[str, int] = {}
    with contextlib.ExitStack() as started:
        for name, (target, options) in plan.items():
            # its errors to a file, not a pipe nobody drains while it runs
            errors = started.enter_context(tempfile.TemporaryFile("w+"))
            proc = subprocess.Popen([str(path), f"{hosts[name]}:{ports[name]}", target, *options],
                                    stdout=subprocess.PIPE, stderr=errors)
            started.callback(proc.wait)
            started.callback(proc.kill)
            assert proc.stdout is not None
            started.callback(proc.stdout.close)
            if not _ready(proc, START_TIMEOUT):
                proc.kill()
                proc.wait()
                errors.seek(0)
                why = machine_limits.tail(errors.read()) or f"no 'ready' within {START_TIMEOUT:.0f} s"
                raise RuntimeError(f"relay_floor {name} did not start: {why}")
            pids[name] = proc.pid
        # all started: from now on they stop with the caller's stack
        stack.push(started.pop_all())
    return Relays(ports["west"], {name: ports[name] for name in plan}, pids)
