"""The command line's connection to the API server: a kubeconfig read as kubectl reads it, and requests over one
kept-alive HTTP connection, with the standard library and PyYAML only.

Why not the operators' client (:mod:`operator_runtime.transport`): it is built on aiohttp and lightkube, whose
imports alone take longer than a whole ``skupper site status`` may (docs/skupper-cli.md, "Speed"). A command makes
a handful of sequential requests, so one blocking connection is all it needs; the answers go through the same
:class:`operator_runtime.api.KubeApi` (the same errors, the same paths) as the operators'.

What a kubeconfig may hold, as kubectl: ``--kubeconfig``, else the first existing file of ``$KUBECONFIG``, else
``~/.kube/config``, else the in-cluster service account; the current context or ``--context``; TLS from
``certificate-authority`` (file, relative to the kubeconfig) or ``-data``, ``insecure-skip-tls-verify``,
``tls-server-name``, client certificates from files or ``-data``; a bearer ``token`` or ``tokenFile``, an ``exec``
credential plugin, or basic auth.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import socket
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from typing import Any

from operator_runtime.errors import ApiUnreachable

from . import blockyaml

__all__ = ["BlockingTransport", "Endpoint", "KubeconfigError", "load"]

#: as :data:`operator_runtime.config.SERVICE_ACCOUNT_DIR_ENV` (kubesim's Pods are host processes)
SERVICE_ACCOUNT_DIR_ENV = "KUBERNETES_SERVICE_ACCOUNT_DIR"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
NO_CONFIGURATION = ("invalid configuration: no configuration has been provided, try setting KUBERNETES_MASTER "
                    "environment variable")
DEFAULT_TIMEOUT = 10.0
MAX_LINE = 64 * 1024


class KubeconfigError(Exception):
    """The kubeconfig cannot be used (kubectl's words where it has them)."""


class Credentials:
    """The ``Authorization`` header of a kubeconfig user; ``refresh()`` after a 401 says whether to retry."""

    def __init__(self, header: str | None = None, token_file: str | None = None,
                 plugin: Mapping[str, Any] | None = None) -> None:
        self._header = header
        self._token_file = token_file
        self._plugin = plugin

    def header(self) -> str | None:
        if self._header is None and self._token_file is not None:
            try:
                self._header = "Bearer " + _text(self._token_file).strip()
            except OSError as e:
                raise KubeconfigError(f"cannot read the token file {self._token_file}: {e.strerror or e}") from None
        if self._header is None and self._plugin is not None:
            self._header = "Bearer " + _run_plugin(self._plugin)
        return self._header

    def refresh(self) -> bool:
        if self._token_file is None and self._plugin is None:
            return False
        self._header = None
        return True


def _run_plugin(spec: Mapping[str, Any]) -> str:
    import subprocess

    from operator_runtime.execcredential import API_VERSIONS, plugin_environment, read_answer
    version = str(spec.get("apiVersion") or "")
    command = str(spec.get("command") or "")
    if version not in API_VERSIONS:
        raise KubeconfigError(f"exec plugin: invalid apiVersion {version!r}")
    env = plugin_environment(version, ((str(e.get("name")), str(e.get("value")))
                                       for e in spec.get("env") or [] if isinstance(e, dict)))
    try:
        done = subprocess.run([command, *[str(a) for a in spec.get("args") or []]], env=env, capture_output=True,
                              stdin=subprocess.DEVNULL, check=False)
    except OSError as e:
        raise KubeconfigError(f"exec plugin {command!r} could not run: {e}") from None
    if done.returncode != 0:
        raise KubeconfigError(f"exec plugin {command!r} exited with {done.returncode}: "
                              f"{done.stderr.decode(errors='replace')[:500]}")
    try:
        return read_answer(done.stdout)[0]
    except ValueError:
        raise KubeconfigError(f"exec plugin {command!r} returned no status.token") from None


class Endpoint:
    """Where and how to reach the API server, and the namespace of the context."""

    def __init__(self, server: str, namespace: str, credentials: Credentials, tls: ssl.SSLContext | None = None,
                 server_name: str | None = None) -> None:
        self.server = server
        self.namespace = namespace
        self.credentials = credentials
        self.tls = tls
        self.server_name = server_name


def _text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _local(name: str, base: str) -> str:
    """A path of the kubeconfig: ``~`` expanded, relative to the kubeconfig's directory (``base``)."""
    path = os.path.expanduser(name)
    return path if os.path.isabs(path) else os.path.join(base, path)


def _read_yaml(path: str) -> dict[str, Any]:
    try:
        text = _text(path)
    except FileNotFoundError:
        raise KubeconfigError(f"stat {path}: no such file or directory") from None
    except (OSError, UnicodeDecodeError) as e:
        raise KubeconfigError(f"open {path}: {str(getattr(e, 'strerror', None) or e).lower()}") from None
    loaded = blockyaml.read(text)           # the usual kubeconfig, without PyYAML's import
    if loaded is None:
        import yaml
        try:
            loaded = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as e:
            raise KubeconfigError(f"error loading config file \"{path}\": {e}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise KubeconfigError(f"error loading config file \"{path}\": not a kubeconfig")
    return loaded


def _named(config: Mapping[str, Any], section: str, name: str) -> dict[str, Any] | None:
    key = section[:-1]           # clusters -> cluster
    for entry in config.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(key)
            return dict(value) if isinstance(value, dict) else {}
    return None


def _decode(data: str, what: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except ValueError:
        raise KubeconfigError(f"{what} is not valid base64") from None


def _tls(cluster: Mapping[str, Any], user: Mapping[str, Any], base: str) -> ssl.SSLContext:
    def local(name: str) -> str:
        return _local(name, base)

    if cluster.get("insecure-skip-tls-verify"):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):        # that CA only, as kubectl (no system trust store)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(
            cadata=_decode(str(cluster["certificate-authority-data"]), "certificate-authority-data").decode())
    elif cluster.get("certificate-authority"):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cafile=local(str(cluster["certificate-authority"])))
    else:
        context = ssl.create_default_context()
    cert_data, key_data = user.get("client-certificate-data"), user.get("client-key-data")
    if cert_data or key_data:
        import tempfile
        if not (cert_data and key_data):
            raise KubeconfigError("client-certificate-data and client-key-data must be given together")
        with tempfile.TemporaryDirectory(prefix="skupper-cert-") as directory:   # ssl reads files only
            cert, key = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
            for path, data, what in ((cert, cert_data, "client-certificate-data"),
                                     (key, key_data, "client-key-data")):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(_decode(str(data), what))
            context.load_cert_chain(cert, key)
    elif user.get("client-certificate") or user.get("client-key"):
        context.load_cert_chain(local(str(user.get("client-certificate") or "")),
                                local(str(user.get("client-key") or "")))
    return context


def _credentials(user: Mapping[str, Any], base: str) -> Credentials:
    if user.get("tokenFile"):
        return Credentials(token_file=_local(str(user["tokenFile"]), base))
    if user.get("token"):
        return Credentials(header=f"Bearer {str(user['token']).strip()}")
    if isinstance(user.get("exec"), dict):
        return Credentials(plugin=user["exec"])
    if user.get("username") and user.get("password"):
        basic = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
        return Credentials(header=f"Basic {basic}")
    if user.get("auth-provider"):
        raise KubeconfigError("kubeconfig auth-provider entries are not supported; use an exec credential plugin")
    return Credentials()


def _from_file(path: str, context_name: str | None) -> Endpoint:
    config = _read_yaml(path)
    name = context_name or str(config.get("current-context") or "")
    if not name:
        raise KubeconfigError(NO_CONFIGURATION)
    context = _named(config, "contexts", name)
    if context is None:
        raise KubeconfigError(f'context "{name}" does not exist')
    cluster_name = str(context.get("cluster") or "")
    cluster = _named(config, "clusters", cluster_name)
    if cluster is None:
        raise KubeconfigError(f'invalid configuration: cluster "{cluster_name}" not found')
    user = _named(config, "users", str(context.get("user") or "")) or {}
    server = str(cluster.get("server") or "")
    if not server:
        raise KubeconfigError(NO_CONFIGURATION)
    base = os.path.dirname(path)
    tls = _tls(cluster, user, base) if server.startswith("https:") else None
    return Endpoint(server=server.rstrip("/"), namespace=str(context.get("namespace") or "default"),
                    credentials=_credentials(user, base), tls=tls,
                    server_name=str(cluster.get("tls-server-name") or "") or None)


def _in_cluster() -> Endpoint | None:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    directory = os.environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR
    if not host or not port or not os.path.isfile(os.path.join(directory, "token")):
        return None
    namespace = ""
    with contextlib.suppress(OSError):
        namespace = _text(os.path.join(directory, "namespace")).strip()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=os.path.join(directory, "ca.crt"))
    shown = f"[{host}]" if ":" in host else host
    return Endpoint(server=f"https://{shown}:{port}", namespace=namespace or "default",
                    credentials=Credentials(token_file=os.path.join(directory, "token")), tls=context)


def load(kubeconfig: str | None, context: str | None) -> Endpoint:
    """The API server of ``--kubeconfig``/``--context`` (kubectl's search when not given)."""
    if kubeconfig:
        return _from_file(os.path.expanduser(kubeconfig), context)
    listed = os.environ.get("KUBECONFIG")
    if listed:
        for candidate in listed.split(os.pathsep):
            if candidate and os.path.isfile(os.path.expanduser(candidate)):
                return _from_file(os.path.expanduser(candidate), context)
    default = os.path.expanduser("~/.kube/config")
    if os.path.isfile(default):
        return _from_file(default, context)
    if context is None and (found := _in_cluster()) is not None:
        return found
    if context is not None:
        raise KubeconfigError(f'context "{context}" does not exist')
    raise KubeconfigError(NO_CONFIGURATION)


#: Go's words for the errors of a connection that could not be made
_GO_DIAL_ERRORS = {errno.ECONNREFUSED: "connect: connection refused", errno.EHOSTUNREACH: "connect: no route to host",
                   errno.ENETUNREACH: "connect: network is unreachable"}


class DialError(OSError):
    """A connection to the API server that could not be made; its text is Go's (``dial tcp 127.0.0.1:6443:
    connect: connection refused``) where Go's words are known (``go_reason``)."""

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        self.go_reason = "i/o timeout" if isinstance(cause, TimeoutError) else _GO_DIAL_ERRORS.get(cause.errno or 0)
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        super().__init__(cause.errno, f"dial tcp {shown}: {self.go_reason}" if self.go_reason else str(cause))

    def __str__(self) -> str:
        return str(self.strerror)


class _Connection:
    """One HTTP/1.1 connection (TLS when ``tls``): a request, then its whole answer (``Content-Length``, chunked,
    or up to the end of the connection)."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None, server_name: str | None,
                 timeout: float) -> None:
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise DialError(host, port, e) from e
        try:
            self._socket = tls.wrap_socket(raw, server_hostname=server_name or host) if tls is not None else raw
        except BaseException:
            raw.close()
            raise
        self._reader = self._socket.makefile("rb")
        self.reused = False
        self.open = True

    def exchange(self, head: bytes, body: bytes | None) -> tuple[int, bytes]:
        self._socket.sendall(head + (body or b""))
        status_line = self._reader.readline(MAX_LINE)
        if not status_line:
            raise ConnectionResetError("the server closed the connection")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP answer: {status_line[:80]!r}")
        headers: dict[str, str] = {}
        while (line := self._reader.readline(MAX_LINE)) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            answer = self._chunked()
        elif "content-length" in headers:
            answer = self._exactly(int(headers["content-length"]))
        else:
            answer = self._reader.read()
            self.open = False
        if headers.get("connection", "").lower() == "close":
            self.open = False
        self.reused = True
        return int(parts[1]), answer

    def _exactly(self, size: int) -> bytes:
        data = self._reader.read(size)
        if len(data) != size:
            raise ConnectionResetError("the answer ended early")
        return data

    def _chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size = int(self._reader.readline(MAX_LINE).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self._reader.readline(MAX_LINE) not in (b"\r\n", b"\n", b""):
                    pass                                # trailers
                return b"".join(chunks)
            chunks.append(self._exactly(size))
            self._reader.readline(MAX_LINE)

    def close(self) -> None:
        self.open = False
        self._reader.close()
        self._socket.close()


class BlockingTransport:
    """Requests to one API server over one kept-alive connection (what :class:`operator_runtime.api.KubeApi`
    needs of a transport, without watches: a command does not watch). Its coroutines never suspend: the requests
    block, as a command's requests are made one after the other."""

    def __init__(self, endpoint: Endpoint, timeout: float = DEFAULT_TIMEOUT) -> None:
        parsed = urllib.parse.urlsplit(endpoint.server)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise KubeconfigError(f"API server URL {endpoint.server!r} is not an http(s) URL")
        self.server = endpoint.server
        self._endpoint = endpoint
        self._host = parsed.hostname
        self._port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self._authority = parsed.netloc.rpartition("@")[2]
        self._https = parsed.scheme == "https"
        self._prefix = parsed.path.rstrip("/")
        self._timeout = timeout
        self._connection: _Connection | None = None

    def _exchange(self, method: str, target: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._authority}",
                 *(f"{k}: {v}" for k, v in headers.items()), f"Content-Length: {len(body or b'')}", "", ""]
        head = "\r\n".join(lines).encode("latin-1")
        for attempt in (1, 2):
            connection = self._connection
            try:
                if connection is None or not connection.open:
                    tls = (self._endpoint.tls or ssl.create_default_context()) if self._https else None
                    connection = self._connection = _Connection(self._host, self._port, tls,
                                                                self._endpoint.server_name, self._timeout)
                return connection.exchange(head, body)
            except (OSError, ValueError) as e:
                reused = connection is not None and connection.reused
                if connection is not None:
                    connection.close()
                self._connection = None
                if attempt == 1 and reused and isinstance(e, ConnectionError):
                    continue              # a kept-alive connection the server closed meanwhile
                if isinstance(e, DialError) and e.go_reason:           # as client-go says it
                    raise ApiUnreachable(f'{method.title()} "{self.server}{target}": {e}') from e
                raise ApiUnreachable(f"{method} {self.server}{target}: {e or type(e).__name__}") from e
        raise AssertionError("unreachable")  # pragma: no cover

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: bytes | None = None, content_type: str | None = None) -> tuple[int, bytes]:
        target = self._prefix + path + ("?" + urllib.parse.urlencode(params) if params else "")
        for attempt in (1, 2):
            headers = {"Accept": "application/json", "User-Agent": "skupper (service-network)"}
            if body is not None:
                headers["Content-Type"] = content_type or "application/json"
            try:
                authorization = self._endpoint.credentials.header()
            except KubeconfigError as e:
                raise ApiUnreachable(str(e)) from None
            if authorization:
                headers["Authorization"] = authorization
            status, answer = self._exchange(method, target, body, headers)
            if status == 401 and attempt == 1 and self._endpoint.credentials.refresh():
                continue
            return status, answer
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def stream(self, path: str, *, params: Mapping[str, str] | None = None,
                     read_timeout: float) -> AsyncIterator[Any]:
        raise ApiUnreachable("the command line does not watch")
        yield  # pragma: no cover

    async def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
