"""The grant server as an attacker on the network meets it (loopback only): connections that never complete a
request are closed at the deadline, one source cannot hold more than its budget of connections, repeated wrong
codes get 429 with Retry-After while another source redeems, malformed requests get 400 without a traceback, and a
wrong code is refused from the watch cache without reading the API server."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from service_network.site import pki
from service_network.site.grant_io import GrantKeeper, SiteAccess
from service_network.site.grant_server import GrantServer, Limits, Throttle
from service_network.site.grants import LinkEndpoint, Redeemed, RedeemRequest, Refusal

HOST = "127.0.0.1"
RIGHT = "the-right-code-of-24-chars"
GRANT_UID = "0b7f6c1e-2d1b-4f7e-9a55-1c2d3e4f5a6b"


class _Redeemer:
    """Stands in for the grant keeper: counts the lookups a request costs."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, uid: str, request: RedeemRequest) -> Redeemed | Refusal:
        self.calls += 1
        if uid != GRANT_UID:
            return Refusal(404, "NotFound", "no AccessGrant for this URL")
        if request.code != RIGHT:
            return Refusal(403, "WrongCode", "the code is wrong")
        return Redeemed(endpoints=[LinkEndpoint(host="127.2.3.1", port=55671)], ca="CA", cert=request.subject,
                        key="KEY")


@pytest.fixture
async def served() -> AsyncIterator[tuple[GrantServer, _Redeemer, ssl.SSLContext]]:
    ca = pki.new_ca("grant-test-ca")
    redeemer = _Redeemer()
    server = GrantServer(redeemer, ca, HOST, 0, limits=Limits(connections_per_source=4))
    await server.start()
    client = ssl.create_default_context(cadata=ca.cert.decode())
    try:
        yield server, redeemer, client
    finally:
        await server.stop()


def _port(server: GrantServer) -> int:
    assert server.bound is not None
    return int(server.bound.url.rsplit(":", 1)[1])


async def _open(server: GrantServer, source: str, context: ssl.SSLContext | None
                ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection(
        HOST, _port(server), ssl=context, server_hostname=HOST if context else None, local_addr=(source, 0)), 10)


async def _post(server: GrantServer, context: ssl.SSLContext, body: bytes, *, source: str = "127.0.0.2",
                path: str = f"/{GRANT_UID}", method: str = "POST",
                headers: tuple[tuple[str, str], ...] = (("name", "to-west"), ("subject", "east-uid"))
                ) -> tuple[int, dict[str, str], bytes]:
    """One request shaped as upstream's redeemer sends it: the code as the body, ``name`` and ``subject``."""
    reader, writer = await _open(server, source, context)
    try:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\n{extra}"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        raw = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    answer_headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), answer_headers, payload


def _request(code: str) -> bytes:
    return code.encode()


async def _closed_after(reader: asyncio.StreamReader, started: float) -> float:
    """Seconds from ``started`` until the server closed the connection (EOF or reset)."""
    try:
        while await reader.read(1024):
            pass
    except (ConnectionError, ssl.SSLError):
        pass
    return time.monotonic() - started


async def test_connections_that_never_complete_a_request_are_closed_at_the_deadline(served) -> None:
    server, redeemer, context = served
    deadline = server.limits.request_seconds
    started = time.monotonic()
    # TCP only, never a TLS handshake
    tcp_reader, tcp_writer = await _open(server, "127.0.0.2", None)
    # TLS done, then nothing
    idle_reader, idle_writer = await _open(server, "127.0.0.3", context)
    # TLS done, then a request a byte at a time
    slow_reader, slow_writer = await _open(server, "127.0.0.4", context)

    async def trickle() -> None:
        for byte in b"POST /" + GRANT_UID.encode() + b" HTTP/1.1\r\nHost: x\r\n":
            if slow_writer.is_closing():
                return
            slow_writer.write(bytes([byte]))
            await asyncio.sleep(0.5)
    trickler = asyncio.create_task(trickle())
    try:
        closed = await asyncio.wait_for(asyncio.gather(
            _closed_after(tcp_reader, started), _closed_after(idle_reader, started),
            _closed_after(slow_reader, started)), deadline + 30)
    finally:
        trickler.cancel()
        for w in (tcp_writer, idle_writer, slow_writer):
            w.close()
    # closed by the deadline (not earlier: they were within their budgets), and nothing was looked up
    assert all(deadline - 1 <= c <= deadline + 10 for c in closed), closed
    assert redeemer.calls == 0
    await _eventually(lambda: server.connections == 0)


async def test_a_source_over_its_connection_budget_is_closed_at_once_and_others_still_redeem(served) -> None:
    server, _, context = served
    held = [await _open(server, "127.0.0.2", None) for _ in range(server.limits.connections_per_source)]
    try:
        await _eventually(lambda: server.connections == len(held))
        reader, writer = await _open(server, "127.0.0.2", None)
        started = time.monotonic()
        assert await _closed_after(reader, started) < 5      # no TLS, no deadline: closed when accepted
        writer.close()
        status, _, body = await _post(server, context, _request(RIGHT), source="127.0.0.3")
        assert status == 200 and [d["kind"] for d in yaml.safe_load_all(body)] == ["Secret", "Link"]
    finally:
        for _, w in held:
            w.close()


async def test_repeated_wrong_codes_get_429_with_retry_after_while_another_source_redeems(served) -> None:
    server, redeemer, context = served
    statuses: list[int] = []
    retry_after: list[int] = []
    for _ in range(300):
        status, headers, body = await _post(server, context, _request("guess-000000000000000000000"))
        statuses.append(status)
        if status == 429:
            retry_after.append(int(headers["retry-after"]))
            assert body.startswith(b"too many refused redemptions from 127.0.0.2")
    allowed = server.limits.failures_per_source
    assert statuses[:allowed] == [403] * allowed
    assert statuses[allowed:] == [429] * (300 - allowed)
    assert all(1 <= r <= server.limits.failure_window_seconds for r in retry_after)
    assert redeemer.calls == allowed            # throttled requests cost no lookup

    status, _, body = await _post(server, context, _request(RIGHT), source="127.0.0.3")
    assert status == 200


async def test_malformed_requests_get_400_and_no_traceback(served, caplog) -> None:
    server, redeemer, context = served
    caplog.set_level(logging.DEBUG)
    status, _, body = await _post(server, context, _request(RIGHT), headers=(("subject", "east-uid"),))
    assert status == 400 and body == b"invalid redemption request: header name: Field required\n"
    status, _, body = await _post(server, context, _request(RIGHT), headers=(("name", "../etc"),
                                                                             ("subject", "east-uid")))
    assert status == 400 and body.startswith(b"invalid redemption request: header name: ")
    status, _, body = await _post(server, context, _request(RIGHT), headers=(("name", "to-west"),
                                                                             ("subject", "a b")))
    assert status == 400 and body.startswith(b"invalid redemption request: header subject: ")
    status, _, body = await _post(server, context, b"\xff\xfe")
    assert status == 400 and body == b"invalid redemption request: the code is not UTF-8 text\n"
    status, _, body = await _post(server, context, b"[" * 20_000)
    assert status == 400 and body.startswith(b"invalid redemption request: the body (the code): ")
    status, headers, body = await _post(server, context, b"", method="GET")
    assert status == 405 and body == b"Only POST is supported\n" and headers["allow"] == "POST"
    status, _, _ = await _post(server, context, b"x" * 70_000)
    assert status == 413
    status, _, _ = await _post(server, context, _request(RIGHT), path="/../../etc/passwd")
    assert status == 404
    reader, writer = await _open(server, "127.0.0.5", context)
    writer.write(b"\x00\x01 not http at all\r\n\r\n")
    raw = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    assert raw.startswith(b"HTTP/1.1 400 ")
    assert redeemer.calls == 0
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_the_throttle_forgets_old_failures_and_bounds_its_memory() -> None:
    now = [0.0]
    throttle = Throttle(Limits(failures_per_source=3, failure_window_seconds=60, sources_tracked=100),
                        clock=lambda: now[0])
    for _ in range(3):
        throttle.failed("a")
        now[0] += 1
    assert throttle.retry_after("a") == 57         # at t=3: the oldest failure (t=0) leaves the window at t=60
    now[0] = 60.0
    assert throttle.retry_after("a") is None
    for i in range(1000):
        throttle.failed(f"s{i}")
    assert len(throttle._failures) == 100


async def test_a_wrong_code_is_refused_from_the_cache_without_reading_the_api() -> None:
    grant = {"apiVersion": "skupper.io/v2alpha1", "kind": "AccessGrant",
             "metadata": {"name": "g", "namespace": "west", "uid": GRANT_UID, "resourceVersion": "1",
                          "creationTimestamp": "2026-11-26T00:00:00Z"},
             "spec": {"code": RIGHT}, "status": {}}

    class Cache:
        def add_index(self, name: str, key: Any) -> None:
            pass

        def by_index(self, name: str, value: str) -> list[dict[str, Any]]:
            return [grant] if value == GRANT_UID else []

    class Api:
        reads = 0

        async def get(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            Api.reads += 1
            return grant

    keeper = GrantKeeper(Api(), Cache(), Cache(), lambda namespace: SiteAccess(None, []))  # type: ignore[arg-type]
    request = RedeemRequest(code="wrong-code-0000000000000000", name="t", subject="east-uid")
    for _ in range(50):
        refusal = await keeper.redeem(GRANT_UID, request)
        assert isinstance(refusal, Refusal) and refusal.http_status == 403 and refusal.reason == "WrongCode"
    assert Api.reads == 0
    # the right code is checked against the API server's copy
    right = RedeemRequest(code=RIGHT, name="t", subject="east-uid")
    assert isinstance(await keeper.redeem(GRANT_UID, right), Refusal)    # no active site in this stand-in
    assert Api.reads == 1


async def _eventually(check: Any, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_refused_bindings_count_toward_429_and_unknown_paths_are_404() -> None:
    """The binding endpoint (generated credentials, "Proving a site"): every refused binding, a malformed one
    too, counts toward the source's 429 (a proof costs a signature check), while a redemption from another source
    goes on; a binding path that is not a fingerprint is 404, and a server without bindings answers 404."""
    calls: list[tuple[str, str]] = []

    async def bind(fingerprint: str, subject: str, proof: str, url: str) -> str | Refusal:
        calls.append((fingerprint, url))
        return Refusal(409, "IdentityTaken", "east-uid is already a site or router of this network")

    ca = pki.new_ca("grant-test-ca")
    server = GrantServer(_Redeemer(), ca, HOST, 0, bind=bind)
    await server.start()
    context = ssl.create_default_context(cadata=ca.cert.decode())
    path = "/bindings/" + "ab" * 32
    try:
        assert (await _post(server, context, b"", path="/bindings/xyz"))[0] == 404
        status, _, text = await _post(server, context, b"", path=path, headers=(("subject", "east-uid"),))
        assert (status, text) == (400, b"a binding request needs the headers subject and skupper-site-proof\n")
        statuses = [(await _post(server, context, b"", path=path, source="127.0.0.5",
                                 headers=(("subject", "east-uid"), ("skupper-site-proof", "x"))))[0]
                    for _ in range(12)]
        assert statuses == [409] * server.limits.failures_per_source + [429] * (12 - server.limits.failures_per_source)
        assert calls[0] == ("ab" * 32, f"{server.bound.url if server.bound else ''}{path}")
        assert len(calls) == server.limits.failures_per_source
        assert (await _post(server, context, _request(RIGHT), source="127.0.0.6"))[0] == 200
    finally:
        await server.stop()
    plain = GrantServer(_Redeemer(), ca, HOST, 0)
    await plain.start()
    try:
        assert (await _post(plain, context, b"", path=path))[0] == 404
    finally:
        await plain.stop()
