"""The SPDY/3.1 codec and the port-forward session without kubectl: the dictionary is the protocol's (its zlib id),
header blocks round-trip through the two compression contexts, a session forwards bytes both ways with half-close,
reports a refused port down the error stream, refuses hostile streams, and random input ends in a protocol error,
never anything else (kubectl's own client is in ``cluster/test_kubectl_port_forward.py``)."""

from __future__ import annotations

import asyncio
import random
import struct
import zlib
from collections.abc import AsyncIterator

import pytest

from kubesim.server import spdy
from kubesim.server.portforward import MAX_REQUESTS, PortForwardSession


def test_the_dictionary_is_spdy3s() -> None:
    assert len(spdy.DICTIONARY) == 1423
    assert zlib.adler32(spdy.DICTIONARY) == 3821447106     # the dictionary id a SPDY/3 peer checks


def test_header_blocks_round_trip_across_frames() -> None:
    client, server = spdy.HeaderCodec(), spdy.HeaderCodec()
    for n in range(3):     # one zlib stream per direction: later blocks depend on earlier ones
        headers = {"streamtype": ["data"], "port": [str(8080 + n)], "requestid": [str(n)], "x": ["a", "b"]}
        frame = spdy.FrameReader().feed(spdy.syn_stream_frame(client, 1 + 2 * n, headers))[0]
        assert isinstance(frame, spdy.ControlFrame)
        syn = spdy.parse_syn_stream(server, frame)
        assert (syn.stream_id, syn.headers) == (1 + 2 * n, headers)


def test_frames_split_anywhere_are_reassembled() -> None:
    data = spdy.data_frame(3, b"hello", fin=True) + spdy.ping_frame(7) + spdy.rst_stream_frame(5, spdy.CANCEL)
    reader, frames = spdy.FrameReader(), []
    for byte in data:
        frames += reader.feed(bytes([byte]))
    assert frames[0] == spdy.DataFrame(3, spdy.FLAG_FIN, b"hello")
    assert [f.type for f in frames[1:] if isinstance(f, spdy.ControlFrame)] == [spdy.PING, spdy.RST_STREAM]


def test_oversized_frames_and_header_bombs_are_refused() -> None:
    with pytest.raises(spdy.SpdyError, match="over the limit"):
        spdy.FrameReader().feed(struct.pack(">II", 1, spdy.MAX_FRAME + 1))
    with pytest.raises(spdy.SpdyError, match="version"):
        spdy.FrameReader().feed(struct.pack(">HHI", 0x8002, 1, 0))
    bomb = zlib.compressobj(zdict=spdy.DICTIONARY)
    block = bomb.compress(struct.pack(">I", 1) + b"\0" * 10_000_000) + bomb.flush(zlib.Z_SYNC_FLUSH)
    with pytest.raises(spdy.SpdyError, match="inflates past"):
        spdy.HeaderCodec().decode(block)
    with pytest.raises(spdy.SpdyError, match="headers in one block"):
        spdy.parse_header_block(struct.pack(">I", 10_000))


class Client:
    """Plays kubectl: opens stream pairs, decodes what the session sends back."""

    def __init__(self) -> None:
        self.codec, self.reader = spdy.HeaderCodec(), spdy.FrameReader()
        self.frames: list[spdy.Frame] = []
        self.changed = asyncio.Event()
        self.session = PortForwardSession(self._got, "127.0.0.1", "default/web-0")

    async def _got(self, data: bytes) -> None:
        self.frames += self.reader.feed(data)
        self.changed.set()

    async def open(self, stream: int, kind: str, port: int, request: str) -> None:
        headers = {"streamtype": [kind], "port": [str(port)], "requestid": [request]}
        await self.session.receive(spdy.syn_stream_frame(self.codec, stream, headers))

    async def wait_for(self, check: type | None = None, **match: object) -> spdy.Frame:
        async with asyncio.timeout(10):
            while True:
                for frame in self.frames:
                    if all(getattr(frame, k, None) == v for k, v in match.items()):
                        self.frames.remove(frame)
                        return frame
                self.changed.clear()
                await self.changed.wait()

    def data(self, stream: int) -> bytes:
        return b"".join(f.data for f in self.frames if isinstance(f, spdy.DataFrame) and f.stream_id == stream)


@pytest.fixture
async def echo() -> AsyncIterator[int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received = await reader.read()          # until the half-close
        writer.write(received.upper())
        writer.write_eof()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def test_a_session_forwards_both_ways_with_half_close(echo: int) -> None:
    client = Client()
    await client.open(1, "error", echo, "0")
    await client.open(3, "data", echo, "0")
    assert isinstance(await client.wait_for(type=spdy.SYN_REPLY), spdy.ControlFrame)
    await client.session.receive(spdy.data_frame(3, b"hello ") + spdy.data_frame(3, b"pod", fin=True))
    await client.wait_for(stream_id=3, flags=spdy.FLAG_FIN, data=b"")
    assert client.data(3) == b"HELLO POD"
    await client.wait_for(stream_id=1, flags=spdy.FLAG_FIN)
    await client.session.receive(spdy.ping_frame(9))
    assert await client.wait_for(type=spdy.PING)
    await client.session.close()


async def test_a_refused_port_goes_down_the_error_stream() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    client = Client()
    await client.open(1, "error", port, "7")
    await client.open(3, "data", port, "7")
    await client.wait_for(type=spdy.RST_STREAM, payload=struct.pack(">II", 1, spdy.CANCEL))
    assert b"error forwarding port" in client.data(1) and b"connection refused" in client.data(1)


async def test_hostile_streams_are_refused_and_bounded(echo: int) -> None:
    client = Client()
    await client.open(1, "shell", echo, "0")
    await client.open(3, "data", 0, "1")
    for stream in (1, 3):
        await client.wait_for(type=spdy.RST_STREAM, payload=struct.pack(">II", stream, spdy.REFUSED_STREAM))
    for n in range(MAX_REQUESTS + 1):      # error streams whose data streams never come
        await client.open(101 + 2 * n, "error", echo, f"r{n}")
    last = 101 + 2 * MAX_REQUESTS
    await client.wait_for(type=spdy.RST_STREAM, payload=struct.pack(">II", last, spdy.REFUSED_STREAM))
    with pytest.raises(spdy.SpdyError, match="opened twice"):
        await client.open(101, "error", echo, "again")
    await client.session.close()


async def test_random_input_is_a_protocol_error_or_nothing() -> None:
    rng = random.Random(20261126)
    for _ in range(300):
        client = Client()
        prefix = spdy.syn_stream_frame(client.codec, 1, {"streamtype": ["error"], "port": ["1"]})
        noise = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 200)))
        data = prefix[:rng.randrange(len(prefix))] + noise if rng.random() < 0.5 else noise
        try:
            await client.session.receive(data)
        except (spdy.SpdyError, EOFError):
            pass
        await client.session.close()
