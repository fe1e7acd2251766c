"""Links -> the router document's ``links[]`` and Link status (pure).

A Link (skupper-listener.md §2.3) names the remote site's router access in ``spec.endpoints`` (by role, in
``name``: the site dials the ``inter-router`` endpoint, an edge Site (``spec.edge: true``) the ``edge`` one and its
entries say ``role: edge``, as upstream's controller chooses its connector's role), the Secret with the client certificate, its key and the remote site CA
(``spec.tlsCredentials``) and a ``cost``. Each endpoint ``group`` is one remote router (an HA site has two), and
each becomes one ``links[]`` entry, so every local router links to every remote router: ``<link>`` when the Link
has one group, ``<link>@<group>`` otherwise (``@`` cannot occur in object names: no two Links' entries collide).
Costs below 1 become 1, as upstream (skupper#2373). The TLS profile is named after the Secret, as for Listeners.

Status: ``Configured`` (the endpoint and Secret are usable, with upstream-style messages otherwise), ``Operational``
(from the routers' network status: up, or the reason the router gives, e.g. ``connection refused``; not reported
yet: Pending), ``Ready`` aggregating both; ``remoteSiteId``/``remoteSiteName`` of the site the link reached.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from operator_runtime.objects import JsonDict, meta

from ..constants import EDGE_PORT, INTER_ROUTER_PORT
from ..crd.models import LinkSpec
from .bindings import BindingError, SecretInfo, tls_problem
from .network import LinkRecord, LinkReport
from .status import CONFIGURED, ConditionState, error, pending, ready, set_condition, set_ready
from .validation import host_problem, quoted

__all__ = ["OPERATIONAL", "LinkState", "check_link", "compose_links", "link_status", "observe_links"]

OPERATIONAL = "Operational"
ROLE = "inter-router"
EDGE_ROLE = "edge"
#: the port an endpoint of a role has when it names none (upstream's ``RouterAccessRole.GetPort``)
ROLE_PORTS = {ROLE: INTER_ROUTER_PORT, EDGE_ROLE: EDGE_PORT}
NOT_REPORTED = "Not yet reported by the router"


@dataclass
class LinkState:
    """One Link: its document entries (none when not configured) and how its routers report it."""

    obj: Mapping[str, Any]
    configured: ConditionState
    reason: str | None = None                       # the error's name, for its Event
    entries: list[JsonDict] = field(default_factory=list)
    operational: ConditionState | None = None       # None: not configured, so not set
    remote_site_id: str | None = None
    remote_site_name: str | None = None

    @property
    def name(self) -> str:
        return meta(self.obj).name

    def fail(self, reason: str, message: str) -> None:
        self.configured = error(message)
        self.reason = reason
        self.operational = None

    def records(self) -> list[LinkRecord]:
        """The site's ``network[].links`` entries for this Link."""
        if not self.entries:
            return []
        up = self.operational is not None and self.operational.status == "True"
        return [LinkRecord(self.name, self.remote_site_id, self.remote_site_name, up)]


def _spec(obj: Mapping[str, Any]) -> LinkSpec:
    try:
        return LinkSpec.model_validate(dict(obj.get("spec") or {}))
    except ValidationError as e:
        first = e.errors(include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BindingError("InvalidSpec", f"spec.{where}: {first['msg']}") from None


def check_link(obj: Mapping[str, Any], secrets: Mapping[str, SecretInfo], *, edge: bool = False) -> list[JsonDict]:
    """The ``links[]`` entries of one Link (``edge``: of an edge Site, dialing the ``edge`` endpoints), or
    ``BindingError`` saying why it cannot be configured."""
    spec = _spec(obj)
    name = meta(obj).name
    role = EDGE_ROLE if edge else ROLE
    groups: dict[str, tuple[int, Any]] = {}
    for i, endpoint in enumerate(spec.endpoints):
        if endpoint.name == role:
            groups.setdefault(endpoint.group or "", (i, endpoint))
    if not groups:
        raise BindingError("NoEndpoint", f"Link has no endpoint with name {quoted(role)}"
                                         + (" (this site is an edge site: it links to the edge endpoint)" if edge
                                            else ""))
    entries: list[JsonDict] = []
    secret = spec.tls_credentials or ""
    if not secret:
        raise BindingError("TlsCredentialsNotFound", "Link must name its client certificate Secret in "
                                                     "spec.tlsCredentials")
    cost = max(1, spec.cost if spec.cost is not None else 1)
    for group, (i, endpoint) in sorted(groups.items()):
        host = endpoint.host or ""
        if problem := (host_problem(host) if host else "host must not be empty"):
            raise BindingError("InvalidHost", f"spec.endpoints[{i}].host: {problem}")
        port_text = endpoint.port or str(ROLE_PORTS[role])
        port = int(port_text) if port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 else 0
        if not 1 <= port <= 65535:
            raise BindingError("InvalidPort", f"spec.endpoints[{i}].port: {quoted(port_text)} is not a port "
                                              "between 1 and 65535")
        entry: JsonDict = {"name": name if len(groups) == 1 else f"{name}@{group}", "host": host, "port": port,
                           "tlsProfile": secret, "cost": cost}
        if edge:
            entry["role"] = EDGE_ROLE
        entries.append(entry)
    if tls := tls_problem(secret, secrets.get(secret), need_cert=True, need_ca=True):
        raise tls
    return entries


def _operational(state: LinkState, reports: Sequence[LinkReport]) -> None:
    """Operational from the reports of the Link's entries: True when one is up (a connection can use it), else
    the first reason given; the remote site from an up report, else the last known."""
    names = {e["name"] for e in state.entries}
    mine = [r for r in reports if r.name in names]
    up = [r for r in mine if r.up]
    known = up or [r for r in mine if r.remote_site_id]
    if known:
        state.remote_site_id, state.remote_site_name = known[0].remote_site_id, known[0].remote_site_name
    if up:
        state.operational = ready()
    elif mine:
        state.operational = pending(f"Link is not operational: {mine[0].reason or 'down'}"[:300])
    else:
        state.operational = pending(NOT_REPORTED)


def compose_links(links: Sequence[Mapping[str, Any]], secrets: Mapping[str, SecretInfo], *,
                  no_site: str | None = None, edge: bool = False) -> list[LinkState]:
    """The state of each Link of a namespace (``no_site``: the error when it has no active Site; ``edge``: the
    active Site is an edge site)."""
    states = []
    for obj in links:
        state = LinkState(obj, ready())
        states.append(state)
        if no_site is not None:
            state.fail("NoActiveSite", no_site)
            continue
        try:
            state.entries = check_link(obj, secrets, edge=edge)
        except BindingError as e:
            state.fail(e.reason, str(e))
    return states


def observe_links(states: Sequence[LinkState], reports: Sequence[LinkReport]) -> None:
    """Set ``Operational`` and the remote site of each configured Link from its routers' reports."""
    for state in states:
        if state.entries:
            _operational(state, reports)


#: how a router's link reason starts when the remote router refused the link for its identity
REFUSED_BY_REMOTE = "refused by the remote router: "


def link_warnings(states: Sequence[LinkState], reports: Sequence[LinkReport]
                  ) -> list[tuple[Mapping[str, Any], str, str]]:
    """Warning Events for what a router refused or overrode of what came over a Link (an advertisement over the
    limits or too far ahead, one about this router), and for a Link the remote router refused for its identity
    (docs: "Trust"): (Link, reason, message)."""
    out: list[tuple[Mapping[str, Any], str, str]] = []
    for state in states:
        names = {e["name"] for e in state.entries}
        for report in reports:
            if report.name not in names:
                continue
            for warning in report.warnings:
                reason = "AdvertisementOverridden" if "re-advertised" in warning else "AdvertisementRefused"
                out.append((state.obj, reason, warning))
            if not report.up and (report.reason or "").startswith(REFUSED_BY_REMOTE):
                out.append((state.obj, "LinkRefused", str(report.reason)))
    return out


def link_status(previous: Mapping[str, Any] | None, state: LinkState, *, generation: int | None, now: str
                ) -> dict[str, Any]:
    """The status of a Link (``Configured``, ``Operational`` -> ``Ready``, ``remoteSiteId``, ``remoteSiteName``)."""
    status = copy.deepcopy(dict(previous or {}))
    status["conditions"] = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    set_condition(status, CONFIGURED, state.configured, generation, now)
    if state.operational is not None:
        set_condition(status, OPERATIONAL, state.operational, generation, now)
    else:
        status["conditions"] = [c for c in status["conditions"] if c.get("type") != OPERATIONAL]
    set_ready(status, (CONFIGURED, OPERATIONAL), generation, now)
    for key, value in (("remoteSiteId", state.remote_site_id), ("remoteSiteName", state.remote_site_name)):
        if value:
            status[key] = value
        else:
            status.pop(key, None)
    return status
