"""A container engine's Docker-compatible HTTP API over its Unix socket (I/O): Podman's API service and Docker's
daemon answer the same requests, which is how upstream's container sites talk to either.

Standard library only (``http.client`` on a Unix socket): the calls are few, small and local, and the site's checks
that use them (is the router running?) are synchronous. Errors are named types: ``EngineUnavailable`` (nothing
answers on the socket: its message names the socket and how to start the engine's API), ``EngineError`` (the engine
refused a request: its status and message), ``NotFound`` (the container or image does not exist)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

__all__ = ["API", "Container", "Engine", "EngineError", "EngineUnavailable", "NotFound", "default_endpoint"]

API = "/v1.41"                    # the Docker API version Podman 4's compatible service and Docker 20.10+ serve
TIMEOUT_SECONDS = 30.0            # one request (a stop waits for the container's own stop timeout besides)
MAX_BODY = 16 * 1024 * 1024
#: what to run when the socket is not there, by platform
HOW_TO_START = {
    "podman": "is podman's API service running? systemctl --user enable --now podman.socket (as root: systemctl "
              "enable --now podman.socket), or podman system service --time=0 unix://{path} &",
    "docker": "is the Docker daemon running? systemctl enable --now docker",
}


class EngineUnavailable(Exception):
    """Nothing answers on the engine's socket (the message names it and says how to start the engine's API)."""


class EngineError(Exception):
    """The engine refused a request."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status})")
        self.status = status
        self.message = message


class NotFound(EngineError):
    """The container or image named does not exist."""


def runtime_dir(uid: int) -> str:
    """Upstream's runtime directory: ``/run`` for root, else ``$XDG_RUNTIME_DIR`` (default ``/run/user/<uid>``)."""
    return "/run" if uid == 0 else os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}"


def default_endpoint(platform: str, environ: dict[str, str] | None = None, uid: int | None = None) -> str:
    """The engine's endpoint as upstream picks it: ``CONTAINER_ENDPOINT`` when set, else Docker's
    ``unix:///run/docker.sock`` or Podman's ``unix://<runtime dir>/podman/podman.sock``."""
    env = os.environ if environ is None else environ
    if endpoint := env.get("CONTAINER_ENDPOINT"):
        return endpoint
    if platform == "docker":
        return "unix:///run/docker.sock"
    return f"unix://{runtime_dir(os.getuid() if uid is None else uid)}/podman/podman.sock"


def socket_path(endpoint: str) -> str:
    """The Unix socket of ``endpoint`` (``unix:///path`` or ``/path``); ``ValueError`` for anything else (upstream
    takes TCP endpoints too: not this client)."""
    if endpoint.startswith("unix://"):
        return endpoint.removeprefix("unix://")
    if endpoint.startswith("/"):
        return endpoint
    raise ValueError(f"container endpoint {endpoint!r} is not a Unix socket (unix:///path/to/engine.sock)")


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True)
class Container:
    """What the engine says of a container."""

    name: str
    id: str
    image: str
    labels: dict[str, str]
    state: str                                   # created, running, exited, ...
    pid: int = 0
    restart_policy: str = ""
    restart_count: int = 0
    mounts: list[dict[str, Any]] = field(default_factory=list)
    network_mode: str = ""

    @property
    def running(self) -> bool:
        return self.state == "running"


def _container(doc: dict[str, Any]) -> Container:
    """A container from ``GET /containers/{id}/json``."""
    config, state, host = doc.get("Config") or {}, doc.get("State") or {}, doc.get("HostConfig") or {}
    return Container(name=str(doc.get("Name", "")).lstrip("/"), id=str(doc.get("Id", "")),
                     image=str(config.get("Image", "")), labels=dict(config.get("Labels") or {}),
                     state=str(state.get("Status", "")), pid=int(state.get("Pid") or 0),
                     restart_policy=str((host.get("RestartPolicy") or {}).get("Name", "")),
                     restart_count=int(doc.get("RestartCount") or 0), mounts=list(doc.get("Mounts") or []),
                     network_mode=str(host.get("NetworkMode", "")))


def demultiplex(data: bytes) -> bytes:
    """A container's log as ``GET /containers/{id}/logs`` streams it without a terminal: frames of an 8-byte header
    (stream, 0, 0, 0, big-endian length) and their bytes; returned joined (stdout and stderr interleaved)."""
    out, at = bytearray(), 0
    while at + 8 <= len(data) and data[at] in (0, 1, 2) and data[at + 1:at + 4] == b"\0\0\0":
        (length,) = struct.unpack(">I", data[at + 4:at + 8])
        out += data[at + 8:at + 8 + length]
        at += 8 + length
    return bytes(out) if at else data


class Engine:
    """The engine at ``endpoint`` (``platform``: podman or docker, for the words of its errors)."""

    def __init__(self, endpoint: str, platform: str) -> None:
        self.endpoint = endpoint
        self.platform = platform
        self.path = socket_path(endpoint)

    def _unavailable(self, why: str) -> EngineUnavailable:
        hint = HOW_TO_START.get(self.platform, "is the container engine's API service running?")
        return EngineUnavailable(f"Container engine is not available on provided endpoint - {self.endpoint}: {why} "
                                 f"({hint.format(path=self.path)})")

    def request(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None,
                timeout: float = TIMEOUT_SECONDS) -> tuple[int, bytes]:
        """One request; (status, body). ``EngineUnavailable`` when the socket does not answer."""
        url = API + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        connection = _UnixConnection(self.path, timeout)
        headers = {"Host": "localhost"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, url, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read(MAX_BODY + 1)
        except FileNotFoundError:
            raise self._unavailable("no such socket") from None
        except ConnectionRefusedError:
            raise self._unavailable("connection refused") from None
        except (OSError, http.client.HTTPException) as e:
            raise self._unavailable(str(e)[:200] or type(e).__name__) from None
        finally:
            connection.close()
        return response.status, data[:MAX_BODY]

    def _call(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None,
              ok: tuple[int, ...] = (200, 201, 204), timeout: float = TIMEOUT_SECONDS) -> Any:
        status, data = self.request(method, path, body, query, timeout)
        if status in ok:
            try:
                return json.loads(data) if data.strip() else None
            except ValueError:
                return data
        try:
            message = str(json.loads(data).get("message", ""))[:500]
        except (ValueError, AttributeError):
            message = data[:500].decode(errors="replace")
        raise (NotFound if status == 404 else EngineError)(status, message or f"{method} {path} failed")

    # ---- the engine ----------------------------------------------------------------------------------------------
    def version(self) -> dict[str, Any]:
        """``GET /version``: which engine answers (its ``Components`` name Podman's)."""
        answer = self._call("GET", "/version")
        return answer if isinstance(answer, dict) else {}

    def engine_name(self) -> str:
        """"podman" or "docker", by what answers (upstream tells them apart the same way)."""
        components = self.version().get("Components") or []
        return "podman" if any("podman" in str(c.get("Name", "")).lower() for c in components) else "docker"

    # ---- images --------------------------------------------------------------------------------------------------
    def image_present(self, image: str) -> bool:
        try:
            self._call("GET", f"/images/{urllib.parse.quote(image, safe='')}/json")
        except NotFound:
            return False
        return True

    def pull(self, image: str) -> None:
        """Pull ``image`` (its registry must be reachable); ``EngineError`` naming why not."""
        name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
        status, data = self.request("POST", "/images/create", query={"fromImage": name, "tag": tag},
                                    timeout=600)
        problems = [str(m.get("error") or m.get("errorDetail", {}).get("message"))
                    for m in _json_lines(data) if isinstance(m, dict) and (m.get("error") or m.get("errorDetail"))]
        if status != 200 or problems:
            raise EngineError(status, f"failed to pull image {image}: {'; '.join(problems)[:500] or data[:300]!r}")

    # ---- containers ----------------------------------------------------------------------------------------------
    def inspect(self, name: str) -> Container | None:
        try:
            return _container(self._call("GET", f"/containers/{urllib.parse.quote(name, safe='')}/json"))
        except NotFound:
            return None

    def containers(self, labels: dict[str, str]) -> list[Container]:
        """Every container (running or not) carrying all of ``labels``."""
        filters = json.dumps({"label": [f"{k}={v}" for k, v in sorted(labels.items())]})
        found = self._call("GET", "/containers/json", query={"all": "true", "filters": filters}) or []
        return [c for doc in found if (c := self.inspect(str(doc.get("Id", "")))) is not None]

    def create(self, name: str, spec: dict[str, Any]) -> str:
        """Create container ``name`` from ``spec`` (the API's ContainerCreate body); its id."""
        answer = self._call("POST", "/containers/create", body=spec, query={"name": name})
        return str((answer or {}).get("Id", ""))

    def start(self, name: str) -> None:
        self._call("POST", f"/containers/{urllib.parse.quote(name, safe='')}/start", ok=(204, 304))

    def stop(self, name: str, seconds: int = 10) -> None:
        self._call("POST", f"/containers/{urllib.parse.quote(name, safe='')}/stop", query={"t": str(seconds)},
                   ok=(204, 304), timeout=TIMEOUT_SECONDS + seconds)

    def remove(self, name: str) -> None:
        self._call("DELETE", f"/containers/{urllib.parse.quote(name, safe='')}", query={"force": "true", "v": "true"})

    def logs(self, name: str, tail: int = 100) -> str:
        status, data = self.request("GET", f"/containers/{urllib.parse.quote(name, safe='')}/logs",
                                    query={"stdout": "true", "stderr": "true", "tail": str(tail)})
        if status != 200:
            raise (NotFound if status == 404 else EngineError)(status, data[:300].decode(errors="replace"))
        return demultiplex(data).decode(errors="replace")


def _json_lines(data: bytes) -> list[Any]:
    """The JSON messages of a streamed answer (one per line; lines that are not JSON skipped)."""
    out = []
    for line in data.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
