"""A network namespace per Pod, for images whose programs bind fixed ports on wildcard addresses (root only).

Upstream Skupper's programs listen on fixed ports of every address (the router's ``:9090`` and ``:5671``,
kube-adaptor's ``:9000`` and ``:9191``, the controller's ``:9000`` and ``:9090``) and talk between the containers of
one Pod over ``localhost`` (kube-adaptor -> the router's ``localhost:5672``). In this machine's network namespace two
such Pods collide. ``PodNetworks`` gives each Pod of such images (``HostImage(network="pod")``) a network namespace
of its own, shared by its containers (entered with ``nsenter --net``), with ``lo`` up: inside it ``127.0.0.1`` and
every other loopback address are the Pod's own. kubesim's process relays, each connection as a byte stream:

- **inbound**: the host's ``<Pod IP>:<port>`` for every declared ``containerPort`` and probe port of the Pod's
  containers -> ``127.0.0.1:<port>`` inside (so probes, Services and other Pods reach it);
- **outbound**: the API server's address (``KUBERNETES_SERVICE_HOST``/``PORT``) inside -> the same on the host.

Other outbound destinations (Services, other Pods) are not relayed yet (docs/kubesim.md). A socket is made in the
Pod's namespace by a dedicated thread that enters it (``setns``) and comes back; the namespace lives as long as
kubesim holds its file descriptor: until the Pod's last running container has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import fcntl
import logging
import os
import shutil
import socket
import struct
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubesim.cluster.dns.hostnames import pipe
from kubesim.cluster.runtime.registry import ContainerSpec

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
NSENTER = shutil.which("nsenter")

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
        for server in net.servers:
            server.close()
        for server in net.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        os.close(net.fd)

    async def _relays(self, net: PodNetwork, spec: ContainerSpec) -> None:
        for port in pod_ports(spec.pod):
            net.servers.append(await asyncio.start_server(self._inbound(net, port), net.pod_ip, port))
        for host, port in _outbound(spec.env):
            _, listener = await self._run(net.fd, lambda h=host, p=port: _listener(h, p))
            net.servers.append(await asyncio.start_server(_outbound_to(host, port), sock=listener))

    def _inbound(self, net: PodNetwork, port: int) -> Any:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                _, sock = await self._run(net.fd, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                sock.setblocking(False)
                await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
                inside = await asyncio.open_connection(sock=sock)
            except (OSError, PodNetworkError):
                writer.close()  # nothing listens inside: the client's connection is reset
                return
            await _relay((reader, writer), inside)
        return handle


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def _listener(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    sock.setblocking(False)
    return sock


def _outbound(env: Mapping[str, str]) -> Iterable[tuple[str, int]]:
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if host.startswith("127.") and port.isdigit():
        yield host, int(port)


def _outbound_to(host: str, port: int) -> Any:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            outside = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await _relay((reader, writer), outside)
    return handle
