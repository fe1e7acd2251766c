"""SPDY/3.1 framing, as much of it as ``kubectl port-forward`` uses (its ``portforward.k8s.io`` streams ride on it,
tunnelled in WebSocket binary messages since kubectl 1.31).

Written here because no maintained Python package speaks SPDY (it was retired in favour of HTTP/2, but Kubernetes
streaming still uses it). Pure codec, no I/O: :class:`FrameReader` turns bytes into frames, the ``*_frame``
functions build the frames a server sends, :class:`HeaderCodec` keeps the two zlib contexts of one connection
(header blocks are compressed with one stream per direction, primed with the protocol's dictionary).

Everything read is bounded: a frame longer than :data:`MAX_FRAME` or a header block that inflates past
:data:`MAX_HEADER_BLOCK` is a :class:`SpdyError`, and the caller closes the connection.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
#: RST_STREAM status codes (SPDY/3 §2.6.3)
PROTOCOL_ERROR, INVALID_STREAM, REFUSED_STREAM, CANCEL, INTERNAL_ERROR = 1, 2, 3, 5, 6
MAX_FRAME = 1 << 20
MAX_HEADER_BLOCK = 64 * 1024
MAX_HEADERS = 64

_WORDS = (
    *"options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age "
    "allow authorization cache-control connection content-base content-encoding content-language content-length "
    "content-location content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location max-forwards pragma "
    "proxy-authenticate proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
    "user-agent vary via warning www-authenticate method get status".split(),
    "200 OK",
    *"version HTTP/1.1 url public set-cookie keep-alive origin".split(),
)
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)


def _dictionary() -> bytes:
    """SPDY/3's header-compression dictionary (§2.6.10.1): length-prefixed words, then a run of plain text."""
    out = bytearray()
    for word in _WORDS:
        data = word.encode()
        out += struct.pack(">I", len(data)) + data
    return bytes(out) + _TAIL.encode()


DICTIONARY = _dictionary()


class SpdyError(Exception):
    """The peer broke the protocol; the connection cannot go on."""


@dataclass(frozen=True)
class DataFrame:
    stream_id: int
    flags: int
    data: bytes

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


@dataclass(frozen=True)
class ControlFrame:
    type: int
    flags: int
    payload: bytes

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


Frame = DataFrame | ControlFrame


class FrameReader:
    """Bytes in, whole frames out; keeps the partial frame between calls."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= 8:
            head, flags_length = struct.unpack_from(">II", self._buffer)
            length = flags_length & 0xFFFFFF
            if length > MAX_FRAME:
                raise SpdyError(f"frame of {length} bytes is over the limit of {MAX_FRAME}")
            if len(self._buffer) < 8 + length:
                break
            payload = bytes(self._buffer[8:8 + length])
            del self._buffer[:8 + length]
            flags = flags_length >> 24
            if head & 0x80000000:
                version, kind = (head >> 16) & 0x7FFF, head & 0xFFFF
                if version != VERSION:
                    raise SpdyError(f"SPDY version {version} is not spoken here (only {VERSION})")
                frames.append(ControlFrame(kind, flags, payload))
            else:
                frames.append(DataFrame(head & 0x7FFFFFFF, flags, payload))
        return frames


class HeaderCodec:
    """One connection's header compression: a zlib stream each way, primed with :data:`DICTIONARY`."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)
        self._deflate = zlib.compressobj(level=9, zdict=DICTIONARY)

    def decode(self, block: bytes) -> dict[str, list[str]]:
        try:
            raw = self._inflate.decompress(block, MAX_HEADER_BLOCK)
        except zlib.error as e:
            raise SpdyError(f"header block does not inflate: {e}") from None
        if self._inflate.unconsumed_tail:
            raise SpdyError(f"header block inflates past {MAX_HEADER_BLOCK} bytes")
        return parse_header_block(raw)

    def encode(self, headers: dict[str, list[str]]) -> bytes:
        return self._deflate.compress(header_block(headers)) + self._deflate.flush(zlib.Z_SYNC_FLUSH)


def parse_header_block(raw: bytes) -> dict[str, list[str]]:
    """An inflated header block: a count, then (name, value) pairs, each length-prefixed; values split on NUL."""
    def take(at: int) -> tuple[bytes, int]:
        if at + 4 > len(raw):
            raise SpdyError("header block is truncated")
        (n,) = struct.unpack_from(">I", raw, at)
        if at + 4 + n > len(raw):
            raise SpdyError("header block is truncated")
        return raw[at + 4:at + 4 + n], at + 4 + n

    if len(raw) < 4:
        raise SpdyError("header block is truncated")
    (count,) = struct.unpack_from(">I", raw)
    if count > MAX_HEADERS:
        raise SpdyError(f"{count} headers in one block (at most {MAX_HEADERS})")
    at, headers = 4, {}
    for _ in range(count):
        name, at = take(at)
        value, at = take(at)
        try:
            key = name.decode("ascii")
            headers[key] = value.decode("utf-8").split("\x00")
        except UnicodeDecodeError:
            raise SpdyError("a header name or value is not text") from None
        if not key or key != key.lower():
            raise SpdyError("header names are non-empty and lowercase in SPDY/3")
    return headers


def header_block(headers: dict[str, list[str]]) -> bytes:
    out = bytearray(struct.pack(">I", len(headers)))
    for name, values in headers.items():
        for part in (name.lower().encode(), "\x00".join(values).encode()):
            out += struct.pack(">I", len(part)) + part
    return bytes(out)


def _control(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload


def data_frame(stream_id: int, data: bytes, fin: bool = False) -> bytes:
    return struct.pack(">II", stream_id & 0x7FFFFFFF, ((FLAG_FIN if fin else 0) << 24) | len(data)) + data


def syn_reply_frame(codec: HeaderCodec, stream_id: int, headers: dict[str, list[str]] | None = None) -> bytes:
    return _control(SYN_REPLY, 0, struct.pack(">I", stream_id) + codec.encode(headers or {}))


def syn_stream_frame(codec: HeaderCodec, stream_id: int, headers: dict[str, list[str]], fin: bool = False) -> bytes:
    """What a client sends to open a stream (kubesim's tests play kubectl with it)."""
    body = struct.pack(">IIBB", stream_id, 0, 0, 0) + codec.encode(headers)
    return _control(SYN_STREAM, FLAG_FIN if fin else 0, body)


def rst_stream_frame(stream_id: int, status: int) -> bytes:
    return _control(RST_STREAM, 0, struct.pack(">II", stream_id, status))


def ping_frame(ping_id: int) -> bytes:
    return _control(PING, 0, struct.pack(">I", ping_id))


def goaway_frame(last_stream_id: int, status: int = 0) -> bytes:
    return _control(GOAWAY, 0, struct.pack(">II", last_stream_id, status))


@dataclass(frozen=True)
class SynStream:
    stream_id: int
    fin: bool
    headers: dict[str, list[str]]


def parse_syn_stream(codec: HeaderCodec, frame: ControlFrame) -> SynStream:
    if len(frame.payload) < 10:
        raise SpdyError("SYN_STREAM is too short")
    (stream_id,) = struct.unpack_from(">I", frame.payload)
    stream_id &= 0x7FFFFFFF
    if stream_id == 0:
        raise SpdyError("SYN_STREAM for stream 0")
    return SynStream(stream_id, frame.fin, codec.decode(frame.payload[10:]))


def stream_and_value(frame: ControlFrame) -> tuple[int, int]:
    """(stream id, 32-bit value) of an RST_STREAM or WINDOW_UPDATE; (id, 0) of a PING."""
    if len(frame.payload) < 4:
        raise SpdyError(f"control frame {frame.type} is too short")
    (first,) = struct.unpack_from(">I", frame.payload)
    second = struct.unpack_from(">I", frame.payload, 4)[0] if len(frame.payload) >= 8 else 0
    return first & 0x7FFFFFFF if frame.type != PING else first, second
