"""The effective HAProxy model of a router configuration (frontends, backends, servers, with HAProxy-safe names and
the state-directory paths of TLS material), composed purely from a validated ``RouterConfig``.

Both the renderer (``haproxy_config.py``) and the planner (``plan.py``) work on this model, so that what is rendered
and what is changed at runtime are decided from the same facts. Entities whose TLS profile is unusable are withheld
and reported as problems (as upstream defers a binding until its Secret exists).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from .config import RouterConfig, is_ip_address
from .errors import StateDirError, truncate
from .names import backend_name, frontend_name, server_name
from .tls import ProfileFiles

__all__ = [
    "BackendSpec",
    "BindTls",
    "FrontendSpec",
    "GlobalSpec",
    "RouterSpec",
    "ServerSpec",
    "ServerTls",
    "StateLayout",
    "compose",
]

# characters allowed in state-directory paths: they appear unquoted in haproxy.cfg and in runtime API commands
_SAFE_PATH = re.compile(r"[A-Za-z0-9._/+@=,-]+")
_MAX_UNIX_SOCKET = 107


@dataclass(frozen=True)
class StateLayout:
    """Files and sockets of one router under its state directory."""

    state_dir: Path

    @property
    def config_file(self) -> Path:
        return self.state_dir / "haproxy.cfg"

    @property
    def master_socket(self) -> Path:
        return self.state_dir / "master.sock"

    @property
    def worker_socket(self) -> Path:
        return self.state_dir / "worker.sock"

    @property
    def tls_dir(self) -> Path:
        return self.state_dir / "tls"

    def check(self) -> None:
        """Refuse a state directory whose paths cannot be written safely into haproxy.cfg or a Unix socket."""
        text = str(self.state_dir)
        if not self.state_dir.is_absolute() or not _SAFE_PATH.fullmatch(text):
            raise StateDirError(f"state directory {truncate(text)} must be an absolute path of letters, digits "
                                "and ._/+@=,- only (it is written into haproxy.cfg)")
        for sock in (self.master_socket, self.worker_socket):
            if len(str(sock)) > _MAX_UNIX_SOCKET:
                raise StateDirError(f"state directory {truncate(text)} is too long: socket path {sock} has "
                                    f"{len(str(sock))} bytes, Unix sockets allow {_MAX_UNIX_SOCKET}")


@dataclass(frozen=True)
class BindTls:
    cert_file: Path
    ca_file: Path | None
    verify_client: bool


@dataclass(frozen=True)
class ServerTls:
    ca_file: Path
    cert_file: Path | None
    verify_host: str | None
    sni: str | None


@dataclass(frozen=True)
class ServerSpec:
    name: str
    host: str
    port: int
    tls: ServerTls | None
    # labels for metrics, not rendered
    connector: str = field(compare=False)
    target: str = field(compare=False)
    process_id: str | None = field(default=None, compare=False)

    @property
    def host_is_ip(self) -> bool:
        return is_ip_address(self.host)


@dataclass(frozen=True)
class BackendSpec:
    name: str
    routing_key: str
    servers: tuple[ServerSpec, ...]


@dataclass(frozen=True)
class FrontendSpec:
    name: str
    listener: str
    routing_key: str
    host: str
    port: int
    backend: str
    tls: BindTls | None
    enabled: bool            # its routing key has at least one server

    def static(self) -> FrontendSpec:
        """Everything that needs a reload to change (all but ``enabled``)."""
        return replace(self, enabled=True)


@dataclass(frozen=True)
class GlobalSpec:
    worker_socket: Path
    connect_timeout_ms: int
    threads: int | None = None
    max_connections: int | None = None
    hard_stop_after_s: int | None = None
    metrics: tuple[str, int] | None = None


@dataclass(frozen=True)
class RouterSpec:
    globals: GlobalSpec
    frontends: tuple[FrontendSpec, ...] = ()
    backends: tuple[BackendSpec, ...] = ()

    def frontend_map(self) -> dict[str, FrontendSpec]:
        return {f.name: f for f in self.frontends}

    def backend_map(self) -> dict[str, BackendSpec]:
        return {b.name: b for b in self.backends}

    def server_tls_files(self) -> frozenset[Path]:
        """CA and certificate files referenced by servers (HAProxy caches them by path once loaded)."""
        out: set[Path] = set()
        for b in self.backends:
            for s in b.servers:
                if s.tls:
                    out.add(s.tls.ca_file)
                    if s.tls.cert_file:
                        out.add(s.tls.cert_file)
        return frozenset(out)

    def tls_files(self) -> frozenset[Path]:
        out = set(self.server_tls_files())
        for f in self.frontends:
            if f.tls:
                out.add(f.tls.cert_file)
                if f.tls.ca_file:
                    out.add(f.tls.ca_file)
        return frozenset(out)


def _host_label(host: str) -> str:
    return host[:-1] if host.endswith(".") else host


def compose(config: RouterConfig, profiles: Mapping[str, ProfileFiles], layout: StateLayout, *,
            profile_problems: Mapping[str, str] | None = None,
            unavailable_binds: Mapping[str, str] | None = None) -> tuple[RouterSpec, list[str]]:
    """The HAProxy model of ``config``, and the problems of entities withheld from it.

    ``profiles`` maps usable TLS profile names to their files, ``profile_problems`` unusable ones to the reason;
    ``unavailable_binds`` maps Listener names to the reason their address cannot be bound (port in use).
    """
    profile_problems = profile_problems or {}
    unavailable_binds = unavailable_binds or {}
    problems: list[str] = []

    def profile_for(path: str, entity: str, name: str | None, *, need_cert: bool, need_ca: bool
                    ) -> tuple[bool, ProfileFiles | None]:
        if name is None:
            return True, None
        files = profiles.get(name)
        if files is None:
            reason = profile_problems.get(name, "is not available")
            problems.append(f"{path} ({entity}) withheld: TLS profile {truncate(name)} {reason}")
            return False, None
        missing = [what for what, need, have in (("certificate and key", need_cert, files.cert_file),
                                                  ("CA", need_ca, files.ca_file)) if need and not have]
        if missing:
            problems.append(f"{path} ({entity}) withheld: TLS profile {truncate(name)} "
                            f"has no {' and no '.join(missing)}")
            return False, None
        return True, files

    servers_by_key: dict[str, list[ServerSpec]] = {}
    keys: set[str] = set()
    for i, con in enumerate(config.connectors):
        ok, files = profile_for(f"connectors[{i}]", f"connector {truncate(con.name)}", con.tls_profile, need_cert=con.use_client_cert,
                                need_ca=True)
        if not ok:
            continue
        keys.add(con.routing_key)
        for t in con.targets:
            tls = None
            if files is not None and files.ca_file is not None:
                host = _host_label(t.host)
                verify = host if con.verify_hostname else None
                tls = ServerTls(ca_file=files.ca_file,
                                cert_file=files.cert_file if con.use_client_cert else None,
                                verify_host=verify,
                                # SNI never carries an IP address; HAProxy checks the name against the SNI it sent
                                sni=verify if verify and not is_ip_address(host) else None)
            servers_by_key.setdefault(con.routing_key, []).append(ServerSpec(
                name=server_name(con.name, t.key), host=t.host, port=con.port, tls=tls,
                connector=con.name, target=t.key, process_id=t.process_id))

    frontends: list[FrontendSpec] = []
    for i, lst in enumerate(config.listeners):
        path = f"listeners[{i}]"
        if lst.name in unavailable_binds:
            problems.append(f"{path} (listener {truncate(lst.name)}) withheld: {unavailable_binds[lst.name]}")
            continue
        ok, files = profile_for(path, f"listener {truncate(lst.name)}", lst.tls_profile, need_cert=True, need_ca=lst.authenticate_peer)
        if not ok:
            continue
        bind_tls = None
        if files is not None and files.cert_file is not None:
            bind_tls = BindTls(cert_file=files.cert_file, ca_file=files.ca_file if lst.authenticate_peer else None,
                               verify_client=lst.authenticate_peer)
        keys.add(lst.routing_key)
        frontends.append(FrontendSpec(
            name=frontend_name(lst.name), listener=lst.name, routing_key=lst.routing_key, host=lst.host,
            port=lst.port, backend=backend_name(lst.routing_key), tls=bind_tls,
            enabled=bool(servers_by_key.get(lst.routing_key))))

    backends = tuple(sorted(
        (BackendSpec(name=backend_name(k), routing_key=k,
                     servers=tuple(sorted(servers_by_key.get(k, []), key=lambda s: s.name))) for k in keys),
        key=lambda b: b.name))
    s = config.router
    spec = RouterSpec(
        globals=GlobalSpec(
            worker_socket=layout.worker_socket,
            connect_timeout_ms=max(1, round(s.connect_timeout_seconds * 1000)),
            threads=s.threads, max_connections=s.max_connections, hard_stop_after_s=s.old_worker_grace_seconds,
            metrics=(s.metrics.host, s.metrics.port) if s.metrics else None),
        frontends=tuple(sorted(frontends, key=lambda f: f.name)),
        backends=backends)
    return spec, problems
