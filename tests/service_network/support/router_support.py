"""Helpers for router tests: loopback addresses and free ports, backends that say who answered, configuration
documents, a running router (``FileRouter``: the adaptor in this process and its router process, as ``service-network
router --config FILE`` runs them), and waits with deadlines. Every address is in 127.0.50.0/24."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import ssl
import struct
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from devenv.ports import listen_port
from kubesim.testing.patience import patience
from service_network.router.rust_adaptor import RustAdaptor
from service_network.router.sources import FileConfigSource

_next = itertools.count(random.randrange(250))


def loopback() -> str:
    """A loopback address of our range, different from the previous ones (tests use their own addresses)."""
    return f"127.0.50.{2 + next(_next) % 250}"


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def router_pid(state_dir: Path) -> int | None:
    """The router process serving ``state_dir`` (its control socket, ``<state>/router.sock``, is in its command
    line), or None."""
    wanted = str(state_dir / "router.sock").encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if wanted in entry.joinpath("cmdline").read_bytes().split(b"\0"):
                    return int(entry.name)
    return None


def free_port(host: str) -> int:
    return listen_port(host)


def refusing_port(host: str) -> int:
    """A port on ``host`` where nothing listens (connections are refused)."""
    return free_port(host)


async def wait_until(check: Callable[[], Any], within: float = 5.0, what: str = "") -> Any:
    """The first truthy result of ``check`` (sync or async); AssertionError after ``within`` seconds."""
    deadline = time.monotonic() + patience(within)
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {within}s waiting for {what or check}: last value {last!r}")


class Backend:
    """A TCP server on a loopback address: greets each connection with ``<name>\\n`` (unless ``greet`` is False),
    then echoes, or runs ``handler``. Counts accepted and open connections."""

    def __init__(self, name: str, host: str | None = None, *, greet: bool = True,
                 handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.name = name
        self.host = host or loopback()
        self.greet = greet
        self.handler = handler
        self.ssl_context = ssl_context
        self.accepted = 0
        self.open = 0
        self.closed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> Backend:
        self._server = await asyncio.start_server(self._serve, self.host, 0, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open += 1
        self._writers.add(writer)
        try:
            if self.greet:
                writer.write(f"{self.name}\n".encode())
                await writer.drain()
            if self.handler is not None:
                await self.handler(reader, writer)
            else:
                while data := await reader.read(256 * 1024):
                    writer.write(data)
                    await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.open -= 1
            self._writers.discard(writer)
            self.closed.set()
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)


def document(*, listeners: list[dict[str, Any]] | None = None, connectors: list[dict[str, Any]] | None = None,
             tls_profiles: list[dict[str, Any]] | None = None, **router: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"version": 1, "site": {"id": "site-uid", "name": "west"},
                           "listeners": listeners or [], "connectors": connectors or []}
    if tls_profiles:
        doc["tlsProfiles"] = tls_profiles
    if router:
        doc["router"] = router
    return doc


def connector(name: str, key: str, backends: list[Backend], **extra: Any) -> dict[str, Any]:
    """A Connector document whose targets are ``backends`` (all on the same port is not required: each backend gets
    its own Connector entry when ports differ, so use one backend per connector or equal ports)."""
    ports = {b.port for b in backends}
    assert len(ports) <= 1, "targets of one connector share a port"
    return {"name": name, "routingKey": key, "port": ports.pop() if ports else 1,
            "targets": [{"host": b.host, "name": b.name} for b in backends], **extra}


def target_connectors(key: str, backends: list[Backend]) -> list[dict[str, Any]]:
    """One Connector per backend (each backend listens on its own port)."""
    return [connector(f"c-{b.name}", key, [b]) for b in backends]


class FileRouter:
    """A router run from a document file that ``apply`` rewrites: the adaptor (``RustAdaptor``) in this process, the
    router process it starts."""

    def __init__(self, state_dir: Path) -> None:
        self.config = state_dir.with_name(f"{state_dir.name}.json")
        self.adaptor = RustAdaptor(FileConfigSource(self.config), state_dir)

    def write(self, doc: dict[str, Any]) -> None:
        tmp = self.config.with_name(f".{self.config.name}.tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(self.config)

    @property
    def problems(self) -> list[str]:
        """What the last document applied withheld, and why."""
        return self.adaptor.problems

    @property
    def pid(self) -> int | None:
        return self.adaptor.plane.pid

    async def metric(self, name: str, labels: str) -> float:
        """The value of the router's metric ``name`` whose labels contain ``labels`` (0 when there is none)."""
        return metric_value(await self.adaptor.plane.metrics_text(), name, labels)


def metric_value(text: str, name: str, labels: str) -> float:
    """The value of metric ``name`` whose labels contain ``labels`` in a router's metrics ``text`` (0 when there is
    none)."""
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@contextlib.asynccontextmanager
async def running_router(state_dir: Path, doc: dict[str, Any]) -> AsyncIterator[FileRouter]:
    """The router serving ``doc`` until the block ends; then stopped, and its document file removed."""
    router = FileRouter(state_dir)
    router.write(doc)
    stop = asyncio.Event()
    task = asyncio.create_task(router.adaptor.run(stop))
    applied = asyncio.ensure_future(router.adaptor.applied.wait())
    try:
        await asyncio.wait({applied, task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        assert applied.done(), "the router did not start"
        await listening(router, doc)
        yield router
    finally:
        applied.cancel()
        stop.set()
        await asyncio.wait_for(task, 30)
        router.config.unlink(missing_ok=True)


async def apply(router: FileRouter, doc: dict[str, Any]) -> list[str]:
    """Write ``doc`` and wait until the adaptor applied it; what it withheld, and why."""
    router.adaptor.applied.clear()
    router.write(doc)
    await asyncio.wait_for(router.adaptor.applied.wait(), 30)
    await listening(router, doc)
    return router.problems


async def listening(router: FileRouter, doc: dict[str, Any], within: float = 5.0) -> None:
    """Wait until the router listens for each of ``doc``'s Listeners that a target of its own serves and that was not
    withheld: the router answers an apply before a listener's socket is bound (it binds once its key is reachable),
    so a client connecting at once could be refused. Returns after ``within`` seconds regardless (a port in use keeps
    its listener waiting): the test's own assertions judge."""
    served = {c["routingKey"] for c in doc.get("connectors") or [] if c.get("targets")}
    withheld = " ".join(router.problems)
    names = {listener["name"] for listener in doc.get("listeners") or []
             if listener.get("routingKey") in served and f"(listener '{listener['name']}') withheld" not in withheld}
    deadline = time.monotonic() + patience(within)
    while names and time.monotonic() < deadline:
        bound = (await router.adaptor.plane.addresses()).get("listeners") or {}
        if names <= set(bound):
            return
        await asyncio.sleep(0.02)


async def connect(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection(host, port), 5)


async def who(host: str, port: int) -> tuple[str, asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect and read the greeting: the name of the backend that answered ("" if the router closed)."""
    reader, writer = await connect(host, port)
    line = await asyncio.wait_for(reader.readline(), 5)
    return line.decode().strip(), reader, writer


async def refused(host: str, port: int) -> bool:
    """True if a connection attempt is refused at once (ECONNREFUSED), not left hanging."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:     # the attempt raced with the listening socket closing: the next one decides
        return False
    writer.close()
    return False


async def closed_by_peer(reader: asyncio.StreamReader, within: float = 5.0) -> bool:
    """True when the connection is closed (EOF or reset) within ``within`` seconds without data."""
    try:
        data = await asyncio.wait_for(reader.read(1), within)
    except (ConnectionResetError, BrokenPipeError):
        return True
    return data == b""


# --- the Rust router's link protocol, as far as tests need it (docs/service-network-router.md, "Link protocol") ---

LINK_HELLO = 1


def link_hello_frame(router: str, *, link: str = "probe", group: str = "0000000000000001") -> bytes:
    """A dialer's HELLO frame for ``router`` (which the client certificate must allow)."""
    body = json.dumps({"versions": [1], "router": router, "site": {"id": router, "name": router}, "link": link,
                       "cost": 1, "group": group, "index": 0, "count": 1}).encode()
    return struct.pack(">BBII", LINK_HELLO, 0, 0, len(body)) + body


async def read_link_hello(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The acceptor's HELLO answer; ``ConnectionError`` when the access closed instead (it refused the HELLO)."""
    try:
        header = await reader.readexactly(10)
        kind, _, _, length = struct.unpack(">BBII", header)
        if kind != LINK_HELLO or length > 16 * 1024:
            raise ConnectionError(f"not a HELLO frame (type {kind}, {length} bytes)")
        answer: dict[str, Any] = json.loads(await reader.readexactly(length))
    except asyncio.IncompleteReadError:
        raise ConnectionError("closed by the access") from None
    return answer


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def readyz(adaptor: RustAdaptor) -> tuple[int, str]:
    """The adaptor's ``/readyz``: (HTTP status, body)."""
    assert adaptor.metrics_port is not None
    return await asyncio.to_thread(_readyz, adaptor.metrics_port)
