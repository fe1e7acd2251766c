"""``bench/relay_floor.py`` and ``router/examples/relay_floor.rs``, the least relay the data-plane benchmarks measure
beside the router (issue 45): in the routers' places it carries a stream to the sink and the sink's count back, with
both half-closes, spliced or copied on one hop and over two mutual-TLS hops with the two-hop network's certificates;
it refuses what it cannot be (an address off loopback, unreadable certificates) with the reason. The example is
built by ``cargo test --release`` before the Python suite, and here when missing."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kubesim.testing.patience import patience

BENCH = Path(__file__).resolve().parents[3] / "bench"
HOSTS = {"west": "127.0.79.200", "middle": "127.0.79.201", "east": "127.0.79.202"}


@pytest.fixture(scope="module")
def bench() -> Iterator[dict[str, ModuleType]]:
    sys.path.insert(0, str(BENCH))
    try:
        import dataplane_bench
        import relay_floor
        import router_bench
    finally:
        sys.path.remove(str(BENCH))
    path = relay_floor.binary()
    assert not isinstance(path, str), path
    yield {"db": dataplane_bench, "rf": relay_floor, "rb": router_bench}


@pytest.fixture(scope="module")
def sink(bench: dict[str, ModuleType]) -> Iterator[dict[str, int]]:
    rb = bench["rb"]
    # the two-hop documents name a backend of every kind; only the sink runs
    backends = {kind: rb._free_port(rb.BACKEND) for kind in bench["db"].KINDS}
    proc = rb._start_backend("sink", rb.BACKEND, backends["sink"])
    try:
        yield backends
    finally:
        proc.kill()
        proc.wait()


def _carry(bench: dict[str, ModuleType], port: int) -> dict[str, Any]:
    # the client sends, half-closes, and reads the sink's count of what arrived (it raises if the count differs)
    result: dict[str, Any] = bench["rb"]._throughput(port, HOSTS["west"], 0.3, 64 << 20)
    return result


def test_the_plain_chain_copies_through_three_relays(bench: dict[str, ModuleType], sink: dict[str, int]) -> None:
    with contextlib.ExitStack() as stack:
        port, pids = bench["rf"].start(stack, "plain_chain", HOSTS, sink)
        assert set(pids) == {"west", "middle", "east"}
        assert _carry(bench, port)["bytes"] > 0


@pytest.mark.parametrize("copy", [False, True], ids=["spliced", "copied"])
def test_one_hop_carries_a_stream_and_the_sinks_answer_back(bench: dict[str, ModuleType], sink: dict[str, int],
                                                            copy: bool) -> None:
    with contextlib.ExitStack() as stack:
        port, pids = bench["rf"].start(stack, "one_hop", HOSTS, sink, copy=copy)
        assert set(pids) == {"west"}
        got = _carry(bench, port)
        assert got["bytes"] > 0 and got["gbit_per_s"] > 0, got
        # a second connection through the same relay: it serves every client, not the first
        assert _carry(bench, port)["bytes"] > 0
    assert all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in pids.values()), "stopped with the stack"


def test_two_hops_carry_a_stream_over_mutual_tls_with_the_networks_certificates(
        bench: dict[str, ModuleType], sink: dict[str, int], tmp_path: Path) -> None:
    docs = bench["db"]._two_hop_documents(tmp_path / "certs", HOSTS, sink)
    with contextlib.ExitStack() as stack:
        port, pids = bench["rf"].start(stack, "two_hops", HOSTS, sink, docs)
        assert set(pids) == {"west", "middle", "east"}
        got = _carry(bench, port)
        assert got["bytes"] > 0, got


def test_a_client_without_the_sites_certificate_gets_nothing_through_a_tls_hop(
        bench: dict[str, ModuleType], sink: dict[str, int], tmp_path: Path) -> None:
    # East takes only clients whose certificate its site CA issued, and hands what it decrypts to the sink: plain
    # bytes sent to it never reach the sink, whose answer (a count of 8 bytes) would come back if they did
    docs = bench["db"]._two_hop_documents(tmp_path / "certs", HOSTS, sink)
    with contextlib.ExitStack() as stack:
        bench["rf"].start(stack, "two_hops", HOSTS, sink, docs)
        with socket.create_connection((HOSTS["east"], _listening_port(HOSTS["east"])), timeout=patience(10)) as s:
            s.sendall(b"\x00" * 4096)
            s.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
        # at most a TLS alert (content type 21)
        assert reply == b"" or reply[0] == 21, reply[:16]


@pytest.mark.parametrize(("args", "why"), [
    (["10.0.0.1:5000", "127.0.0.1:1"], "only loopback addresses"),
    (["127.0.0.1:0", "127.0.0.1:1", "--accept", "/nonexistent/ca.crt,/x.crt,/x.key"], "/nonexistent/ca.crt"),
    (["127.0.0.1:0", "127.0.0.1:1", "--accept", "just-one"], "CA,CERT,KEY"),
    (["127.0.0.1:0", "127.0.0.1:1", "--sideways", "x"], "--accept or --connect"),
    (["127.0.0.1:0"], "usage: relay_floor LISTEN TARGET"),
])
def test_what_it_cannot_be_is_refused_with_the_reason(bench: dict[str, ModuleType], args: list[str],
                                                      why: str) -> None:
    run = subprocess.run([str(bench["rf"].BINARY), *args], capture_output=True, text=True, timeout=patience(30))
    assert run.returncode != 0 and "ready" not in run.stdout, run
    assert why in run.stderr, run.stderr


def test_a_topology_it_has_no_relays_for_is_refused(bench: dict[str, ModuleType], sink: dict[str, int]) -> None:
    with contextlib.ExitStack() as stack, pytest.raises(ValueError, match="no topology 'ring'"):
        bench["rf"].start(stack, "ring", HOSTS, sink)
    with contextlib.ExitStack() as stack, pytest.raises(ValueError, match="certificates"):
        bench["rf"].start(stack, "two_hops", HOSTS, sink)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _listening_port(host: str) -> int:
    """The port a process listens on at ``host`` (from /proc/net/tcp: state 0A)."""
    want = "".join(f"{int(part):02X}" for part in reversed(host.split(".")))
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port = local.split(":")
        if address == want and state == "0A":
            return int(port, 16)
    raise AssertionError(f"nothing listens on {host}")
