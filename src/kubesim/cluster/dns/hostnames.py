"""Cluster names from the host: a DNS server and a SOCKS5 proxy, both on loopback addresses of the cluster's block.

kubesim cannot change the machine's resolver, so ``curl http://web.default.svc.cluster.local`` cannot work by
itself. Two ways in, neither needing root:

- :class:`ClusterDns` answers DNS queries (UDP and TCP) for the names cluster DNS publishes
  (:func:`kubesim.cluster.dns.names.lookup`): ``dig @127.N.0.10 -p PORT web.default.svc.cluster.local``. It is
  authoritative for the cluster domain (unknown names there are NXDOMAIN) and refuses everything else: it never
  forwards a query, so it never sends a packet anywhere.
- :class:`SocksProxy` is a SOCKS5 proxy (RFC 1928, CONNECT, no authentication) that resolves cluster names itself:
  ``curl --proxy socks5h://127.N.0.11:1080 http://web.default.svc.cluster.local:8080``. It dials loopback addresses
  only (a name or address outside 127.0.0.0/8 is "not allowed by ruleset"), gives a client 10 s to finish its
  handshake and holds at most :data:`MAX_PROXY_CONNECTIONS` connections.

The DNS wire format comes from ``dnslib``; the SOCKS5 server is written here because no maintained Python package
serves SOCKS5 from asyncio (the maintained ones are clients), and the protocol's CONNECT subset is a few messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import struct
from collections.abc import Callable
from typing import cast

from dnslib import QTYPE, RCODE, RR, A, DNSError, DNSRecord

log = logging.getLogger(__name__)

Lookup = Callable[[str], "list[str] | None"]
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
TTL = 5
MAX_PROXY_CONNECTIONS = 256
HANDSHAKE_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
MAX_DNS_TCP = 64


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address) in LOOPBACK
    except ValueError:
        return False


class ClusterDns:
    """Answers queries for one cluster's names; :meth:`answer` is the pure part."""

    def __init__(self, lookup: Lookup, cluster_domain: str = "cluster.local") -> None:
        self._lookup = lookup
        self._domain = cluster_domain.strip(".").lower()
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self.address: tuple[str, int] | None = None

    def answer(self, query: bytes) -> bytes | None:
        """The reply to one query message; None for bytes that are not a DNS query (dropped, as resolvers do)."""
        try:
            request = DNSRecord.parse(query)
        except (DNSError, ValueError, IndexError, struct.error):
            return None
        if request.header.qr or not request.questions:
            return None
        reply = request.reply(ra=0, aa=1)
        if request.header.opcode != 0 or len(request.questions) != 1:
            reply.header.rcode = RCODE.NOTIMP if request.header.opcode != 0 else RCODE.FORMERR
            return bytes(reply.pack())
        question = request.questions[0]
        name = str(question.qname).rstrip(".").lower()
        known = self._lookup(name) if len(name) <= 253 else None
        addresses = [a for a in known or [] if _loopback(a)]
        if not addresses:
            inside = name == self._domain or name.endswith("." + self._domain)
            reply.header.rcode = RCODE.NXDOMAIN if inside or known is not None else RCODE.REFUSED
            reply.header.aa = 1 if inside or known is not None else 0
        elif question.qtype in (QTYPE.A, QTYPE.ANY):
            for address in addresses:
                reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(address), ttl=TTL))
        # a known name asked for AAAA, MX, ...: no error, no answer (it has IPv4 addresses only)
        return bytes(reply.pack())

    async def start(self, host: str, port: int = 53, *, any_port: bool = True) -> tuple[str, int]:
        """Listen on ``host`` (loopback only), UDP and TCP on the same port: ``port``, else (``any_port``) any free
        port when ``port`` cannot be bound (53 needs privileges; without ``any_port``, ``OSError``). Returns the
        address."""
        if not _loopback(host):
            raise ValueError(f"{host} is not a loopback address")
        loop = asyncio.get_running_loop()
        for candidate in (port, 0) if port and any_port else (port,):
            try:
                self._udp, _ = await loop.create_datagram_endpoint(lambda: _DnsDatagrams(self),
                                                                    local_addr=(host, candidate))
                bound = self._udp.get_extra_info("sockname")[1]
                self._tcp = await asyncio.start_server(self._serve_tcp, host, bound)
                break
            except OSError:
                if self._udp is not None:
                    self._udp.close()
                    self._udp = None
                if candidate == 0:
                    raise
        self.address = (host, bound)
        return self.address

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for _ in range(MAX_DNS_TCP):
                async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                    (length,) = struct.unpack(">H", await reader.readexactly(2))
                    query = await reader.readexactly(length)
                reply = self.answer(query)
                if reply is None:
                    break
                writer.write(struct.pack(">H", len(reply)) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._tcp is not None:
            self._tcp.close()
            await self._tcp.wait_closed()
            self._tcp = None


class _DnsDatagrams(asyncio.DatagramProtocol):
    def __init__(self, server: ClusterDns) -> None:
        self._server = server
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = self._server.answer(data)
        if reply is not None and self._transport is not None and _loopback(addr[0]):
            self._transport.sendto(reply, addr)


# SOCKS5 reply codes (RFC 1928 §6)
SUCCEEDED, GENERAL_FAILURE, NOT_ALLOWED, HOST_UNREACHABLE, REFUSED, COMMAND_UNSUPPORTED, ADDRESS_UNSUPPORTED = (
    0, 1, 2, 4, 5, 7, 8)


class SocksError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class SocksProxy:
    """SOCKS5 CONNECT to cluster names and loopback addresses."""

    def __init__(self, lookup: Lookup, max_connections: int = MAX_PROXY_CONNECTIONS) -> None:
        self._lookup = lookup
        self._max = max_connections
        self._open = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.address: tuple[str, int] | None = None

    async def start(self, host: str, port: int = 1080) -> tuple[str, int]:
        if not _loopback(host):
            raise ValueError(f"{host} is not a loopback address")
        try:
            self._server = await asyncio.start_server(self._accept, host, port)
        except OSError:
            self._server = await asyncio.start_server(self._accept, host, 0)
        self.address = (host, self._server.sockets[0].getsockname()[1])
        return self.address

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= self._max:
            writer.close()
            return
        self._open += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            self._open -= 1
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    def resolve(self, kind: int, raw: bytes) -> str:
        """The loopback address to dial for a request's address field; :class:`SocksError` when there is none."""
        if kind == 1:
            address = str(ipaddress.IPv4Address(raw))
        elif kind == 3:
            name = raw.decode("ascii", "replace").rstrip(".").lower()
            found = self._lookup(name) if 0 < len(name) <= 253 else None
            if not found:
                raise SocksError(HOST_UNREACHABLE, f"{name[:100]} is not a name of this cluster")
            address = found[0]
        else:
            raise SocksError(ADDRESS_UNSUPPORTED, "only IPv4 addresses and names")
        if not _loopback(address):
            raise SocksError(NOT_ALLOWED, f"{address} is outside 127.0.0.0/8")
        return address

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[str, int]:
        version, count = await reader.readexactly(2)
        methods = await reader.readexactly(count)
        if version != 5 or 0 not in methods:
            writer.write(b"\x05\xff")
            raise SocksError(GENERAL_FAILURE, "SOCKS5 without authentication only")
        writer.write(b"\x05\x00")
        version, command, _, kind = await reader.readexactly(4)
        if kind == 3:
            (length,) = await reader.readexactly(1)
            raw = await reader.readexactly(length)
        else:
            raw = await reader.readexactly(4 if kind == 1 else 16 if kind == 4 else 0)
        (port,) = struct.unpack(">H", await reader.readexactly(2))
        if version != 5 or command != 1:
            raise SocksError(COMMAND_UNSUPPORTED, "CONNECT only")
        return self.resolve(kind, raw), port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                address, port = await self._handshake(reader, writer)
            async with asyncio.timeout(CONNECT_TIMEOUT):
                target_reader, target_writer = await asyncio.open_connection(address, port)
        except SocksError as e:
            writer.write(bytes([5, e.code, 0, 1, 0, 0, 0, 0, 0, 0]))
            log.debug("SOCKS request refused: %s", e)
            return
        except ConnectionRefusedError:
            writer.write(bytes([5, REFUSED, 0, 1, 0, 0, 0, 0, 0, 0]))
            return
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
            with contextlib.suppress(Exception):
                writer.write(bytes([5, HOST_UNREACHABLE, 0, 1, 0, 0, 0, 0, 0, 0]))
            return
        bound_host, bound_port = target_writer.get_extra_info("sockname")[:2]
        writer.write(bytes([5, SUCCEEDED, 0, 1]) + ipaddress.IPv4Address(bound_host).packed +
                     struct.pack(">H", bound_port))
        try:
            await asyncio.gather(pipe(reader, target_writer), pipe(target_reader, writer))
        finally:
            target_writer.close()


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until end of stream, then half-close ``writer`` (a relay's one direction)."""
    try:
        while chunk := await reader.read(64 * 1024):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()
