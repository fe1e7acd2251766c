"""The redeemer reads a grant server's whole answer, however the server writes it: upstream's grant server writes
``---`` and then each document as it encodes it (a chunked answer arriving in pieces); an answer beyond the limit is
refused with the reason, nothing of it kept."""

from __future__ import annotations

import asyncio
import ssl
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from service_network.site import pki
from service_network.site.grants import parse_answer
from service_network.site.redeem import MAX_ANSWER, _Refused, post_redemption

ANSWER_CA = pki.new_ca("grant server CA")
CLIENT = pki.issue(ANSWER_CA, "client", client=True)


def _answer() -> list[bytes]:
    """Upstream's answer in the pieces its controller writes: ``---``, the Secret, ``---``, the Link."""
    import base64

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()
    secret = (f"apiVersion: v1\ndata:\n  ca.crt: {b64(ANSWER_CA.cert)}\n  tls.crt: {b64(CLIENT.cert)}\n"
              f"  tls.key: {b64(CLIENT.key)}\nkind: Secret\nmetadata:\n  creationTimestamp: null\n"
              f"  name: theirs-token\ntype: kubernetes.io/tls\n")
    link = ("apiVersion: skupper.io/v2alpha1\nkind: Link\nmetadata:\n  creationTimestamp: null\n  name: theirs-token\n"
            "spec:\n  endpoints:\n  - host: 127.0.0.9\n    name: inter-router\n    port: \"55671\"\n"
            "  - host: 127.0.0.9\n    name: edge\n    port: \"45671\"\n  tlsCredentials: theirs-token\n"
            "status: {}\n")
    return [b"---\n", secret.encode(), b"---\n", link.encode()]


@pytest.fixture
async def grant_server() -> AsyncIterator[tuple[str, list[list[bytes]]]]:
    """An HTTPS server on 127.0.0.1 answering with the pieces in ``pieces[0]``, each flushed on its own."""
    pieces: list[list[bytes]] = [_answer()]

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for piece in pieces[0]:
            await response.write(piece)
            await asyncio.sleep(0.05)     # each piece its own packet, as a server encoding as it goes sends them
        await response.write_eof()
        return response

    server_pair = pki.issue(ANSWER_CA, "127.0.0.1", ips=["127.0.0.1"])
    with tempfile.TemporaryDirectory() as where:
        cert, key = Path(where) / "tls.crt", Path(where) / "tls.key"
        cert.write_bytes(server_pair.cert)
        key.write_bytes(server_pair.key)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
    app = web.Application()
    app.router.add_post("/grant", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"https://127.0.0.1:{port}/grant", pieces
    finally:
        await runner.cleanup()


async def test_an_answer_written_in_pieces_is_read_whole(grant_server: tuple[str, list[list[bytes]]]) -> None:
    url, _ = grant_server
    text = await post_redemption(url, ANSWER_CA.cert.decode(), "code", "theirs-token", "site-uid")
    answer = parse_answer(text)
    assert answer.cert == CLIENT.cert.decode()
    assert [[(e.name, e.host, e.port) for e in link] for link in answer.links] == [
        [("inter-router", "127.0.0.9", 55671), ("edge", "127.0.0.9", 45671)]]


async def test_an_answer_beyond_the_limit_is_refused(grant_server: tuple[str, list[list[bytes]]]) -> None:
    url, pieces = grant_server
    pieces[0] = [b"x" * 65536] * (MAX_ANSWER // 65536 + 2)
    with pytest.raises(_Refused, match=f"answered with more than it may: the answer is longer than {MAX_ANSWER}"):
        await post_redemption(url, ANSWER_CA.cert.decode(), "code", "theirs-token", "site-uid")
