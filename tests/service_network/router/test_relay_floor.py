"""``bench/relay_floor.py`` and ``router/examples/relay_floor.rs``, the minimal reference relay the data-plane
benchmarks measure beside the router (issue 45): in the routers' places it carries a stream to the sink and the sink's
count back, with both half-closes, spliced or copied on one hop, over two mutual-TLS hops with the two-hop network's
certificates (copied, or as whole records opened and sealed in place, every byte back in order through an echo), and
through the plain chain; a TLS hop takes only clients with a certificate its site CA issued; it
refuses what it cannot be (an address off loopback, unreadable certificates, unknown options) with the reason. The
example is built by ``cargo test --release`` before the Python suite (and here when missing)."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
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


def _carry(port: int, size: int = 8 << 20) -> int:
    """Sends ``size`` bytes through the relays, half-closes, and returns the sink's count of what arrived, after
    checking that the relays then closed the client's side too (the sink's half-close carried back)."""
    chunk = bytes(256 * 1024)
    with socket.create_connection((HOSTS["west"], port), timeout=patience(30)) as s:
        sent = 0
        while sent < size:
            piece = chunk[:size - sent]
            s.sendall(piece)
            sent += len(piece)
        s.shutdown(socket.SHUT_WR)
        count = b""
        while len(count) < 8 and (got := s.recv(8 - len(count))):
            count += got
        assert len(count) == 8, f"the sink's count cut short: {count!r}"
        assert s.recv(1) == b"", "the relays carry the sink's end back to the client"
    return int.from_bytes(count, "big")


def _pipes(pid: int) -> int:
    """Pipes the process holds beyond its standard descriptors."""
    fds = Path(f"/proc/{pid}/fd")
    return sum(1 for fd in fds.iterdir() if int(fd.name) > 2 and os.readlink(fd).startswith("pipe:"))


@pytest.mark.parametrize("copy", [False, True], ids=["spliced", "copied"])
def test_one_hop_carries_a_stream_and_the_sinks_answer_back(bench: dict[str, ModuleType], sink: dict[str, int],
                                                            copy: bool) -> None:
    with contextlib.ExitStack() as stack:
        relays = bench["rf"].start(stack, "one_hop", HOSTS, sink, copy=copy)
        assert set(relays.pids) == {"west"} and relays.port == relays.ports["west"]
        assert _carry(relays.port) == 8 << 20
        # a second client through the same relay: it serves every client, not the first
        assert _carry(relays.port, 1 << 20) == 1 << 20
        # spliced: a pipe each way while a connection is open; copied: none
        with socket.create_connection((HOSTS["west"], relays.port), timeout=patience(10)) as s:
            s.sendall(b"x")
            deadline = time.monotonic() + patience(10)
            while _pipes(relays.pids["west"]) < (0 if copy else 4) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _pipes(relays.pids["west"]) == (0 if copy else 4)
    assert not Path(f"/proc/{relays.pids['west']}").exists(), "stopped with the stack"


@pytest.mark.parametrize("records", [False, True], ids=["copied", "records-in-place"])
def test_two_hops_carry_a_stream_over_mutual_tls_with_the_networks_certificates(
        bench: dict[str, ModuleType], sink: dict[str, int], tmp_path: Path, records: bool) -> None:
    docs = bench["db"]._two_hop_documents(tmp_path / "certs", HOSTS, sink)
    with contextlib.ExitStack() as stack:
        relays = bench["rf"].start(stack, "two_hops", HOSTS, sink, docs, records=records)
        assert set(relays.pids) == {"west", "middle", "east"}
        assert _carry(relays.port) == 8 << 20
        assert _carry(relays.port, 1 << 20) == 1 << 20
        # a few bytes and the client's end at once: they may reach a relay with the handshake's last flight
        for size in (1, 5, 1000) * 5:
            assert _carry(relays.port, size) == size


@pytest.mark.parametrize("socket_buffer", [None, 65536], ids=["autotuned", "fixed-socket-buffers"])
def test_records_moved_in_place_carry_every_byte_both_ways_in_order(
        bench: dict[str, ModuleType], tmp_path: Path, socket_buffer: int | None) -> None:
    # the relays that copy nothing in user space, ending at an echo backend: what comes back is what was sent,
    # written in pieces of every size (a byte, parts of a record, several records) and read while it is written
    rb = bench["rb"]
    port = rb._free_port(rb.BACKEND)
    # the documents name a backend of every kind; the relays' target is the "sink" one: here the echo
    echo = {kind: port for kind in bench["db"].KINDS}
    proc = rb._start_backend("echo", rb.BACKEND, port)
    data = os.urandom(3 << 20)
    sizes = [1, 7, 16_384, 16_383, 16_385, 100_000, 262_144, 5, 300_001]
    try:
        docs = bench["db"]._two_hop_documents(tmp_path / "certs", HOSTS, echo)
        with contextlib.ExitStack() as stack:
            relays = bench["rf"].start(stack, "two_hops", HOSTS, echo, docs, records=True,
                                       socket_buffer=socket_buffer)
            for pid in relays.pids.values():
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                assert b"--records" in argv
                assert (b"--socket-buffer" in argv) == (socket_buffer is not None), argv
            with socket.create_connection((HOSTS["west"], relays.port), timeout=patience(30)) as s:
                got = bytearray()

                def receive() -> None:
                    while chunk := s.recv(1 << 16):
                        got.extend(chunk)

                reader = threading.Thread(target=receive)
                reader.start()
                at, i = 0, 0
                while at < len(data):
                    n = sizes[i % len(sizes)]
                    s.sendall(data[at:at + n])
                    at, i = at + n, i + 1
                s.shutdown(socket.SHUT_WR)
                reader.join(patience(60))
                assert not reader.is_alive(), f"the echo's end did not come back ({len(got)} bytes)"
            assert len(got) == len(data) and bytes(got) == data
    finally:
        proc.kill()
        proc.wait()


def test_the_plain_chain_copies_through_three_relays(bench: dict[str, ModuleType], sink: dict[str, int]) -> None:
    with contextlib.ExitStack() as stack:
        relays = bench["rf"].start(stack, "plain_chain", HOSTS, sink)
        assert set(relays.pids) == {"west", "middle", "east"}
        assert _carry(relays.port) == 8 << 20
        assert all(_pipes(pid) == 0 for pid in relays.pids.values()), "copied, never spliced"


def _files(docs: dict[str, dict[str, Any]], name: str, profile: str) -> dict[str, str]:
    files: dict[str, str] = next(p["files"] for p in docs[name]["tlsProfiles"] if p["name"] == profile)
    return files


@pytest.mark.parametrize("client", ["none", "another-ca", "plain"])
def test_a_tls_hop_takes_only_clients_its_site_ca_issued_a_certificate(
        bench: dict[str, ModuleType], sink: dict[str, int], tmp_path: Path, client: str) -> None:
    # East ends at once a client it refuses (no certificate, one from Middle's CA: West's, or no TLS at all); one it
    # accepted would be held open, the read below timing out (the positive control is the next test)
    docs = bench["db"]._two_hop_documents(tmp_path / "certs", HOSTS, sink)
    east = _files(docs, "east", "site")
    with contextlib.ExitStack() as stack:
        relays = bench["rf"].start(stack, "two_hops", HOSTS, sink, docs)
        raw = stack.enter_context(socket.create_connection((HOSTS["east"], relays.ports["east"]),
                                                           timeout=patience(10)))
        if client == "plain":
            raw.sendall(b"\x00" * 4096)
            with contextlib.suppress(ConnectionResetError):
                reply = raw.recv(4096)
                # at most an alert (content type 21), then the end; never the sink's count
                assert reply == b"" or reply[0] == 21, reply[:16]
            return
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_verify_locations(east["ca"])
        if client == "another-ca":
            west = _files(docs, "west", "to-middle")
            ctx.load_cert_chain(west["cert"], west["key"])
        try:
            conn = stack.enter_context(ctx.wrap_socket(raw, server_hostname=HOSTS["east"]))
            conn.sendall(b"x" * 4096)
            reply = conn.recv(4096)
        except (ssl.SSLError, ConnectionError) as e:
            assert "timed out" not in str(e), e
        else:
            assert reply == b"", f"refused, yet answered: {reply[:16]!r}"


def test_a_client_with_the_sites_certificate_gets_through_a_tls_hop(
        bench: dict[str, ModuleType], sink: dict[str, int], tmp_path: Path) -> None:
    # the positive control of the test above: Middle's certificate for East, as the relay chain itself uses
    docs = bench["db"]._two_hop_documents(tmp_path / "certs", HOSTS, sink)
    east, middle = _files(docs, "east", "site"), _files(docs, "middle", "to-east")
    with contextlib.ExitStack() as stack:
        relays = bench["rf"].start(stack, "two_hops", HOSTS, sink, docs)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_verify_locations(east["ca"])
        ctx.load_cert_chain(middle["cert"], middle["key"])
        raw = socket.create_connection((HOSTS["east"], relays.ports["east"]), timeout=patience(10))
        with ctx.wrap_socket(raw, server_hostname=HOSTS["east"]) as conn:
            conn.sendall(b"x" * 4096)
            conn.settimeout(1.0)
            # accepted: the connection stays open, waiting for more (the sink answers at the end)
            with pytest.raises(TimeoutError):
                conn.recv(4096)


@pytest.mark.parametrize(("args", "why"), [
    (["10.0.0.1:5000", "127.0.0.1:1"], "only loopback addresses"),
    (["127.0.0.1:0", "10.0.0.1:1"], "only loopback addresses"),
    (["127.0.0.1:0", "127.0.0.1:1", "--accept", "/nonexistent/ca.crt,/x.crt,/x.key"], "/nonexistent/ca.crt"),
    (["127.0.0.1:0", "127.0.0.1:1", "--accept", "just-one"], "CA,CERT,KEY"),
    (["127.0.0.1:0", "127.0.0.1:1", "--connect"], "--connect takes CA,CERT,KEY"),
    (["127.0.0.1:0", "127.0.0.1:1", "--sideways"], "--accept, --connect, --copy, --records or --socket-buffer"),
    (["127.0.0.1:0", "127.0.0.1:1", "--socket-buffer", "12"], "--socket-buffer 12: BYTES, 4096-16777216"),
    (["127.0.0.1:0", "127.0.0.1:1", "--socket-buffer", "lots"], "--socket-buffer lots: BYTES"),
    (["127.0.0.1:0", "127.0.0.1:1", "--socket-buffer"], "--socket-buffer takes BYTES"),
    (["127.0.0.1:0", "127.0.0.1:1", "--records"], "--records takes a TLS leg"),
    (["127.0.0.1:0"], "usage: relay_floor LISTEN TARGET"),
])
def test_what_it_cannot_be_is_refused_with_the_reason(bench: dict[str, ModuleType], args: list[str],
                                                      why: str) -> None:
    run = subprocess.run([str(bench["rf"].BINARY), *args], capture_output=True, text=True, timeout=patience(30))
    assert run.returncode != 0 and "ready" not in run.stdout, run
    assert why in run.stderr, run.stderr


def test_a_topology_or_option_it_has_no_relays_for_is_refused(bench: dict[str, ModuleType],
                                                              sink: dict[str, int]) -> None:
    with contextlib.ExitStack() as stack:
        with pytest.raises(ValueError, match="no topology 'ring'"):
            bench["rf"].start(stack, "ring", HOSTS, sink)
        with pytest.raises(ValueError, match="certificates"):
            bench["rf"].start(stack, "two_hops", HOSTS, sink)
        with pytest.raises(ValueError, match="one hop only"):
            bench["rf"].start(stack, "plain_chain", HOSTS, sink, copy=True)
        with pytest.raises(ValueError, match="two hops only"):
            bench["rf"].start(stack, "one_hop", HOSTS, sink, records=True)


def test_a_relay_that_does_not_start_is_reported_with_its_own_words_and_the_others_stopped(
        bench: dict[str, ModuleType], sink: dict[str, int], tmp_path: Path) -> None:
    docs = bench["db"]._two_hop_documents(tmp_path / "certs", HOSTS, sink)
    # Middle's certificate gone: East has started when Middle refuses to
    Path(_files(docs, "middle", "site")["cert"]).unlink()
    before = {p.name for p in Path("/proc").iterdir() if p.name.isdigit()}
    with contextlib.ExitStack() as stack, pytest.raises(RuntimeError, match=r"relay_floor middle did not start: .*cert"):
        bench["rf"].start(stack, "two_hops", HOSTS, sink, docs)
    assert not [pid for pid in _new_relays(before)], "the relays started before it are stopped"


def _new_relays(before: set[str]) -> list[str]:
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and p.name not in before:
            with contextlib.suppress(OSError):
                if b"relay_floor" in (p / "cmdline").read_bytes():
                    found.append(p.name)
    return found


def test_a_reference_side_that_fails_a_run_is_reported_unavailable_and_ends_nothing(
        bench: dict[str, ModuleType], sink: dict[str, int]) -> None:
    import argparse
    db, rb = bench["db"], bench["rb"]
    args = argparse.Namespace(only=("throughput",), repeats=2, seconds=0.2, max_gib=0.01)
    closed = rb._free_port(HOSTS["west"])    # nothing listens there: every run of that side fails

    def sides(kind: str) -> dict[str, tuple[int, str, dict[str, int]]]:
        return {"direct": (sink["sink"], rb.BACKEND, {}), "floor": (closed, HOSTS["west"], {})}

    got = db.measure_sides(args, "", sides, "test", optional=("floor",))["throughput"]
    assert len(got["direct"]["all_gbit_per_s"]) == 2, "the other side measured every round"
    assert set(got["floor"]) == {"unavailable"} and "throughput:" in got["floor"]["unavailable"], got["floor"]
    # the same failure on a side that is not a reference ends the measurement, as before
    with pytest.raises(ConnectionRefusedError):
        db.measure_sides(args, "", sides, "test")
