"""A network namespace per Pod, for images whose programs bind fixed ports on wildcard addresses (root only).

Upstream Skupper's programs listen on fixed ports of every address (the router's ``:9090`` and ``:5671``,
kube-adaptor's ``:9000`` and ``:9191``, the controller's ``:9000`` and ``:9090``) and talk between the containers of
one Pod over ``localhost`` (kube-adaptor -> the router's ``localhost:5672``). In this machine's network namespace two
such Pods collide. ``PodNetworks`` gives each Pod of such images (``HostImage(network="pod")``) a network namespace
of its own, shared by its containers (entered with ``nsenter --net``), with ``lo`` up: inside it ``127.0.0.1`` and
every other loopback address are the Pod's own. kubesim's process relays, each connection as a byte stream:

- **inbound, declared**: the host's ``<Pod IP>:<port>`` for every declared ``containerPort`` and probe port of the
  Pod's containers -> ``<Pod IP>:<port>`` inside (so probes, Services and other Pods reach it);
- **inbound, undeclared**: every port a program of the Pod listens on, on every address or the Pod IP, that the spec
  does not declare (skrouterd's ``tcpListener`` s), found by reading the namespace's ``/proc/.../net/tcp{,6}``
  (``LISTEN``) every ``POLL_SECONDS``: relayed the same way while it listens (at most ``MAX_UNDECLARED`` a Pod);
- **outbound**: a connection from inside to any address of the cluster's block (``127.B.0.0/16``: Services,
  load balancers, nodes, other Pods; the Pod's own IP excepted) or to the API server's address
  (``KUBERNETES_SERVICE_HOST``/``PORT``) -> the same address on the host, where kube-proxy and the Pods answer,
  from the Pod's IP. The namespace's own ``nat`` table (``iptables-restore``, in the Pod's namespace only: the
  machine's rules are untouched) redirects those destinations to one listener of kubesim's on the namespace's
  ``127.0.0.1``, which reads the original destination (``SO_ORIGINAL_DST``); at most ``MAX_OUTBOUND`` connections
  a Pod at once. A listener per destination address was rejected: a listening socket on ``<ClusterIP>:8080`` in
  the namespace makes a program's later bind of ``0.0.0.0:8080`` fail (``EADDRINUSE``), and upstream's router
  binds its ``tcpListener`` ports (the same as its Services') on every address after it started.

A socket is made in the Pod's namespace by a dedicated thread that enters it (``setns``) and comes back; the
namespace lives as long as kubesim holds its file descriptor: until the Pod's last running container has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import fcntl
import ipaddress
import logging
import os
import shutil
import socket
import struct
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubesim.addresses import is_loopback
from kubesim.cluster.dns.hostnames import pipe
from kubesim.cluster.runtime.registry import ContainerSpec

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
NSENTER = shutil.which("nsenter")
IPTABLES_RESTORE = shutil.which("iptables-restore")
#: how often a Pod's listening sockets are read (undeclared ports appear and go within about this)
POLL_SECONDS = 0.5
#: at most this many undeclared ports relayed in, and outbound connections at once, per Pod
MAX_UNDECLARED = 256
MAX_OUTBOUND = 512
TCP_LISTEN = "0A"
RULES_TIMEOUT = 30.0

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class PodNetworkError(Exception):
    """A Pod's network namespace could not be made or entered."""


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise PodNetworkError(f"{what}: {os.strerror(errno)}")


def pod_ports(pod: Mapping[str, Any]) -> list[int]:
    """Every TCP port the Pod's containers declare or probe (numbers only), in order, without duplicates."""
    ports: list[int] = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if isinstance(p, dict) and isinstance(p.get("containerPort"), int) and p.get("protocol", "TCP") == "TCP":
                ports.append(p["containerPort"])
        for probe in (c.get("readinessProbe"), c.get("livenessProbe"), c.get("startupProbe")):
            for kind in ("httpGet", "tcpSocket"):
                port = ((probe or {}).get(kind) or {}).get("port")
                if isinstance(port, int):
                    ports.append(port)
    return list(dict.fromkeys(p for p in ports if 0 < p < 65536))


def _hex_address(text: str) -> str | None:
    """``/proc/net/tcp{,6}``'s local address (host byte order hex words) as an IP, or None."""
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return None
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    if len(raw) == 16:
        words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
        address = ipaddress.IPv6Address(words)
        return str(address.ipv4_mapped) if address.ipv4_mapped is not None else str(address)
    return None


def listening_ports(tables: Iterable[str], pod_ip: str) -> set[int]:
    """The TCP ports listened on, in ``/proc/net/tcp`` / ``tcp6`` texts, that a client of the Pod IP reaches: on
    every address (``0.0.0.0``, ``::``) or on the Pod IP itself (not ``127.0.0.1``: a Pod's localhost is its own)."""
    ports: set[int] = set()
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 4 or fields[3] != TCP_LISTEN or ":" not in fields[1]:
                continue
            address_hex, port_hex = fields[1].rsplit(":", 1)
            address = _hex_address(address_hex)
            if address in ("0.0.0.0", "::", pod_ip):
                with contextlib.suppress(ValueError):
                    ports.add(int(port_hex, 16))
    return {p for p in ports if 0 < p < 65536}


def outbound_rules(pod_ip: str, relay_port: int, api: tuple[str, int] | None) -> str:
    """The Pod namespace's ``nat`` table (``iptables-restore`` input): TCP to the cluster's block (the Pod's own IP
    excepted) and to the API server -> kubesim's listener on the namespace's ``127.0.0.1:<relay_port>``."""
    block = ipaddress.IPv4Network((pod_ip, 16), strict=False)
    lines = ["*nat", f"-A OUTPUT -p tcp -d {pod_ip}/32 -j RETURN",
             f"-A OUTPUT -p tcp -d {block} -j REDIRECT --to-ports {relay_port}"]
    if api is not None and ipaddress.IPv4Address(api[0]) not in block:
        lines.append(f"-A OUTPUT -p tcp -d {api[0]}/32 --dport {api[1]} -j REDIRECT --to-ports {relay_port}")
    return "\n".join([*lines, "COMMIT", ""])


async def _relay(client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 server: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    try:
        await asyncio.gather(pipe(client[0], server[1]), pipe(server[0], client[1]))
    finally:
        for writer in (client[1], server[1]):
            writer.close()


@dataclass
class PodNetwork:
    fd: int
    pod_ip: str
    users: int = 0
    servers: list[asyncio.Server] = field(default_factory=list)
    #: undeclared ports relayed in now, and their listeners on the host
    undeclared: dict[int, asyncio.Server] = field(default_factory=dict)
    declared: set[int] = field(default_factory=set)
    outbound: int = 0
    watcher: asyncio.Task[None] | None = None
    #: both ends of every connection relayed now (closed with the namespace)
    open_ends: set[asyncio.StreamWriter] = field(default_factory=set)

    async def relay(self, client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                    server: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        ends = {client[1], server[1]}
        self.open_ends |= ends
        try:
            await _relay(client, server)
        finally:
            self.open_ends -= ends

    def nsenter(self) -> list[str]:
        if NSENTER is None:
            raise PodNetworkError("util-linux nsenter is not installed")
        return [NSENTER, f"--net=/proc/{os.getpid()}/fd/{self.fd}", "--"]


class PodNetworks:
    """The network namespaces of the Pods that need one, by Pod uid."""

    def __init__(self) -> None:
        self._nets: dict[str, PodNetwork] = {}
        self._lock = asyncio.Lock()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kubesim-netns")
        self._host_fd: int | None = None

    def _host(self) -> int:
        if self._host_fd is None:
            self._host_fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        return self._host_fd

    def _in_namespace(self, fd: int | None, make: Any) -> Any:
        """Run ``make()`` in the namespace ``fd`` (None: a new one, whose descriptor is returned with the result) in
        this thread, and come back to the host's. Runs on the dedicated thread only."""
        host = self._host()
        if fd is None:
            _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        else:
            _check(_libc.setns(fd, CLONE_NEWNET), "setns into the Pod's network namespace")
        try:
            made = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC) if fd is None else fd
            return made, make()
        finally:
            if _libc.setns(host, CLONE_NEWNET) != 0:  # never leave a thread of kubesim in a Pod's namespace
                os.abort()

    async def _run(self, fd: int | None, make: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._in_namespace, fd, make)

    async def join(self, spec: ContainerSpec) -> PodNetwork:
        """The Pod's namespace (made, with its relays, for the Pod's first running container)."""
        async with self._lock:
            net = self._nets.get(spec.pod_uid)
            if net is None:
                fd, _ = await self._run(None, _loopback_up)
                net = PodNetwork(fd, spec.pod_ip)
                try:
                    await self._relays(net, spec)
                except BaseException:
                    await self._close(net)
                    raise
                self._nets[spec.pod_uid] = net
            net.users += 1
            return net

    async def leave(self, uid: str) -> None:
        async with self._lock:
            net = self._nets.get(uid)
            if net is None:
                return
            net.users -= 1
            if net.users <= 0:
                del self._nets[uid]
                await self._close(net)

    async def _close(self, net: PodNetwork) -> None:
        if net.watcher is not None:
            net.watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await net.watcher
        servers = [*net.servers, *net.undeclared.values()]
        net.undeclared.clear()
        for server in servers:
            server.close()
        for end in list(net.open_ends):  # the relays end with the Pod, as its connections would
            end.close()
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        os.close(net.fd)

    async def _relays(self, net: PodNetwork, spec: ContainerSpec) -> None:
        net.declared = set(pod_ports(spec.pod))
        for port in sorted(net.declared):
            net.servers.append(await asyncio.start_server(self._inbound(net, port), net.pod_ip, port))
        _, listener = await self._run(net.fd, lambda: _listener("127.0.0.1", 0))
        net.servers.append(await asyncio.start_server(self._outbound(net), sock=listener))
        await _install_rules(net, outbound_rules(net.pod_ip, listener.getsockname()[1], _api_address(spec.env)))
        net.watcher = asyncio.create_task(self._watch(net), name=f"kubesim-netns-ports-{spec.pod_name}")

    async def _watch(self, net: PodNetwork) -> None:
        """Relay in, while they listen, the ports the Pod's programs listen on that its spec does not declare."""
        while True:
            try:
                _, tables = await self._run(net.fd, _read_tcp_tables)
            except (OSError, PodNetworkError) as error:
                log.warning("reading the listening sockets of Pod IP %s: %s", net.pod_ip, error)
                tables = None
            if tables is not None:
                await self._sync_undeclared(net, listening_ports(tables, net.pod_ip) - net.declared)
            await asyncio.sleep(POLL_SECONDS)

    async def _sync_undeclared(self, net: PodNetwork, wanted: set[int]) -> None:
        for port in sorted(set(net.undeclared) - wanted):
            net.undeclared.pop(port).close()
        for port in sorted(wanted - set(net.undeclared)):
            if len(net.undeclared) >= MAX_UNDECLARED:
                log.warning("Pod IP %s listens on more than %d undeclared ports: port %d not relayed",
                            net.pod_ip, MAX_UNDECLARED, port)
                break
            try:
                net.undeclared[port] = await asyncio.start_server(self._inbound(net, port), net.pod_ip, port)
            except OSError as error:
                log.warning("relaying %s:%d into its Pod: %s", net.pod_ip, port, error)

    def _inbound(self, net: PodNetwork, port: int) -> Any:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                _, sock = await self._run(net.fd, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                sock.setblocking(False)
                await asyncio.get_running_loop().sock_connect(sock, (net.pod_ip, port))
                inside = await asyncio.open_connection(sock=sock)
            except (OSError, PodNetworkError):
                writer.close()  # nothing listens inside: the client's connection is reset
                return
            await net.relay((reader, writer), inside)
        return handle

    def _outbound(self, net: PodNetwork) -> Any:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            destination = _original_destination(writer)
            if destination is None or net.outbound >= MAX_OUTBOUND:
                writer.close()
                return
            net.outbound += 1
            try:
                try:
                    outside = await asyncio.open_connection(*destination, local_addr=(net.pod_ip, 0))
                except OSError:
                    writer.close()
                    return
                await net.relay((reader, writer), outside)
            finally:
                net.outbound -= 1
        return handle


def _original_destination(writer: asyncio.StreamWriter) -> tuple[str, int] | None:
    """Where the Pod's program meant to connect (before the namespace's ``REDIRECT``), if a loopback address."""
    sock = writer.get_extra_info("socket")
    try:
        raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    except (OSError, AttributeError):
        return None
    port, packed = struct.unpack("!2xH4s8x", raw)
    host = socket.inet_ntoa(packed)
    return (host, port) if is_loopback(host) and port > 0 else None


async def _install_rules(net: PodNetwork, rules: str) -> None:
    if IPTABLES_RESTORE is None:
        raise PodNetworkError("iptables-restore is not installed (Debian package iptables): a Pod's network "
                              "namespace needs it to relay its connections to the cluster")
    process = await asyncio.create_subprocess_exec(
        *net.nsenter(), IPTABLES_RESTORE, "--noflush", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(process.communicate(rules.encode()), RULES_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise PodNetworkError("iptables-restore in the Pod's network namespace did not finish") from None
    if process.returncode != 0:
        raise PodNetworkError(f"iptables-restore in the Pod's network namespace: {out.decode(errors='replace')[:500]}")


def _read_tcp_tables() -> list[str]:
    tables = []
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError):
            with open(f"/proc/thread-self/net/{name}") as table:
                tables.append(table.read())
    return tables


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def _listener(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(256)
    sock.setblocking(False)
    return sock


def _api_address(env: Mapping[str, str]) -> tuple[str, int] | None:
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if host.startswith("127.") and port.isdigit():
        return host, int(port)
    return None
