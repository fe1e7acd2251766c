"""The effective HAProxy model of a router configuration (frontends, backends, servers, with HAProxy-safe names and
the state-directory paths of TLS material), composed purely from a validated ``RouterConfig``.

Both the renderer (``haproxy_config.py``) and the planner (``plan.py``) work on this model, so that what is rendered
and what is changed at runtime are decided from the same facts. Entities whose TLS profile is unusable are withheld
and reported as problems (as upstream defers a binding until its Secret exists).

Across sites (``routerAccess``, ``links``, ``remoteRoutes``): each routing key reachable through a link gets a *hop
server* per link (the remote router access, mutual TLS, the key in SNI) in the key's backend, or in the shared
transit backend when this router has no Listener or Connector of its own for the key. Which server takes a new
connection is decided by the ``sn_pick`` Lua action from the *route map* (SNI of the key -> ``server=cost`` per
candidate; targets cost 0, hops their path cost); the router access frontend finds the backend of an incoming
connection in the *SNI map*. (Map values are one word: candidates are separated by commas.) Both maps are files HAProxy loads and that the runtime API changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from .config import RouterConfig, is_ip_address
from .errors import StateDirError, truncate
from .names import (
    CONTROL_BACKEND,
    CONTROL_SNI,
    TRANSIT_BACKEND,
    access_frontend_name,
    backend_name,
    frontend_name,
    hop_server_name,
    link_backend_name,
    routing_key_sni,
    server_name,
)
from .tls import ProfileFiles

__all__ = [
    "ROUTE_CHUNK",
    "AccessSpec",
    "BackendSpec",
    "BindTls",
    "FrontendSpec",
    "GlobalSpec",
    "LinkSpec",
    "NetworkFiles",
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

    @property
    def control_socket(self) -> Path:
        """Where the adaptor's control channel listens (the router access sends the control SNI there)."""
        return self.state_dir / "control.sock"

    @property
    def route_map(self) -> Path:
        return self.state_dir / "routes.map"

    @property
    def sni_map(self) -> Path:
        return self.state_dir / "sni.map"

    @property
    def lua_file(self) -> Path:
        return self.state_dir / "pick.lua"

    @property
    def network_status(self) -> Path:
        return self.state_dir / "network.json"

    def check(self) -> None:
        """Refuse a state directory whose paths cannot be written safely into haproxy.cfg or a Unix socket."""
        text = str(self.state_dir)
        if not self.state_dir.is_absolute() or not _SAFE_PATH.fullmatch(text):
            raise StateDirError(f"state directory {truncate(text)} must be an absolute path of letters, digits "
                                "and ._/+@=,- only (it is written into haproxy.cfg)")
        for sock in (self.master_socket, self.worker_socket, self.control_socket):
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
    tls_version: str | None = None   # inter-router hops: "1.3" (TLS 1.3 only) or "1.2" (TLS 1.2 only)


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
    link: str | None = None      # a hop server: sends the key's connections over this link (a backup server)

    @property
    def host_is_ip(self) -> bool:
        return is_ip_address(self.host)


@dataclass(frozen=True)
class BackendSpec:
    name: str
    routing_key: str | None              # None: the shared transit backend
    servers: tuple[ServerSpec, ...]
    routed: bool = False                 # the sn_pick Lua action chooses the server (network mode)


@dataclass(frozen=True)
class AccessSpec:
    """The router access frontend: mutual TLS 1.3, backend chosen by SNI through the SNI map."""

    name: str
    host: str
    port: int
    cert_file: Path
    ca_file: Path
    min_tls_version: str = "1.3"


@dataclass(frozen=True)
class LinkSpec:
    """A link's endpoint and TLS files (a backend with a disabled server, so the worker loads the files and hop
    servers using them can be added at runtime)."""

    name: str
    backend: str
    link: str
    host: str
    port: int
    ca_file: Path
    cert_file: Path
    cost: int = field(compare=False)
    tls_version: str = "1.3"


# tune.bufsize of a router in a network: TLS on the links rules out splice, so every byte is copied through HAProxy's
# buffers; 64 kB buffers (HAProxy's default is 16 kB) mean fewer, larger reads, writes and TLS records per GB
# (bench/network_bench.py --only throughput: routers' CPU per GB and two-hop throughput, docs/service-network-router.md
# "Measurements"). Buffers are taken from a pool while a connection has data in flight, so the cost is memory per busy
# connection, not per open one.
NETWORK_BUFFER_SIZE = 65_536
ROUTE_CHUNK = 4000   # characters of one route map value (HAProxy reads map lines and CLI commands into 16 KiB)


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
    sni: str | None = None   # network mode: the key's SNI, the route map's key for its connections

    def static(self) -> FrontendSpec:
        """Everything that needs a reload to change (all but ``enabled``)."""
        return replace(self, enabled=True)


@dataclass(frozen=True)
class GlobalSpec:
    worker_socket: Path
    connect_timeout_ms: int
    threads: int | None = None
    max_connections: int | None = None
    buffer_size: int | None = None
    hard_stop_after_s: int | None = None
    metrics: tuple[str, int] | None = None
    network: NetworkFiles | None = None  # set when the router takes part in a network (access or links)


@dataclass(frozen=True)
class NetworkFiles:
    lua_file: Path
    route_map: Path
    sni_map: Path
    control_socket: Path


@dataclass(frozen=True)
class RouterSpec:
    globals: GlobalSpec
    frontends: tuple[FrontendSpec, ...] = ()
    backends: tuple[BackendSpec, ...] = ()
    access: AccessSpec | None = None
    links: tuple[LinkSpec, ...] = ()
    route_map: tuple[tuple[str, str], ...] = ()     # key SNI (+ "#n" for further chunks) -> "server=cost,..."
    sni_map: tuple[tuple[str, str], ...] = ()       # SNI -> backend (router access)

    def static(self) -> tuple[object, ...]:
        """What needs a reload to change, besides frontends, backends and servers."""
        return (self.access, self.links)

    def frontend_map(self) -> dict[str, FrontendSpec]:
        return {f.name: f for f in self.frontends}

    def backend_map(self) -> dict[str, BackendSpec]:
        return {b.name: b for b in self.backends}

    def server_tls_files(self) -> frozenset[Path]:
        """CA and certificate files referenced by servers (HAProxy caches them by path once loaded)."""
        out: set[Path] = {p for link in self.links for p in (link.ca_file, link.cert_file)}
        for b in self.backends:
            for s in b.servers:
                if s.tls:
                    out.add(s.tls.ca_file)
                    if s.tls.cert_file:
                        out.add(s.tls.cert_file)
        return frozenset(out)

    def tls_files(self) -> frozenset[Path]:
        out = set(self.server_tls_files())
        if self.access is not None:
            out |= {self.access.cert_file, self.access.ca_file}
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
    ``unavailable_binds`` maps Listener names (and the router access's name) to the reason their address cannot be
    bound (port in use).
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
        ok, files = profile_for(f"connectors[{i}]", f"connector {truncate(con.name)}", con.tls_profile,
                                need_cert=con.use_client_cert, need_ca=True)
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

    # --- across sites: router access, links, hops ---------------------------------------------------------------
    network = bool(config.router_access or config.links)
    access: AccessSpec | None = None
    for i, acc in enumerate(config.router_access):
        path = f"routerAccess[{i}]"
        if acc.name in unavailable_binds:
            problems.append(f"{path} (router access {truncate(acc.name)}) withheld: {unavailable_binds[acc.name]}")
            continue
        ok, files = profile_for(path, f"router access {truncate(acc.name)}", acc.tls_profile, need_cert=True,
                                need_ca=True)
        if ok and files is not None and files.cert_file is not None and files.ca_file is not None:
            access = AccessSpec(name=access_frontend_name(acc.name), host=acc.host, port=acc.port,
                                cert_file=files.cert_file, ca_file=files.ca_file,
                                min_tls_version=acc.min_tls_version)
    links: dict[str, LinkSpec] = {}
    for i, link in enumerate(config.links):
        ok, files = profile_for(f"links[{i}]", f"link {truncate(link.name)}", link.tls_profile, need_cert=True,
                                need_ca=True)
        if ok and files is not None and files.cert_file is not None and files.ca_file is not None:
            links[link.name] = LinkSpec(name=link.name, backend=link_backend_name(link.name), link=link.name,
                                        host=link.host, port=link.port, ca_file=files.ca_file,
                                        cert_file=files.cert_file, cost=link.effective_cost,
                                        tls_version=link.tls_version)
    # cheapest route per (key, link)
    hops: dict[str, dict[str, int]] = {}
    for route in config.remote_routes:
        if route.link in links:
            per_key = hops.setdefault(route.routing_key, {})
            per_key[route.link] = min(route.cost, per_key.get(route.link, route.cost))

    frontends: list[FrontendSpec] = []
    for i, lst in enumerate(config.listeners):
        path = f"listeners[{i}]"
        if lst.name in unavailable_binds:
            problems.append(f"{path} (listener {truncate(lst.name)}) withheld: {unavailable_binds[lst.name]}")
            continue
        if lst.strategy is not None:
            problems.append(f"{path} (listener {truncate(lst.name)}) withheld: a strategy over several routing "
                            "keys needs the Rust router (--engine rust)")
            continue
        ok, files = profile_for(path, f"listener {truncate(lst.name)}", lst.tls_profile, need_cert=True,
                                need_ca=lst.authenticate_peer)
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
            enabled=bool(servers_by_key.get(lst.routing_key) or hops.get(lst.routing_key)),
            sni=routing_key_sni(lst.routing_key) if network else None))

    route_map: list[tuple[str, str]] = []
    sni_map: list[tuple[str, str]] = []
    transit: list[ServerSpec] = []

    def hop_server(key: str, link: LinkSpec, in_transit: bool) -> ServerSpec:
        return ServerSpec(
            name=hop_server_name(link.link, key if in_transit else None), host=link.host, port=link.port,
            tls=ServerTls(ca_file=link.ca_file, cert_file=link.cert_file, verify_host=None,
                          sni=routing_key_sni(key), tls_version=link.tls_version),
            connector=f"link {link.link}", target=key, link=link.link)

    backends: list[BackendSpec] = []
    for key in sorted(keys | set(hops) if network else keys):
        local = sorted(servers_by_key.get(key, []), key=lambda sv: sv.name)
        in_transit = key not in keys
        key_hops = sorted(((hop_server(key, links[name], in_transit), cost) for name, cost in hops.get(key, {}).items()),
                          key=lambda hc: hc[0].name)
        if in_transit:
            transit.extend(h for h, _ in key_hops)
        else:
            backends.append(BackendSpec(name=backend_name(key), routing_key=key,
                                        servers=tuple(local) + tuple(h for h, _ in key_hops), routed=network))
        if network and (local or key_hops):
            sni = routing_key_sni(key)
            candidates = [f"{sv.name}=0" for sv in local] + [f"{h.name}={cost}" for h, cost in key_hops]
            route_map += _chunks(sni, candidates)
            sni_map.append((sni, TRANSIT_BACKEND if in_transit else backend_name(key)))
    net_files = None
    if network:
        backends.append(BackendSpec(name=TRANSIT_BACKEND, routing_key=None,
                                    servers=tuple(sorted(transit, key=lambda sv: sv.name)), routed=True))
        sni_map.append((CONTROL_SNI, CONTROL_BACKEND))
        net_files = NetworkFiles(lua_file=layout.lua_file, route_map=layout.route_map, sni_map=layout.sni_map,
                                 control_socket=layout.control_socket)

    s = config.router
    spec = RouterSpec(
        globals=GlobalSpec(
            worker_socket=layout.worker_socket,
            connect_timeout_ms=max(1, round(s.connect_timeout_seconds * 1000)),
            threads=s.threads, max_connections=s.max_connections, hard_stop_after_s=s.old_worker_grace_seconds,
            buffer_size=s.buffer_size if s.buffer_size is not None or not network else NETWORK_BUFFER_SIZE,
            metrics=(s.metrics.host, s.metrics.port) if s.metrics else None, network=net_files),
        frontends=tuple(sorted(frontends, key=lambda f: f.name)),
        backends=tuple(sorted(backends, key=lambda b: b.name)),
        access=access,
        links=tuple(sorted(links.values(), key=lambda x: x.backend)),
        route_map=tuple(sorted(route_map)),
        sni_map=tuple(sorted(sni_map)))
    return spec, problems


def _chunks(sni: str, candidates: list[str]) -> list[tuple[str, str]]:
    """Route map entries of one key: ``sni`` -> candidates, continued in ``sni#2``, ``sni#3``... when long."""
    out: list[tuple[str, str]] = []
    current: list[str] = []
    size = 0
    for c in candidates:
        if current and size + len(c) + 1 > ROUTE_CHUNK:
            out.append((sni if not out else f"{sni}#{len(out) + 1}", ",".join(current)))
            current, size = [], 0
        current.append(c)
        size += len(c) + 1
    if current:
        out.append((sni if not out else f"{sni}#{len(out) + 1}", ",".join(current)))
    return out
