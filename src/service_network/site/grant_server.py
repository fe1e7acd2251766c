"""The HTTPS redemption server of the site controller, speaking upstream's protocol: ``POST /<grant uid>`` whose body
is the code and whose headers ``name`` and ``subject`` name the token and the redeeming Site answers with a YAML
stream of the client-certificate Secret and the Links (:func:`.grants.answer_documents`), or with an error status
and a line of text (upstream's statuses: 403 wrong code, 404 unknown, expired or used up, 405 not a POST). Ours
also: the header ``skupper-site-proof`` of a redemption (:mod:`.site_keys`), and ``POST /bindings/<fingerprint>``,
where a site proves its key to bind a credential of ``skupper link generate`` (:data:`Bind`).

Its certificate is issued at start by the grant-server CA, kept in the Secret ``skupper-grant-server-ca`` of the
controller's namespace (created when missing, so tokens issued before a restart stay valid); the certificate names
the host of the advertised URL. TLS 1.3 only, as upstream. Grants publish the CA in their status and tokens carry
it, so the redeeming site verifies this server with it.

The server faces anyone who can reach it, so every connection is bounded before it costs anything (``Limits``):
connections at once, in all and per source address, are counted when TCP accepts them (over the limit: closed at
once, before TLS); the TLS handshake and the whole request must arrive within ``request_seconds`` (10 s), else the
connection is closed; bodies are bounded (64 KiB); a source whose redemptions keep being refused (wrong code,
unknown grant) gets 429 with ``Retry-After`` for the rest of the window, without a lookup, while other sources
redeem. One request per connection (``Connection: close``). HTTP/1.1 is parsed by h11 (a maintained, I/O-free
parser: it lets this module own the socket, hence the limits above, which aiohttp's server cannot apply before
TLS). The redemption itself (grant lookup, checks, counting) is the ``redeem`` callable's; errors never echo more
than 200 characters of the input.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import os
import re
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import h11
from pydantic import ValidationError

from operator_runtime.api import KubeApi
from operator_runtime.errors import AlreadyExists, KubeError, NotFound
from operator_runtime.kinds import SECRET

from . import pki
from .access import endpoint_hosts
from .access_io import decode, tls_secret
from .grants import Redeemed, RedeemRequest, Refusal, answer_documents
from .site_keys import PROOF_HEADER

__all__ = ["GRANT_SERVER_CA_SECRET", "GrantServer", "Limits", "Redeem", "load_grant_ca", "server_context"]

log = logging.getLogger(__name__)

GRANT_SERVER_CA_SECRET = "skupper-grant-server-ca"
MAX_BODY = 64 * 1024

#: (grant uid, request) -> the credentials and endpoints to answer with, or a Refusal
Redeem = Callable[[str, RedeemRequest], Awaitable[Redeemed | Refusal]]
#: a binding request (``POST /bindings/<hex fingerprint>``, headers ``subject`` and the site proof): a credential
#: of ``skupper link generate`` bound to the proven site; the voucher (JSON text) or why not
Bind = Callable[[str, str, str, str], Awaitable[str | Refusal]]


async def load_grant_ca(api: KubeApi, namespace: str | None) -> pki.KeyPair:
    """The grant-server CA from its Secret in ``namespace`` (created when missing); in memory without a namespace
    or when the Secret cannot be read or written (then tokens do not survive a restart: logged)."""
    if namespace:
        try:
            try:
                secret = await api.get(SECRET, GRANT_SERVER_CA_SECRET, namespace)
            except NotFound:
                pair = pki.new_ca("skupper-grant-server-ca")
                try:
                    secret = await api.create(SECRET, tls_secret(GRANT_SERVER_CA_SECRET, namespace, pair, pair.cert,
                                                                 owners=[]), namespace)
                except AlreadyExists:
                    secret = await api.get(SECRET, GRANT_SERVER_CA_SECRET, namespace)
            pair = pki.KeyPair(decode(secret, "tls.crt"), decode(secret, "tls.key"))
            pki.load_pair(pair, "grant server CA")
            return pair
        except (KubeError, pki.CertificateError) as e:
            log.warning("grant server CA Secret %s/%s unusable (%s): using a CA kept in memory", namespace,
                        GRANT_SERVER_CA_SECRET, str(e)[:200])
    return pki.new_ca("skupper-grant-server-ca")


def server_context(ca: pki.KeyPair, host: str) -> ssl.SSLContext:
    """A TLS 1.3 server context with a certificate for ``host`` signed by ``ca``."""
    dns, ips = endpoint_hosts([host])
    pair = pki.issue(ca, host, dns=dns, ips=ips, server=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    with tempfile.TemporaryDirectory(prefix="sn-grant-") as directory:
        chain, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pair.key)
        chain.write_bytes(pair.cert + ca.cert)
        context.load_cert_chain(str(chain), str(key))
    return context


@dataclass(frozen=True)
class Limits:
    #: the TLS handshake and the complete request, from the TCP accept
    request_seconds: float = 10.0
    #: connections open at once, all sources together and from one source address
    connections: int = 256
    connections_per_source: int = 8
    #: refused redemptions (403, 404) one source may have in ``failure_window_seconds`` before it gets 429
    failures_per_source: int = 10
    failure_window_seconds: float = 60.0
    #: source addresses whose failures are remembered (the least recent are forgotten first)
    sources_tracked: int = 10_000


class Throttle:
    """Refused redemptions per source address in a sliding window; memory bounded by ``sources_tracked``."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self._failures: collections.OrderedDict[str, collections.deque[float]] = collections.OrderedDict()

    def retry_after(self, source: str) -> int | None:
        """Seconds until ``source`` may try again, or None when it may now."""
        failures = self._failures.get(source)
        if failures is None:
            return None
        now = self.clock()
        while failures and now - failures[0] >= self.limits.failure_window_seconds:
            failures.popleft()
        if len(failures) < self.limits.failures_per_source:
            return None
        return max(1, math.ceil(self.limits.failure_window_seconds - (now - failures[0])))

    def failed(self, source: str) -> None:
        failures = self._failures.pop(source, None)
        if failures is None:
            failures = collections.deque(maxlen=self.limits.failures_per_source)
        failures.append(self.clock())
        self._failures[source] = failures
        while len(self._failures) > self.limits.sources_tracked:
            self._failures.popitem(last=False)


@dataclass
class _Answer:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


_TEXT = ("content-type", "text/plain; charset=utf-8")


def _error(status: int, reason: str, message: str, *headers: tuple[str, str]) -> _Answer:
    """A refusal: upstream's status and a line of text (``reason`` is logged, not sent: upstream has no field)."""
    log.debug("grant server answers %d %s", status, reason)
    return _Answer(status, (message[:1000] + "\n").encode(), (_TEXT, *headers))


class _BadRequest(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass
class _Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


_UID = re.compile(r"/([A-Za-z0-9-]{1,64})")
_BINDING = re.compile(r"/bindings/([0-9a-f]{64})")


@dataclass
class _Bound:
    url: str
    ca_pem: str


class GrantServer:
    """Serves redemptions on ``host:port`` (port 0: any free port); ``url_base`` is what grants publish
    (default ``https://<host>:<port>``)."""

    def __init__(self, redeem: Redeem, ca: pki.KeyPair, host: str, port: int, url_base: str | None = None,
                 limits: Limits | None = None, bind: Bind | None = None) -> None:
        self.redeem = redeem
        self.bind = bind
        self.ca = ca
        self.host = host
        self.port = port
        self.url_base = url_base
        self.limits = limits or Limits()
        self.throttle = Throttle(self.limits)
        self._server: asyncio.Server | None = None
        self._context: ssl.SSLContext | None = None
        self._open = 0
        self._per_source: collections.Counter[str] = collections.Counter()
        self._tasks: set[asyncio.Task[None]] = set()
        self.bound: _Bound | None = None

    @property
    def ca_pem(self) -> str:
        return self.ca.cert.decode()

    def url(self, grant_uid: str) -> str | None:
        return f"{self.bound.url}/{grant_uid}" if self.bound is not None else None

    async def start(self) -> str:
        from urllib.parse import urlsplit

        advertised = urlsplit(self.url_base).hostname if self.url_base else None
        self._context = server_context(self.ca, advertised or self.host)
        self._server = await asyncio.start_server(self._accept, self.host, self.port, limit=MAX_BODY)
        port = int(self._server.sockets[0].getsockname()[1]) if self._server.sockets else self.port
        base = (self.url_base or f"https://{self.host}:{port}").rstrip("/")
        self.bound = _Bound(base, self.ca_pem)
        log.info("grant server on %s:%d (grants publish %s/<uid>)", self.host, port, base)
        return base

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    @property
    def connections(self) -> int:
        """Connections open now (accepted and not yet closed)."""
        return self._open

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if self._open >= self.limits.connections or \
                self._per_source[source] >= self.limits.connections_per_source:
            log.debug("grant server: connection from %s refused (too many open)", source)
            writer.transport.abort()
            return
        self._open += 1
        self._per_source[source] += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve(source, reader, writer)
        except (TimeoutError, ssl.SSLError, ConnectionError, OSError, h11.ProtocolError):
            writer.transport.abort()
        finally:
            if task is not None:
                self._tasks.discard(task)
            self._open -= 1
            self._per_source[source] -= 1
            if self._per_source[source] <= 0:
                del self._per_source[source]
            if not writer.transport.is_closing():
                writer.transport.abort()

    async def _serve(self, source: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._context is not None
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=16 * 1024)
        async with asyncio.timeout(self.limits.request_seconds):
            await writer.start_tls(self._context)
            try:
                request: _Request | None = await _read_request(conn, reader)
            except _BadRequest as e:
                request, answer = None, _error(e.status, e.reason, str(e))
            except h11.RemoteProtocolError as e:
                request, answer = None, _error(400, "BadRequest", f"not an HTTP/1.1 request: {str(e)[:200]}")
        if request is not None:
            answer = await self._answer(source, request)
        async with asyncio.timeout(self.limits.request_seconds):
            headers = [("content-length", str(len(answer.body))), ("connection", "close"), *answer.headers]
            if conn.our_state is h11.SEND_RESPONSE:
                writer.write(conn.send(h11.Response(status_code=answer.status, headers=headers)) or b"")
                writer.write(conn.send(h11.Data(data=answer.body)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
            else:   # the request could not even be framed: answer with raw bytes
                writer.write(_raw_response(answer, headers))
            await writer.drain()
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
                await writer.wait_closed()

    async def _bind(self, source: str, fingerprint: str, request: _Request) -> _Answer:
        """A binding request (:data:`Bind`): the site proof made for this URL."""
        assert self.bind is not None
        url = f"{self.bound.url}/bindings/{fingerprint}" if self.bound is not None else ""
        return await _bind_answer(self.bind, self.throttle, url, source, fingerprint, request)

    async def _answer(self, source: str, request: _Request) -> _Answer:
        if request.method != "POST":
            return _error(405, "MethodNotAllowed", "Only POST is supported", ("allow", "POST"))
        match = _UID.fullmatch(request.target)
        binding = _BINDING.fullmatch(request.target)
        if match is None and (binding is None or self.bind is None):
            return _error(404, "NotFound", "no AccessGrant for this URL")
        retry = self.throttle.retry_after(source)
        if retry is not None:
            return _error(429, "TooManyRequests", f"too many refused redemptions from {source[:64]}; try again "
                          f"in {retry} s", ("retry-after", str(retry)))
        if binding is not None and self.bind is not None:
            return await self._bind(source, binding.group(1), request)
        assert match is not None
        try:
            fields: dict[str, str] = {k: request.headers[k] for k in ("name", "subject") if k in request.headers}
            if PROOF_HEADER in request.headers:
                fields["proof"] = request.headers[PROOF_HEADER]
            body = RedeemRequest.model_validate({"code": request.body.decode(), **fields})
        except UnicodeDecodeError:
            return _error(400, "BadRequest", "invalid redemption request: the code is not UTF-8 text")
        except ValidationError as e:
            first = e.errors(include_input=False)[0]
            where = {"code": "the body (the code)", "name": "header name", "subject": "header subject",
                     "proof": f"header {PROOF_HEADER}"}.get(
                str(first["loc"][0]) if first["loc"] else "", "the request")
            return _error(400, "BadRequest", f"invalid redemption request: {where}: {first['msg']}"[:300])
        uid = match.group(1)
        try:
            answer = await self.redeem(uid, body)
        except Exception:   # a bug must not leave the client waiting: logged, and the client told
            log.exception("redemption of grant %s failed", uid[:64])
            return _error(500, "InternalError", "the redemption failed; see the site controller's log")
        if isinstance(answer, Refusal):
            if answer.http_status in (403, 404):
                self.throttle.failed(source)
            return _error(answer.http_status, answer.reason, answer.message)
        return _Answer(200, answer_documents(body.name, answer).encode(), (_TEXT,))


async def _bind_answer(bind: Bind, throttle: Throttle, url: str, source: str, fingerprint: str,
                       request: _Request) -> _Answer:
    subject, proof = request.headers.get("subject", ""), request.headers.get(PROOF_HEADER, "")
    if not subject or not proof or len(subject) > 253:
        throttle.failed(source)
        return _error(400, "BadRequest", f"a binding request needs the headers subject and {PROOF_HEADER}")
    try:
        outcome = await bind(fingerprint, subject, proof, url)
    except Exception:
        log.exception("binding of credential %s failed", fingerprint[:16])
        return _error(500, "InternalError", "the binding failed; see the site controller's log")
    if isinstance(outcome, Refusal):
        if outcome.http_status < 500:     # every refused binding counts: a proof costs a signature check
            throttle.failed(source)
        return _error(outcome.http_status, outcome.reason, outcome.message)
    return _Answer(200, outcome.encode(), (_TEXT,))


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> _Request:
    """One whole request: its head (at most 16 KiB) and a body of at most ``MAX_BODY`` bytes."""
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(16 * 1024))
        elif isinstance(event, h11.Request):
            request = event
            length = dict(event.headers).get(b"content-length")
            if length is not None and int(length) > MAX_BODY:
                raise _BadRequest(413, "TooLarge", f"the request is larger than {MAX_BODY} bytes")
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                raise _BadRequest(413, "TooLarge", f"the request is larger than {MAX_BODY} bytes")
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
            return _Request(request.method.decode(), request.target.decode(errors="replace"), headers, bytes(body))
        elif isinstance(event, h11.ConnectionClosed):
            raise ConnectionError("closed before a complete request")
        else:
            raise ConnectionError(f"unexpected {type(event).__name__}")


_REASONS = {400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Content Too Large",
            429: "Too Many Requests"}


def _raw_response(answer: _Answer, headers: list[tuple[str, str]]) -> bytes:
    head = f"HTTP/1.1 {answer.status} {_REASONS.get(answer.status, 'Error')}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode() + answer.body
