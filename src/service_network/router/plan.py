"""Plan a configuration change (pure): runtime API steps when HAProxy can take the change live, else a hitless
reload (preceded by the steps that close what upstream closes).

Inputs are three ``RouterSpec``s: ``loaded`` (what the running worker was started or reloaded with: it decides which
frontends exist and which TLS files the worker has cached), ``live`` (what it serves now, after runtime changes)
and ``desired``. The configuration file is always rewritten to ``desired`` as well, because servers added at runtime
vanish on reload or restart.

What needs a reload (HAProxy 2.6 cannot do it at runtime): a frontend added, removed or changed (bind, TLS,
routing key); a frontend that was rendered ``disabled`` and now has a target; a backend added or removed; global
settings; a server whose address is a DNS name (dynamic servers get no resolution in 2.6) or whose TLS files the
worker has not loaded.

Route and SNI map entries (network mode) change through the runtime API (``add/set/del map``): after servers are
added, before servers are removed, so that the map never names a server the worker does not have.

What upstream closes, we close: a removed or changed target's live connections (``shutdown sessions server``), and a
removed Listener's live connections. After a reload these run in the old workers, which still carry the connections
(``drains``); after runtime steps they run there too. Changing a Listener keeps its live connections in the old worker (upstream drops them).
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import RouterSpec, ServerSpec

__all__ = [
    "AddServer",
    "CloseFrontendSessions",
    "DisableFrontend",
    "DrainServer",
    "EnableFrontend",
    "MapEntry",
    "Plan",
    "RemoveServer",
    "Step",
    "plan",
]


@dataclass(frozen=True)
class DisableFrontend:
    """Pause a frontend: its socket stops accepting and new clients get "connection refused"."""

    frontend: str


@dataclass(frozen=True)
class EnableFrontend:
    frontend: str


@dataclass(frozen=True)
class AddServer:
    backend: str
    server: ServerSpec


@dataclass(frozen=True)
class RemoveServer:
    """Maintenance, close its connections, delete."""

    backend: str
    server: str


@dataclass(frozen=True)
class DrainServer:
    """Maintenance and close its connections (in an old worker); no delete."""

    backend: str
    server: str


@dataclass(frozen=True)
class CloseFrontendSessions:
    """Close every connection accepted by a frontend (a removed Listener)."""

    frontend: str


@dataclass(frozen=True)
class MapEntry:
    """Set (``value``; ``new``: the key is not in the map yet) or delete (``value`` None) one map entry."""

    map: str            # "routes" or "sni"
    key: str
    value: str | None
    new: bool = False


Step = DisableFrontend | EnableFrontend | AddServer | RemoveServer | DrainServer | CloseFrontendSessions | MapEntry


def _map_steps(name: str, live: tuple[tuple[str, str], ...], desired: tuple[tuple[str, str], ...]) -> list[Step]:
    old, new = dict(live), dict(desired)
    steps: list[Step] = [MapEntry(name, k, v, new=k not in old) for k, v in sorted(new.items()) if old.get(k) != v]
    steps += [MapEntry(name, k, None) for k in sorted(old.keys() - new.keys())]
    return steps


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...] = ()            # runtime API steps in the current worker (none when reloading)
    reload_reasons: tuple[str, ...] = ()    # empty: no reload
    drains: tuple[Step, ...] = ()           # in old workers after the steps or the reload, best effort

    @property
    def reload(self) -> bool:
        return bool(self.reload_reasons)

    @property
    def empty(self) -> bool:
        return not (self.steps or self.reload_reasons or self.drains)


def _servers(spec: RouterSpec) -> dict[tuple[str, str], ServerSpec]:
    return {(b.name, s.name): s for b in spec.backends for s in b.servers}


def _reload_reasons(loaded: RouterSpec, live: RouterSpec, desired: RouterSpec) -> list[str]:
    reasons: list[str] = []
    if loaded.globals != desired.globals:
        reasons.append("global settings changed")
    if loaded.access != desired.access:
        reasons.append("router access changed")
    if loaded.links != desired.links:
        reasons.append("links changed")
    lf, df = loaded.frontend_map(), desired.frontend_map()
    for name in sorted(df.keys() - lf.keys()):
        reasons.append(f"frontend {name} added")
    for name in sorted(lf.keys() - df.keys()):
        reasons.append(f"frontend {name} removed")
    for name in sorted(lf.keys() & df.keys()):
        if lf[name].static() != df[name].static():
            reasons.append(f"frontend {name} changed")
        elif df[name].enabled and not lf[name].enabled:
            reasons.append(f"frontend {name} gets its first target (it was loaded without one)")
    lb, db = set(loaded.backend_map()), set(desired.backend_map())
    reasons += [f"backend {n} added" for n in sorted(db - lb)]
    reasons += [f"backend {n} removed" for n in sorted(lb - db)]
    cached = loaded.server_tls_files()
    live_servers = _servers(live)
    for key, server in sorted(_servers(desired).items()):
        if live_servers.get(key) == server:
            continue
        if not server.host_is_ip:
            reasons.append(f"server {key[0]}/{key[1]} has a DNS name (resolved only at load)")
        elif server.tls is not None and not {server.tls.ca_file, server.tls.cert_file} - {None} <= cached:
            reasons.append(f"server {key[0]}/{key[1]} uses TLS files the worker has not loaded")
    return reasons


def plan(loaded: RouterSpec, live: RouterSpec, desired: RouterSpec) -> Plan:
    """How to go from ``live`` (a worker loaded from ``loaded``) to ``desired``."""
    live_servers, desired_servers = _servers(live), _servers(desired)
    gone = [k for k in sorted(live_servers) if desired_servers.get(k) != live_servers[k]]
    new = [k for k in sorted(desired_servers) if live_servers.get(k) != desired_servers[k]]
    live_fe, desired_fe = live.frontend_map(), desired.frontend_map()
    removed_fe = sorted(live_fe.keys() - desired_fe.keys())
    drains: list[Step] = [DrainServer(b, s) for b, s in gone]
    drains += [CloseFrontendSessions(name) for name in removed_fe]

    reasons = _reload_reasons(loaded, live, desired)
    if reasons:
        # the replaced worker becomes an old worker: close there what upstream closes
        return Plan(reload_reasons=tuple(reasons), drains=tuple(drains))

    steps: list[Step] = []
    # refuse first, so that no client is accepted for a key while its last target goes
    steps += [DisableFrontend(name) for name, f in sorted(desired_fe.items())
              if not f.enabled and live_fe[name].enabled]
    # a changed server is removed and added again under its name; a server that goes is removed after the maps
    # stop naming it
    steps += [RemoveServer(b, s) for b, s in gone if (b, s) in desired_servers]
    steps += [AddServer(b, desired_servers[(b, s)]) for b, s in new]
    steps += _map_steps("sni", live.sni_map, desired.sni_map)
    steps += _map_steps("routes", live.route_map, desired.route_map)
    steps += [RemoveServer(b, s) for b, s in gone if (b, s) not in desired_servers]
    steps += [EnableFrontend(name) for name, f in sorted(desired_fe.items())
              if f.enabled and not live_fe[name].enabled]
    return Plan(steps=tuple(steps), drains=tuple(d for d in drains if isinstance(d, DrainServer)))
