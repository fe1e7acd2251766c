"""What a system site's resources are doing now (pure): each resource's status from what its router process and
the router itself report, with the same rules as the Kubernetes site controller (``site/compose.py``,
``site/links.py``, ``site/network.py``):

- the router process (the ``service-network router`` adaptor, which runs ``service-network-router``) is running,
  stopped (by ``skupper system stop``, or never started) or crashed (its pid file is there, the process is not; on
  podman and docker: its container is there and does not run, as ``stop`` removes it);
  while it does not run, nothing is Ready: the Site is Pending (stopped) or Error (crashed), every other resource
  Pending ``the router is not running``;
- a Listener is Ready once the router listens on its address: that needs its routing key to have a connector here
  or across a link (else Pending ``No matching connectors``, as the Matched condition says on Kubernetes) and the
  address to be free (else Error ``cannot listen on 127.0.0.1:18096: ...``, the error binding that address gives);
- a Connector is Ready while a Listener with its routing key exists in the network (else Pending ``No matching
  listeners``);
- a Link is Ready while the router reports it up (else Pending ``Link is not operational: <the router's reason>``);
  the links other sites dialed to this one are listed as incoming links;
- a RouterAccess is Ready while the router's access is bound;
- an AccessToken is Ready once redeemed, Error with the grant server's answer when its redemption failed.

A state that can still change by itself within a moment (the router has not answered yet, has not tried to bind a
Listener or dial a Link) is marked not ``settled``: ``setup``, ``start``, ``reload`` and ``apply`` wait (bounded)
for every state to settle before they report.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from operator_runtime.objects import JsonDict, mapping, meta

from ..site.links import NOT_REPORTED, observe_links
from ..site.netstatus import IncomingLink, RouterStatus, network_snapshot, parse_router_status
from ..site.network import NetworkSnapshot, site_record
from ..site.status import ConditionState, error, pending, ready
from .compose import SystemPlan
from .resources import ResourceFile

__all__ = ["NO_MATCHING_CONNECTORS", "NO_MATCHING_LISTENERS", "ROUTER_NOT_RUNNING", "IncomingLink", "Observed",
           "ProbeTarget", "RouterAnswer", "RouterProcess", "SiteView", "TokenRecord", "failures", "observe",
           "parse_answer", "probe_targets"]

NO_MATCHING_CONNECTORS = "No matching connectors"
NO_MATCHING_LISTENERS = "No matching listeners"
ROUTER_NOT_RUNNING = "the router is not running"
WAITING_TO_LISTEN = "waiting for the router to listen"
NOT_APPLIED = "waiting for the router to apply the site's document"
NOT_REDEEMED = "not redeemed yet"
Key = tuple[str, str]          # (kind, name)


@dataclass(frozen=True)
class RouterProcess:
    """The site's router process: ``pid`` is the adaptor's (``service-network router``), ``router_pid`` that of
    the ``service-network-router`` it runs (None while the adaptor starts it again)."""

    state: Literal["running", "stopped", "crashed"]
    pid: int | None = None
    router_pid: int | None = None
    container: str | None = None          # the container it runs in (podman and docker platforms)
    container_state: str = ""             # a container's state when it does not run (exited, created, ...)

    def describe(self) -> str:
        if self.state == "running":
            inner = f"router process {self.router_pid}" if self.router_pid else "its router process is starting"
            where = f"container {self.container}, " if self.container else ""
            return f"running ({where}pid {self.pid}, {inner})"
        if self.state == "crashed" and self.container:
            return (f"crashed (container {self.container} is {self.container_state or 'not running'}: it ended "
                    f"without skupper system stop, and the engine did not start it again; skupper system start "
                    f"starts it)")
        if self.state == "crashed":
            return (f"crashed (pid {self.pid} ended without skupper system stop; skupper system start starts it "
                    f"again)")
        return "stopped"


@dataclass(frozen=True)
class TokenRecord:
    """An AccessToken's redemption as this site last tried it."""

    redeemed: bool
    problem: str | None = None
    refused: bool = False          # the grant server refused it (used, expired, wrong code): trying again won't do


@dataclass(frozen=True)
class RouterAnswer:
    """What the router reported just now: its network status (the links dialed to it among it), and where it is
    bound."""

    status: RouterStatus
    access: str | None = None                           # the router access's address, None: not bound
    bound: Mapping[str, str] = dataclasses.field(default_factory=dict)   # listener -> its address


def parse_answer(network: Mapping[str, Any], addresses: Mapping[str, Any]) -> RouterAnswer:
    """The router's answers to ``{"op":"network"}`` and ``{"op":"addresses"}``; ``ValueError`` when they are not
    what a router answers."""
    status = parse_router_status(json.dumps(network))
    listeners = addresses.get("listeners")
    bound = {str(k): str(v) for k, v in listeners.items()} if isinstance(listeners, Mapping) else {}
    access = addresses.get("access")
    return RouterAnswer(status, str(access) if isinstance(access, str) else None, bound)


@dataclass(frozen=True)
class Observed:
    kind: str
    name: str
    state: ConditionState
    settled: bool = True
    field: str | None = None        # the field the state is about (its line is where a failure points)


@dataclass(frozen=True)
class ProbeTarget:
    """An address the router should be bound to and is not: binding it here says why."""

    kind: str
    name: str
    host: str
    port: int


@dataclass(frozen=True)
class SiteView:
    """A system site now: its router process, each resource's state, the links dialed to it, and why the router's
    report could not be had (when it could not)."""

    process: RouterProcess
    observed: tuple[Observed, ...]
    incoming: tuple[IncomingLink, ...] = ()
    router_problem: str | None = None

    @property
    def settled(self) -> bool:
        return all(o.settled for o in self.observed)


def _snapshot(plan: SystemPlan, answer: RouterAnswer) -> NetworkSnapshot:
    document = plan.document or {}
    site = mapping(document, "site")
    local = site_record(str(site.get("id") or ""), plan.site_name, str(site.get("namespace") or ""), "", document)
    return network_snapshot(local, [answer.status])


def _listener_spec(plan: SystemPlan, name: str) -> JsonDict | None:
    return next((entry for entry in (plan.document or {}).get("listeners") or [] if entry.get("name") == name),
                None)


def _applied(plan: SystemPlan, answer: RouterAnswer, snapshot: NetworkSnapshot) -> bool:
    """Whether the router runs the plan's document: its own site's services (listeners, connector targets by
    routing key) as the router reports them are the document's."""
    def services(records: Sequence[Any]) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        return {s.routing_key: (tuple(sorted(s.connectors)), tuple(sorted(s.listeners))) for s in records
                if s.connectors or s.listeners}
    local = snapshot.sites[0]
    reported = next((r for r in answer.status.sites if r.id == local.id), None)
    return services(local.services) == services(reported.services if reported is not None else ())


def probe_targets(plan: SystemPlan, answer: RouterAnswer) -> list[ProbeTarget]:
    """The Listeners whose routing key has a destination and the router access that the router is not bound to:
    a failed bind of the same address here tells why."""
    snapshot = _snapshot(plan, answer)
    listening = answer.status.listening or frozenset()
    out = [ProbeTarget("Listener", str(entry["name"]), str(entry["host"]), int(entry["port"]))
           for entry in (plan.document or {}).get("listeners") or []
           if entry["name"] not in listening and snapshot.has_connector(str(entry["routingKey"]))]
    if plan.access is not None and answer.access is None and (plan.document or {}).get("routerAccess"):
        out.append(ProbeTarget("RouterAccess", plan.access.name, plan.access.host, plan.access.port))
    return out


def _token(obj: Mapping[str, Any], tokens: Mapping[str, TokenRecord]) -> ConditionState:
    record = tokens.get(meta(obj).name)
    if record is not None and record.redeemed:
        return ready()
    if record is not None and record.problem:
        return error(record.problem)
    return pending(NOT_REDEEMED)


def _down(kind: str, process: RouterProcess) -> ConditionState:
    if kind != "Site":
        return pending(ROUTER_NOT_RUNNING)
    if process.state == "crashed":
        what = f"container {process.container}" if process.container else f"process {process.pid}"
        return error(f"the router is not running: its {what} ended without skupper system stop")
    return pending("the router is stopped: skupper system start starts it")


def _listener(plan: SystemPlan, name: str, answer: RouterAnswer, snapshot: NetworkSnapshot,
              probes: Mapping[Key, str | None]) -> Observed:
    entry = _listener_spec(plan, name)
    if entry is None:
        return Observed("Listener", name, pending(NOT_APPLIED), False)
    if name in (answer.status.listening or frozenset()):
        if answer.bound.get(name, _address(entry["host"], entry["port"])) != _address(entry["host"], entry["port"]):
            return Observed("Listener", name, pending(NOT_APPLIED), False)     # still bound as it was
        return Observed("Listener", name, ready())
    if not snapshot.has_connector(str(entry["routingKey"])):
        return Observed("Listener", name, pending(NO_MATCHING_CONNECTORS))
    problem = probes.get(("Listener", name))
    if problem:
        return Observed("Listener", name, error(f"cannot listen on {_address(entry['host'], entry['port'])}: "
                                                f"{problem}"), field="spec.port")
    return Observed("Listener", name, pending(WAITING_TO_LISTEN), False)


def _address(host: object, port: object) -> str:
    text = str(host)
    return f"[{text}]:{port}" if ":" in text else f"{text}:{port}"


def _access(plan: SystemPlan, name: str, answer: RouterAnswer, probes: Mapping[Key, str | None]) -> Observed:
    if plan.access is None or plan.access.name != name or answer.access is not None:
        return Observed("RouterAccess", name, ready())
    problem = probes.get(("RouterAccess", name))
    if problem:
        return Observed("RouterAccess", name, error(
            f"cannot listen on {_address(plan.access.host, plan.access.port)}: {problem}"), field="spec.roles")
    return Observed("RouterAccess", name, pending(WAITING_TO_LISTEN), False)


def _links(plan: SystemPlan, answer: RouterAnswer) -> dict[str, Observed]:
    states = [dataclasses.replace(s) for s in plan.links if s.entries]
    observe_links(states, answer.status.links)
    out = {}
    for state in states:
        operational = state.operational or pending(NOT_REPORTED)
        out[state.name] = Observed("Link", state.name, operational, operational.message != NOT_REPORTED)
    return out


def observe(plan: SystemPlan, resources: Sequence[Mapping[str, Any]], tokens: Mapping[str, TokenRecord],
            process: RouterProcess, answer: RouterAnswer | None, *, router_problem: str | None = None,
            probes: Mapping[Key, str | None] | None = None) -> SiteView:
    """Each resource's state now. ``answer``: the router's report (None: it did not answer, ``router_problem``
    says why); ``probes``: for each of :func:`probe_targets`, the error binding its address here gave (None: it
    could be bound)."""
    probes = probes or {}
    snapshot = _snapshot(plan, answer) if answer is not None else None
    links = _links(plan, answer) if answer is not None else {}
    applied = answer is not None and snapshot is not None and _applied(plan, answer, snapshot)
    observed: list[Observed] = []
    for obj in resources:
        kind, name = str(obj.get("kind")), meta(obj).name
        configured = plan.states.get((kind, name))
        if kind == "AccessToken":
            observed.append(Observed(kind, name, _token(obj, tokens), field="spec.url"))
        elif configured is None:
            observed.append(Observed(kind, name, pending("no Site in input/resources")))
        elif configured.status != "True":
            observed.append(Observed(kind, name, configured))
        elif process.state != "running":
            observed.append(Observed(kind, name, _down(kind, process)))
        elif answer is None or snapshot is None:
            observed.append(Observed(kind, name, pending(f"the router does not answer: {router_problem}"), False))
        elif kind == "Listener":
            observed.append(_listener(plan, name, answer, snapshot, probes))
        elif kind == "Connector":
            key = str(mapping(obj, "spec").get("routingKey") or name)
            observed.append(Observed(kind, name, ready() if snapshot.has_listener(key)
                                     else pending(NO_MATCHING_LISTENERS)))
        elif kind == "Link":
            observed.append(links.get(name, Observed(kind, name, pending(NOT_REPORTED), False)))
        elif kind == "RouterAccess":
            observed.append(_access(plan, name, answer, probes))
        else:
            observed.append(Observed(kind, name, ready()))
        if answer is not None and not applied and kind in ("Listener", "Connector"):
            observed[-1] = dataclasses.replace(observed[-1], settled=False)
    return SiteView(process, tuple(observed), answer.status.incoming if answer is not None else (), router_problem)


def failures(view: SiteView, files: Sequence[ResourceFile], plan_problems: Sequence[str] = (),
             only: set[Key] | None = None) -> list[str]:
    """What failed, each naming its file, line and resource: files (or documents) that could not be used, the
    site's own problems (no Site, ...), and every resource in Error (``only``: of those resources)."""
    by_key = {(f.kind, f.name): f for f in files if f.obj is not None}
    out = [] if only is not None else [*(str(f.problem) for f in files if f.problem), *plan_problems]
    for item in view.observed:
        if item.state.reason != "Error" or (only is not None and (item.kind, item.name) not in only):
            continue
        source = by_key.get((item.kind, item.name))
        out.append(source.describe(item.state.message, item.field) if source is not None
                   else f'{item.kind} "{item.name}": {item.state.message}')
    return out

