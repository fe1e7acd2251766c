"""HTTP to the API server: one pooled aiohttp session, TLS and credentials from a kubeconfig or in-cluster config.

Why our own: the operator speaks plain JSON (the caches compare dicts) and needs watch bookmarks and a few headers,
nothing a typed client adds; a typed client's HTTP stack was the largest per-request cost we measured. aiohttp (a
runtime dependency already, for the health server) keeps connections alive in one pool. Configuration parsing stays
with lightkube's public ``KubeConfig``/``SingleConfig`` (see :mod:`.config`); this module turns one ``SingleConfig``
into a connection:

- TLS: ``certificate-authority`` (file) or ``certificate-authority-data``, else the system trust store;
  ``insecure-skip-tls-verify``; client certificates from files or ``-data`` fields;
- credentials: a bearer ``tokenFile`` (re-read every minute and after a 401, since kubelet rotates projected
  service-account tokens), a static ``token``, an ``exec`` credential plugin (``client.authentication.k8s.io``
  ``v1``/``v1beta1``/``v1alpha1``; its token is kept until it expires or is refused), or basic auth.

Every failure to get an answer becomes :class:`~operator_runtime.errors.ApiUnreachable`; answers, whatever their
status, are returned for the caller to interpret.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Protocol

import aiohttp
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import Cluster, User, UserExec
from lightkube.core.exceptions import ConfigError
from yarl import URL

from .errors import ApiUnreachable
from .execcredential import API_VERSIONS, plugin_environment, read_answer

__all__ = [
    "DEFAULT_TIMEOUT",
    "Credentials",
    "HttpTransport",
    "StreamResponse",
    "credentials_for",
    "ssl_context_for",
]

#: Seconds to connect, and at most between two reads of an answer (a watch sets its own read limit).
DEFAULT_TIMEOUT = 10.0
#: How often a token file is read again even without a 401 (client-go does the same every minute).
TOKEN_FILE_REREAD_SECONDS = 60.0
#: An exec credential is renewed this long before it expires.
EXEC_EXPIRY_MARGIN_SECONDS = 30.0
#: At most this many connections to the API server at once (watches hold one each).
MAX_CONNECTIONS = 256

_TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError, ValueError)


class Credentials(Protocol):
    """The ``Authorization`` header to send; ``refresh()`` after a 401 says whether a retry may help."""

    async def header(self) -> str | None: ...

    def refresh(self) -> bool: ...


class _NoCredentials:
    async def header(self) -> str | None:
        return None

    def refresh(self) -> bool:
        return False


class _StaticCredentials:
    def __init__(self, header: str) -> None:
        self._header = header

    async def header(self) -> str | None:
        return self._header

    def refresh(self) -> bool:
        return False


class _TokenFileCredentials:
    """A bearer token read from a file, again every :data:`TOKEN_FILE_REREAD_SECONDS` and after a 401."""

    def __init__(self, path: str | os.PathLike[str], clock: Callable[[], float] = time.monotonic) -> None:
        self._path = Path(path)
        self._clock = clock
        self._header: str | None = None
        self._read_at = 0.0

    async def header(self) -> str | None:
        if self._header is None or self._clock() - self._read_at >= TOKEN_FILE_REREAD_SECONDS:
            try:
                token = self._path.read_text(encoding="utf-8").strip()
            except OSError as error:
                raise ConfigError(f"cannot read the token file {self._path}: {error.strerror or error}") from None
            self._header, self._read_at = f"Bearer {token}", self._clock()
        return self._header

    def refresh(self) -> bool:
        self._header = None
        return True


class _ExecCredentials:
    """A kubeconfig ``exec`` plugin: run it for a token, keep the token until it expires or is refused."""

    def __init__(self, spec: UserExec) -> None:
        if spec.apiVersion not in API_VERSIONS:
            raise ConfigError(f"exec credential plugin apiVersion {spec.apiVersion!r} is not supported "
                              f"(expected one of {', '.join(API_VERSIONS)})")
        self._spec = spec
        self._header: str | None = None
        self._expires: float | None = None
        self._lock = asyncio.Lock()

    async def header(self) -> str | None:
        async with self._lock:  # concurrent requests share one run of the plugin
            if self._header is None or (self._expires is not None and time.time() >= self._expires):
                self._header, self._expires = await self._run()
            return self._header

    def refresh(self) -> bool:
        self._header = None
        return True

    async def _run(self) -> tuple[str, float | None]:
        env = plugin_environment(str(self._spec.apiVersion), ((item.name, item.value) for item in self._spec.env or []))
        try:
            process = await asyncio.create_subprocess_exec(
                self._spec.command, *(self._spec.args or []), env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            stdout, stderr = await process.communicate()
        except OSError as error:
            raise ConfigError(f"exec credential plugin {self._spec.command!r} could not run: {error}") from None
        if process.returncode != 0:
            raise ConfigError(f"exec credential plugin {self._spec.command!r} exited with {process.returncode}: "
                              f"{stderr.decode(errors='replace')[:500]}")
        try:
            token, expiry = read_answer(stdout)
        except ValueError:
            raise ConfigError(f"exec credential plugin {self._spec.command!r} returned no status.token") from None
        if expiry is not None:
            expiry -= EXEC_EXPIRY_MARGIN_SECONDS
        return f"Bearer {token}", expiry


def credentials_for(user: User | None) -> Credentials:
    """The credentials of a kubeconfig user (a token file wins over a token, as client-go does)."""
    if user is None:
        return _NoCredentials()
    if user.token_file:
        return _TokenFileCredentials(user.token_file)
    if user.token:
        return _StaticCredentials(f"Bearer {user.token.strip()}")
    if user.exec is not None:
        return _ExecCredentials(user.exec)
    if user.username and user.password:
        basic = base64.b64encode(f"{user.username}:{user.password}".encode()).decode()
        return _StaticCredentials(f"Basic {basic}")
    if user.auth_provider:
        raise ConfigError("kubeconfig auth-provider entries are not supported; use an exec credential plugin")
    return _NoCredentials()


def ssl_context_for(cluster: Cluster, user: User | None,
                    abs_file: Callable[[str], str | os.PathLike[str]]) -> ssl.SSLContext:
    """Server verification and client certificate of a kubeconfig cluster and user."""
    if cluster.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif cluster.certificate_auth:
        context = ssl.create_default_context(cafile=os.fspath(abs_file(cluster.certificate_auth)))
    elif cluster.certificate_auth_data:
        context = ssl.create_default_context(cadata=_decode(cluster.certificate_auth_data, "certificate-authority-data"))
    else:
        context = ssl.create_default_context()
    if user is not None and (user.client_cert or user.client_cert_data):
        _load_client_certificate(context, user, abs_file)
    return context


def _decode(data: str, field: str) -> str:
    try:
        return base64.b64decode(data, validate=True).decode()
    except ValueError:
        raise ConfigError(f"kubeconfig {field} is not valid base64") from None


def _load_client_certificate(context: ssl.SSLContext, user: User,
                             abs_file: Callable[[str], str | os.PathLike[str]]) -> None:
    if user.client_cert_data or user.client_key_data:
        if not (user.client_cert_data and user.client_key_data):
            raise ConfigError("kubeconfig user needs both client-certificate-data and client-key-data")
        # ssl loads certificates from files only: a private temporary directory, removed right after loading.
        with tempfile.TemporaryDirectory(prefix="kube-cert-") as directory:
            cert, key = Path(directory, "cert.pem"), Path(directory, "key.pem")
            for path, data, field in ((cert, user.client_cert_data, "client-certificate-data"),
                                      (key, user.client_key_data, "client-key-data")):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as handle:
                    handle.write(_decode(data, field))
            context.load_cert_chain(cert, key)
        return
    if not (user.client_cert and user.client_key):
        raise ConfigError("kubeconfig user needs both client-certificate and client-key")
    context.load_cert_chain(abs_file(user.client_cert), abs_file(user.client_key))


class StreamResponse:
    """An answer read as it arrives (a watch): ``status``, then :meth:`read` (error bodies) or :meth:`lines`."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except _TRANSPORT_ERRORS as error:
            raise ApiUnreachable(f"reading the answer failed: {_describe(error)}") from error

    async def lines(self) -> AsyncIterator[bytes]:
        """Each non-empty line; objects can be larger than aiohttp's line limit, so lines are split here."""
        pending = b""
        try:
            async for chunk in self._response.content.iter_any():
                pending += chunk
                if b"\n" not in chunk:
                    continue
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    if line.strip():
                        yield line
        except _TRANSPORT_ERRORS as error:
            raise ApiUnreachable(f"the stream broke: {_describe(error)}") from error
        if pending.strip():
            yield pending


def _describe(error: BaseException) -> str:
    return str(error) or type(error).__name__


class HttpTransport:
    """Requests to one API server through one pooled session (created on first use, inside the event loop)."""

    def __init__(self, server: str, *, ssl_context: ssl.SSLContext | None = None,
                 credentials: Credentials | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        url = URL(server)
        if url.scheme not in ("http", "https") or not url.host:
            raise ConfigError(f"API server URL {server!r} is not an http(s) URL")
        self.server = server.rstrip("/")
        self._ssl = ssl_context if url.scheme == "https" else None
        self._credentials = credentials or _NoCredentials()
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
        self._connect_timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_config(cls, config: SingleConfig, *, timeout: float = DEFAULT_TIMEOUT) -> HttpTransport:
        server = config.cluster.server
        context = (ssl_context_for(config.cluster, config.user, config.abs_file)
                   if server.startswith("https:") else None)
        return cls(server, ssl_context=context, credentials=credentials_for(config.user), timeout=timeout)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, ssl=self._ssl if self._ssl is not None else True)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    def _url(self, path: str) -> URL:
        return URL(self.server + path, encoded=True)

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        authorization = await self._credentials.header()
        if authorization:
            headers["Authorization"] = authorization
        return headers

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: bytes | None = None, content_type: str | None = None) -> tuple[int, bytes]:
        """Send one request; the status and the whole body of the answer."""
        url = self._url(path)
        for attempt in (1, 2):
            headers = await self._headers(content_type if body is not None else None)
            try:
                async with self._client().request(method, url, params=params, data=body,
                                                  headers=headers) as response:
                    content = await response.read()
            except _TRANSPORT_ERRORS as error:
                raise ApiUnreachable(f"{method} {self.server}{path}: {_describe(error)}") from error
            if response.status == 401 and attempt == 1 and self._credentials.refresh():
                continue  # rotated token or expired exec credential: once more with fresh ones
            return response.status, content
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def stream(self, path: str, *, params: Mapping[str, str] | None = None,
                     read_timeout: float) -> AsyncIterator[StreamResponse]:
        """A GET whose answer is read as it arrives; a read silent for ``read_timeout`` seconds fails."""
        timeout = aiohttp.ClientTimeout(total=None, connect=self._connect_timeout, sock_read=read_timeout)
        url = self._url(path)
        for attempt in (1, 2):
            headers = await self._headers(None)
            try:
                response = await self._client().get(url, params=params, headers=headers, timeout=timeout)
            except _TRANSPORT_ERRORS as error:
                raise ApiUnreachable(f"GET {self.server}{path}: {_describe(error)}") from error
            if response.status == 401 and attempt == 1 and self._credentials.refresh():
                response.release()
                continue
            try:
                yield StreamResponse(response)
            finally:
                if response.content.at_eof():
                    response.release()
                else:
                    response.close()  # an unfinished stream cannot be reused: drop its connection
            return

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
