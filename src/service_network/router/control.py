"""The control channel between routers' adaptors (I/O): for each outgoing link the adaptor dials the remote router
access with the link's client certificate (mutual TLS 1.3, SNI ``control.service-network``); the remote HAProxy
hands such connections to its adaptor's Unix socket. Over each channel both sides send newline-delimited JSON:

- ``{"t": "hello", "router": id, "site": {...}}`` every second; a channel that brings nothing for 3 s is closed
  and its neighbour is lost (a link also goes down at once when its connection closes);
- ``{"t": "ad", "ad": {...}}``: link-state advertisements (``linkstate.Advert``), all of them when a channel
  opens, then each newer one as it arrives (flooded to every other channel), so every router of the network holds
  every router's newest advertisement.

The database, paths and routes are computed by ``linkstate`` (pure); this module only moves messages, keeps link
status (up, or down with the reason: refused, TLS failure, silence) and calls ``on_change`` when routes or status
may have changed. No Python library speaks this protocol: it is ours, hence hand-written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .errors import truncate
from .linkstate import Advert, AdvertLink, LinkStateDb, ServiceEntry, SiteInfo, connected_routers
from .names import CONTROL_SNI

__all__ = [
    "HELLO_INTERVAL",
    "NEIGHBOUR_TIMEOUT",
    "ControlPlane",
    "LinkEndpoint",
    "LinkStatus",
    "Neighbour",
]

log = logging.getLogger("service_network.router.control")

HELLO_INTERVAL = 1.0
NEIGHBOUR_TIMEOUT = 3.0          # upstream's helloMaxAgeSeconds as Skupper sets it
RETRY_INTERVAL = 1.0             # a link that went down is dialled again after this
PURGE_AFTER = 10.0               # advertisements of routers no longer connected are dropped after this
MAX_MESSAGE = 16 * 1024 * 1024


@dataclass(frozen=True)
class LinkEndpoint:
    """What the adaptor needs to dial a link: its remote access and the TLS files the router wrote."""

    name: str
    host: str
    port: int
    cost: int
    ca_file: Path
    cert_file: Path        # certificate chain followed by the key
    tls_version: str = "1.3"


@dataclass
class LinkStatus:
    name: str
    cost: int
    up: bool = False
    reason: str = "not connected yet"
    remote_router: str | None = None
    remote_site: SiteInfo | None = None
    since: float = field(default_factory=time.time)
    address: str | None = None      # the IP the link's host resolved to when its channel came up

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "up": self.up, "cost": self.cost, "reason": None if self.up else self.reason,
                "remoteRouter": self.remote_router,
                "remoteSite": self.remote_site.model_dump(exclude_none=True) if self.remote_site else None,
                "since": round(self.since, 3)}


@dataclass(frozen=True)
class Neighbour:
    """A router with an up control channel to this one (``link``: our link it came over; None: it dialled us)."""

    router: str
    site: SiteInfo
    link: str | None


class _Hello(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)
    t: Literal["hello"]
    router: str = Field(min_length=1, max_length=253)
    site: SiteInfo


class _Ad(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)
    t: Literal["ad"]
    ad: Advert


_MESSAGE: TypeAdapter[_Hello | _Ad] = TypeAdapter(Annotated[_Hello | _Ad, Field(discriminator="t")])


class _Session:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: str | None) -> None:
        self.reader = reader
        self.writer = writer
        self.link = link
        peer = writer.get_extra_info("peername")
        self.peer_ip: str | None = peer[0] if isinstance(peer, tuple) and peer else None
        self.router: str | None = None
        self.site: SiteInfo | None = None
        self.closed = False

    async def send(self, message: Mapping[str, object]) -> None:
        if self.closed:
            return
        self.writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        await asyncio.wait_for(self.writer.drain(), NEIGHBOUR_TIMEOUT)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()


def link_ssl_context(endpoint: LinkEndpoint) -> ssl.SSLContext:
    """The link's TLS version (1.3 by default), its client certificate, the remote site's CA. The remote
    certificate is trusted by its CA alone (a dedicated per-site CA, as upstream); its names are not checked."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    version = ssl.TLSVersion.TLSv1_2 if endpoint.tls_version == "1.2" else ssl.TLSVersion.TLSv1_3
    ctx.minimum_version = ctx.maximum_version = version
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cafile=str(endpoint.ca_file))
    ctx.load_cert_chain(str(endpoint.cert_file))
    return ctx


def _reason(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError):
        return f"TLS: {error.reason or error}"[:300]
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, TimeoutError):
        return "no answer"
    if isinstance(error, asyncio.IncompleteReadError | ConnectionResetError | BrokenPipeError):
        return "closed by the remote router"
    if isinstance(error, OSError):
        return (error.strerror or str(error))[:300]
    return str(error)[:300] or type(error).__name__


class ControlPlane:
    """This router's side of the control channels: its links, its neighbours and the link-state database."""

    def __init__(self, router_id: str, site: SiteInfo, socket_path: Path,
                 on_change: Callable[[], None] = lambda: None) -> None:
        self.router_id = router_id
        self.site = site
        self.socket_path = socket_path
        self.on_change = on_change
        self.db = LinkStateDb()
        self.links: dict[str, LinkStatus] = {}
        self._endpoints: dict[str, LinkEndpoint] = {}
        self._dialers: dict[str, asyncio.Task[None]] = {}
        self._sessions: set[_Session] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._services: tuple[ServiceEntry, ...] = ()
        self._seq = time.time_ns() // 1000        # grows across restarts: a new incarnation's adverts are newer
        self._server: asyncio.AbstractServer | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._unconnected_since: dict[str, float] = {}
        self._advertise()

    # --- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self._server = await asyncio.start_unix_server(self._accept, path=str(self.socket_path), limit=MAX_MESSAGE)
        self.socket_path.chmod(0o600)
        self._ticker = asyncio.create_task(self._tick(), name="control-hello")

    async def stop(self, seconds: float = 1.0) -> None:
        """Close every channel and the socket; waits at most ``seconds`` for the channels' tasks to end."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        tasks = [*self._dialers.values(), *self._tasks]
        if self._ticker is not None:
            tasks.append(self._ticker)
        for t in tasks:
            t.cancel()
        for s in list(self._sessions):
            s.close()
        if self._server is not None:
            self._server.close()
        if tasks:
            done, late = await asyncio.wait(tasks, timeout=seconds)
            for t in done:
                if not t.cancelled():
                    t.exception()         # retrieved: a channel's failure is of no interest once stopped
            if late:
                log.warning("%d control channel task(s) did not end within %gs of the stop", len(late), seconds)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), max(0.0, deadline - loop.time()))
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    # --- inputs from the adaptor -------------------------------------------------------------------------------

    def set_links(self, endpoints: list[LinkEndpoint]) -> None:
        """The links to keep up (a changed endpoint is dialled anew; a removed link's channel is closed)."""
        wanted = {e.name: e for e in endpoints}
        for name in list(self._endpoints):
            if wanted.get(name) != self._endpoints[name]:
                self._drop_link(name)
        for name, endpoint in wanted.items():
            if name not in self._endpoints:
                self._endpoints[name] = endpoint
                self.links[name] = LinkStatus(name=name, cost=endpoint.cost)
                self._dialers[name] = asyncio.create_task(self._dial(endpoint), name=f"link-{name[:40]}")
        self._advertise()

    def set_services(self, services: tuple[ServiceEntry, ...]) -> None:
        """The routing keys this router has connectors and listeners for (advertised when changed)."""
        if services != self._services:
            self._services = services
            self._advertise()

    # --- what the adaptor reads --------------------------------------------------------------------------------

    def neighbours(self) -> list[Neighbour]:
        return sorted((Neighbour(s.router, s.site, s.link) for s in self._sessions
                       if s.router is not None and s.site is not None and not s.closed),
                      key=lambda n: (n.router, n.link or ""))

    # --- advertisements ----------------------------------------------------------------------------------------

    def _own_advert(self) -> Advert:
        links = []
        peers = set()
        for s in self._sessions:
            if s.router is None or s.closed:
                continue
            if s.link is not None and s.link in self._endpoints:
                links.append(AdvertLink(to=s.router, cost=self._endpoints[s.link].cost, name=s.link))
            elif s.link is None:
                peers.add(s.router)
        return Advert(router=self.router_id, site=self.site, seq=self._seq,
                      links=tuple(sorted(links, key=lambda x: x.name)), peers=tuple(sorted(peers)),
                      services=self._services)

    def _advertise(self) -> None:
        """A new own advertisement (when it differs), flooded to every channel."""
        current = self.db.adverts.get(self.router_id)
        candidate = self._own_advert()
        if current is not None and current.model_copy(update={"seq": candidate.seq}) == candidate:
            return
        self._seq += 1
        advert = candidate.model_copy(update={"seq": self._seq})
        self.db.offer(advert)
        self._flood(advert, None)
        self._changed()

    def _flood(self, advert: Advert, source: _Session | None) -> None:
        message: dict[str, object] = {"t": "ad", "ad": advert.model_dump(mode="json")}
        for s in list(self._sessions):
            if s is not source and s.router is not None:
                self._spawn(self._send(s, message))

    def _changed(self) -> None:
        self._purge()
        self.on_change()

    def _purge(self) -> bool:
        """Drop the advertisements of routers unconnected for ``PURGE_AFTER``; True when one was dropped."""
        now = time.monotonic()
        connected = connected_routers(self.db.adverts, self.router_id)
        dropped = False
        for r in list(self.db.adverts):
            if r in connected:
                self._unconnected_since.pop(r, None)
            elif now - self._unconnected_since.setdefault(r, now) > PURGE_AFTER:
                del self.db.adverts[r]
                self._unconnected_since.pop(r, None)
                dropped = True
        return dropped

    # --- channels ----------------------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, session: _Session, message: Mapping[str, object]) -> None:
        try:
            await session.send(message)
        except (OSError, TimeoutError, RuntimeError) as e:
            log.debug("control send failed: %s", e)
            session.close()

    def _hello(self) -> Mapping[str, object]:
        return {"t": "hello", "router": self.router_id, "site": self.site.model_dump(exclude_none=True)}

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._run_session(_Session(reader, writer, None))

    async def _run_session(self, session: _Session) -> str:
        """Serve one channel until it closes or goes silent; returns why it ended."""
        self._sessions.add(session)
        reason = "closed by the remote router"
        try:
            await session.send(self._hello())
            while True:
                line = await asyncio.wait_for(session.reader.readline(), NEIGHBOUR_TIMEOUT)
                if not line:
                    break
                self._handle(session, line)
        except TimeoutError:
            reason = f"no hello for {NEIGHBOUR_TIMEOUT:g} s"
        except (OSError, ssl.SSLError, ValueError, asyncio.LimitOverrunError) as e:
            reason = _reason(e)
        finally:
            session.close()
            self._sessions.discard(session)
            if session.router is not None:
                log.info("control channel with router %s ended: %s", truncate(session.router, 80), reason)
                self._advertise()
        return reason

    def _handle(self, session: _Session, line: bytes) -> None:
        try:
            message = _MESSAGE.validate_json(line)
        except ValidationError as e:
            if b'"t":"hello"' in line or b'"t":"ad"' in line:
                log.warning("control message refused: %s", truncate(str(e), 300))
            return      # a message of a later version: ignored
        if isinstance(message, _Hello):
            if message.router == self.router_id:
                log.warning("control channel refused: the remote router has this router's id %s",
                            truncate(message.router, 80))
                session.close()
                return
            first = session.router is None
            session.router, session.site = message.router, message.site
            if first:
                self._on_up(session)
        elif session.router is not None:
            advert = message.ad
            if advert.router != self.router_id and self.db.offer(advert):
                self._flood(advert, session)
                self._changed()

    def _on_up(self, session: _Session) -> None:
        if session.link is not None and session.link in self.links:
            status = self.links[session.link]
            status.up, status.reason, status.since = True, "", time.time()
            status.remote_router, status.remote_site = session.router, session.site
            status.address = session.peer_ip
            log.info("link %s up to router %s (site %s)", truncate(session.link, 80),
                     truncate(session.router or "", 80), truncate(session.site.name if session.site else "", 80))
        for advert in list(self.db.adverts.values()):
            self._spawn(self._send(session, {"t": "ad", "ad": advert.model_dump(mode="json")}))
        self._advertise()
        self.on_change()

    async def _dial(self, endpoint: LinkEndpoint) -> None:
        status = self.links[endpoint.name]
        while True:
            reason = ""
            try:
                ctx = link_ssl_context(endpoint)
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(endpoint.host, endpoint.port, ssl=ctx, server_hostname=CONTROL_SNI,
                                            limit=MAX_MESSAGE), NEIGHBOUR_TIMEOUT)
                reason = await self._run_session(_Session(reader, writer, endpoint.name))
            except asyncio.CancelledError:
                raise
            except (OSError, TimeoutError, ssl.SSLError, ValueError) as e:
                reason = _reason(e)
            was_up = status.up
            if was_up or status.reason != reason:
                status.up, status.reason, status.since = False, reason, time.time()
                log.warning("link %s to %s:%s down: %s", truncate(endpoint.name, 80), endpoint.host, endpoint.port,
                            reason)
                self.on_change()
            await asyncio.sleep(RETRY_INTERVAL)

    def _drop_link(self, name: str) -> None:
        task = self._dialers.pop(name, None)
        if task is not None:
            task.cancel()
        for s in list(self._sessions):
            if s.link == name:
                s.close()
        self._endpoints.pop(name, None)
        self.links.pop(name, None)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(HELLO_INTERVAL)
            hello = self._hello()
            for s in list(self._sessions):
                self._spawn(self._send(s, hello))
            if self._unconnected_since and self._purge():
                self.on_change()
