"""One namespace's site, composed (pure): from the Sites, Listeners, Connectors, Pods, Services and Secrets the
controller's caches hold, everything the namespace should look like:

- which Site is active (the owner of the existing router ConfigMap, else the oldest; upstream keeps the first it
  saw, which the ConfigMap's owner is after a restart), and the others' error;
- the router objects and the router ConfigMap (the router document and the port allocations);
- the listener Services (ours), and ours that no Listener exposes any more (stale: to delete);
- per Listener and Connector: its ``Configured`` state (ready, or an error with upstream's message), whether it is
  ``Matched`` (from the network view), its Service host, its selected Pods;
- per Link: its ``links[]`` entries and status (:mod:`.links`);
- the site's record for the network view.

The controller executes the plan (writes only what differs from its caches), then turns the binding states into
statuses with :mod:`.status` (after amending them with the failures of its writes).

Order is deterministic: Listeners and Connectors are taken oldest first (creation time, then name), which makes
"first wins" for a duplicate host and port stable across restarts together with the live Service (the Listener
that holds the Service port keeps it).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operator_runtime.kinds import ResourceInfo
from operator_runtime.objects import JsonDict, items, mapping, meta

from ..constants import (
    LABEL_ROUTER_CONFIG,
    PORTS_KEY,
    ROUTER_CONFIG_KEY,
    ROUTER_METRICS_PORT,
    ROUTER_RESERVED_PORTS,
)
from ..crd.models import ConnectorSpec, ListenerSpec
from ..router.config import CONFIG_VERSION, parse_config
from .access import AccessInputs, AccessPlan, compose_access, default_issuer, is_edge
from .attached import BINDING, compose_attached
from .bindings import (
    Binding,
    BindingError,
    SecretInfo,
    check_connector,
    check_listener,
    connector_entities,
    pod_targets,
    tls_problem,
)
from .ha import ha_router_objects
from .identities import IdentityRecord, peers
from .links import LinkState, compose_links, link_warnings, observe_links
from .multikey import MultiKey, check_multi_key_listener, router_strategy
from .netstatus import TargetFailure, network_status_config_map
from .network import NetworkSnapshot, NetworkView, SiteRecord, site_record
from .ports import allocate
from .resources import RouterOptions, config_map, router_objects
from .selector import LabelSelector, parse_selector
from .services import Exposure, is_controlled, is_listener_service, service_bodies
from .status import ConditionState, error, pending, ready
from .templates import DEPLOYMENT_NAME, Template, with_extra
from .validation import dns1035_label_problem, quoted

__all__ = ["Binding", "SiteInputs", "SitePlan", "SiteState", "compose_site", "recovered_ports"]

#: Services one Listener with ``exposePodsByName`` may get (one per Pod of the routing key, wherever the Pods are)
MAX_PODS_BY_NAME = 256

NO_ACTIVE_SITE = "No active site in namespace"
NO_MATCHES = "No matches for selector"
LINK_ACCESS_VALUES = ("", "none", "default", "route", "loadbalancer", "nodeport", "ingress", "ingress-nginx",
                      "contour-http-proxy", "gateway", "local")
PodSelect = Callable[[str, LabelSelector], Sequence[Mapping[str, Any]]]


@dataclass(frozen=True)
class SiteInputs:
    """What the caches hold for one namespace."""

    namespace: str
    sites: Sequence[Mapping[str, Any]]
    listeners: Sequence[Mapping[str, Any]]
    connectors: Sequence[Mapping[str, Any]]
    services: Mapping[str, Mapping[str, Any]]        # Services of the namespace by name
    secrets: Mapping[str, SecretInfo]                  # Secrets of the namespace by name
    router_config_map: Mapping[str, Any] | None
    router_pods: Sequence[Mapping[str, Any]]
    select_pods: PodSelect                             # (namespace, selector) -> Pods of the namespace it selects
    view: NetworkView
    router: RouterOptions = field(default_factory=RouterOptions)
    version: str = ""
    controller: Mapping[str, str] = field(default_factory=dict)   # name, namespace, version (Site status)
    links: Sequence[Mapping[str, Any]] = ()
    router_accesses: Sequence[Mapping[str, Any]] = ()  # RouterAccess objects of the namespace
    secret_objects: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)   # Secret views by name
    attached_bindings: Sequence[Mapping[str, Any]] = ()    # AttachedConnectorBindings of the namespace
    attached_connectors: Sequence[Mapping[str, Any]] = ()  # AttachedConnectors naming it as spec.siteNamespace
    multi_key_listeners: Sequence[Mapping[str, Any]] = ()
    #: listeners the site's routers report bound (None: not reported, e.g. no router status yet); Service name -> the port names its EndpointSlices route to a ready endpoint (None: not checked)
    listening: frozenset[str] | None = None
    #: connector targets the site's routers could not connect to at their last tries, by (Connector, target name)
    unreachable: Mapping[tuple[str, str], TargetFailure] = field(default_factory=dict)
    ready_ports: Mapping[str, frozenset[str]] | None = None
    #: the link identities the site issued or bound (docs: "Trust"), by identity
    identities: Mapping[str, IdentityRecord] = field(default_factory=dict)
    #: key fingerprints of the client certificates its Certificates issued (static links' credentials)
    credentials: Sequence[str] = ()
    #: the selectors of the router Deployments that exist, by name (immutable: kept as they are)
    router_selectors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: the label templates that apply in the namespace, in order (:mod:`.templates`)
    templates: tuple[Template, ...] = ()


@dataclass
class SiteState:
    """The state of one Site."""

    obj: Mapping[str, Any]
    configured: ConditionState
    running: ConditionState | None = None
    resolved: ConditionState | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SitePlan:
    namespace: str
    active: Mapping[str, Any] | None
    sites: list[SiteState]
    router_objects: list[tuple[ResourceInfo, JsonDict]]
    config_map: tuple[ResourceInfo, JsonDict] | None
    services: dict[str, JsonDict]                 # desired Services (ours), by name
    stale_services: list[Mapping[str, Any]]       # Services of ours no Listener exposes
    bindings: list[Binding]
    record: SiteRecord | None
    notes: list[tuple[Mapping[str, Any], str, str]] = field(default_factory=list)   # (object, reason, note) Events
    links: list[LinkState] = field(default_factory=list)
    access: AccessPlan | None = None              # router access: CA, RouterAccess, Service, certificates


def _age(obj: Mapping[str, Any]) -> tuple[str, str]:
    return (str(mapping(obj, "metadata").get("creationTimestamp") or ""), meta(obj).name)


def _live(objects: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted((o for o in objects if not meta(o).deletion_timestamp), key=_age)


def _router_config(body: Mapping[str, Any]) -> bool:
    """A router's ConfigMap (its document): what upstream names a router config (not the network status)."""
    return body.get("kind") == "ConfigMap" and meta(body).labels.get(LABEL_ROUTER_CONFIG) == ""


def recovered_ports(config_map_obj: Mapping[str, Any] | None) -> dict[str, int]:
    """Router ports by entity name, from the router ConfigMap (``ports.json``, else the document's listeners)."""
    data = mapping(config_map_obj, "data")
    for key, read in ((PORTS_KEY, lambda d: d), (ROUTER_CONFIG_KEY, lambda d: {
            str(x.get("name")): x.get("port") for x in d.get("listeners") or [] if isinstance(x, dict)})):
        text = data.get(key)
        if not isinstance(text, str):
            continue
        try:
            parsed = json.loads(text)
            ports = read(parsed) if isinstance(parsed, dict) else {}
        except (ValueError, AttributeError):
            continue
        result = {str(k): v for k, v in ports.items() if isinstance(v, int) and not isinstance(v, bool)}
        if result:
            return result
    return {}


def _active_site(sites: list[Mapping[str, Any]], config_map_obj: Mapping[str, Any] | None
                 ) -> Mapping[str, Any] | None:
    owner_uids = {ref.uid for ref in meta(config_map_obj).owner_references if ref.kind == "Site"}
    for site in sites:
        if meta(site).uid in owner_uids:
            return site
    return sites[0] if sites else None


def _running(router_pods: Sequence[Mapping[str, Any]]) -> ConditionState:
    """Upstream's Running condition: ready when a router Pod is Running and Ready, else what a Pod waits for."""
    state = pending("No router pod is ready")
    for pod in sorted(router_pods, key=lambda p: meta(p).name):
        if meta(pod).deletion_timestamp:
            continue
        conditions = [c for c in items(pod, "status", "conditions") if isinstance(c, Mapping)]
        if mapping(pod, "status").get("phase") == "Running" and any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            return ready()
        message = next((str(c.get("message")) for c in conditions if c.get("status") == "False" and c.get("message")),
                       f"Pod {meta(pod).name} not ready")
        state = pending(message)
    return state


@dataclass
class _ListenerWork:
    binding: Binding
    spec: ListenerSpec
    multi: MultiKey | None = None          # a MultiKeyListener's keys


def _carrying(name: str, host: str, inputs: SiteInputs) -> ConditionState:
    """Whether a client of the Listener's Service gets through now: a router listens on its port, and the Service's
    EndpointSlices route the port to a ready router Pod (kube-proxy programs from them). Until then the Listener is
    not Ready, so that a client that waits for Ready is not refused. With both missing, the Service is named: a
    crashed router's Pod loses its endpoints before its new router reports what it listens on, so the Listener keeps
    one message through the restart (not one more status write per Listener of the site while nothing changes for
    its clients)."""
    if inputs.ready_ports is not None and name not in inputs.ready_ports.get(host, frozenset()):
        return pending(f"waiting for Service {host} to route to a ready router Pod")
    if inputs.listening is not None and name not in inputs.listening:
        return pending("waiting for the router to listen")
    return ready()


def _unreachable(name: str, targets: Sequence[Mapping[str, Any]],
                 failures: Mapping[tuple[str, str], TargetFailure]) -> str | None:
    """Why a Connector reaches none of its targets (the routers' last dials to each failed), or None."""
    failed = [failures.get((name, str(t["name"]))) for t in targets]
    if not failed or any(f is None for f in failed):
        return None
    first = failed[0]
    assert first is not None
    attempts = "attempt" if first.failures == 1 else f"{first.failures} attempts"
    where = f"{first.host[:100]}:{first.port}"
    if len(failed) == 1:
        return f"cannot connect to {where}: {first.error} (the last {attempts} failed)"
    return f"cannot connect to any of its {len(failed)} targets: {first.target[:100]} ({where}): {first.error}"


def _lead_order(group: list[_ListenerWork], service: Mapping[str, Any] | None, port: int) -> list[_ListenerWork]:
    """The Listener keeping a host+port first: the one the live Service has the port for, then those not in
    Error (skupper#2379), then the oldest."""
    holder = next((str(p.get("name")) for p in items(service, "spec", "ports")
                   if isinstance(p, Mapping) and p.get("port") == port), None) if service is not None else None

    def key(work: _ListenerWork) -> tuple[int, int, tuple[str, str]]:
        in_error = mapping(work.binding.obj, "status").get("status") == "Error"
        return (0 if work.binding.name == holder else 1, 1 if in_error else 0, _age(work.binding.obj))

    return sorted(group, key=key)


def compose_site(inputs: SiteInputs) -> SitePlan:
    """The plan for one namespace (see the module docstring)."""
    namespace = inputs.namespace
    sites = _live(inputs.sites)
    active = _active_site(sites, inputs.router_config_map)
    listeners = _live(inputs.listeners)
    multi_key_listeners = _live(inputs.multi_key_listeners)
    connectors = _live(inputs.connectors)
    services = inputs.services
    stale = [s for name, s in sorted(services.items()) if is_listener_service(s)]

    if active is None:
        bindings = [Binding("Listener", o, error(NO_ACTIVE_SITE), "NoActiveSite") for o in listeners] + [
            Binding("Connector", o, error(NO_ACTIVE_SITE), "NoActiveSite") for o in connectors] + [
            Binding("MultiKeyListener", o, error(NO_ACTIVE_SITE), "NoActiveSite") for o in multi_key_listeners]
        bindings += compose_attached(namespace, inputs.attached_bindings, inputs.attached_connectors,
                                     site_active=False, secrets=inputs.secrets, select_pods=inputs.select_pods).states
        return SitePlan(namespace, None, [], [], None, {}, stale, bindings, None,
                        links=compose_links(_live(inputs.links), inputs.secrets, no_site=NO_ACTIVE_SITE))

    active_name = meta(active).name
    site_states = [SiteState(s, error(f"An active site already exists in the namespace ({active_name})"))
                   for s in sites if s is not active]
    notes: list[tuple[Mapping[str, Any], str, str]] = []
    profiles: dict[str, JsonDict] = {}
    access = compose_access(AccessInputs(active, inputs.router_accesses, inputs.secret_objects, services,
                                         inputs.router_pods))
    for access_profile in access.profiles:
        profiles[str(access_profile["name"])] = access_profile

    def use_profile(secret: str) -> str:
        profiles.setdefault(secret, {"name": secret, "secret": {"name": secret}})
        return secret

    # ---- Connectors -> router connectors ------------------------------------------------------------------
    connector_docs: list[JsonDict] = []
    connector_bindings: list[Binding] = []
    for obj in connectors:
        binding = Binding("Connector", obj, ready())
        connector_bindings.append(binding)
        try:
            cspec: ConnectorSpec = check_connector(obj)
        except BindingError as e:
            binding.fail(e.reason, str(e))
            continue
        if cspec.selector:
            selected = inputs.select_pods(namespace, parse_selector(cspec.selector))
            targets = pod_targets(selected, bool(cspec.include_not_ready_pods))
            binding.selected_pods = [{"name": t["name"], "ip": t["host"]} for t in targets]
            if not targets:
                binding.fail("NoMatchingPods", NO_MATCHES)
                continue
        else:
            targets = [{"host": str(cspec.host), "name": str(cspec.host)}]
        profile = None
        if cspec.tls_credentials:
            problem = tls_problem(cspec.tls_credentials, inputs.secrets.get(cspec.tls_credentials),
                                  need_cert=bool(cspec.use_client_cert), need_ca=True)
            if problem is not None:
                binding.fail(problem.reason, str(problem))
                continue
            profile = use_profile(cspec.tls_credentials)
        connector_docs += connector_entities(binding.name, cspec, targets, profile)
        if unreachable := _unreachable(binding.name, targets, inputs.unreachable):
            binding.fail("TargetUnreachable", unreachable)   # still configured: the next connection tries again

    attached = compose_attached(namespace, inputs.attached_bindings, inputs.attached_connectors, site_active=True,
                                secrets=inputs.secrets, select_pods=inputs.select_pods)
    connector_docs += attached.connectors
    for secret in attached.profiles:
        use_profile(secret)

    # ---- Links -> router links -------------------------------------------------------------------------------
    link_states = compose_links(_live(inputs.links), inputs.secrets, edge=is_edge(active))
    link_docs = [entry for state in link_states for entry in state.entries]
    for entry in link_docs:
        use_profile(str(entry["tlsProfile"]))

    site_meta = meta(active)

    def record_of(document: Mapping[str, Any]) -> SiteRecord:
        return site_record(site_meta.uid, site_meta.name, namespace, inputs.version, document)

    snapshot: NetworkSnapshot = inputs.view.snapshot(namespace, record_of({"connectors": connector_docs}))

    # ---- Listeners: checks, conflicts, ports, Services -----------------------------------------------------
    listener_bindings: list[Binding] = []
    candidates: dict[tuple[str, int], list[_ListenerWork]] = {}
    listener_names = {meta(o).name for o in listeners}
    for kind, obj in [("Listener", o) for o in listeners] + [("MultiKeyListener", o) for o in multi_key_listeners]:
        binding = Binding(kind, obj, ready())
        listener_bindings.append(binding)
        multi: MultiKey | None = None
        try:
            if kind == "Listener":
                lspec = check_listener(obj)
            else:
                multi = check_multi_key_listener(obj)
                lspec = multi.listener
        except BindingError as e:
            binding.fail(e.reason, str(e))
            continue
        if multi is not None and binding.name in listener_names:
            binding.fail("NameConflict", f"Listener {binding.name} already exists in namespace (a MultiKeyListener's "
                                         "Service port and router listener are named after it)")
            continue
        existing = services.get(lspec.host)
        if existing is not None and not is_controlled(existing):
            binding.fail("ServiceConflict", f"Service {lspec.host} already exists in namespace")
            continue
        candidates.setdefault((lspec.host, lspec.port), []).append(_ListenerWork(binding, lspec, multi))

    exposed: list[_ListenerWork] = []
    for (host, port), group in candidates.items():
        ordered = _lead_order(group, services.get(host), port)
        exposed.append(ordered[0])
        for loser in ordered[1:]:
            loser.binding.fail("DuplicateHostPort", f"{ordered[0].binding.kind} {ordered[0].binding.name} with "
                                                    f"host {host} and "
                                                    f"port {port} already exists in namespace")
    exposed.sort(key=lambda w: _age(w.binding.obj))
    hosts = {w.spec.host for w in exposed}

    # entity name -> (work, routing key, Service name, per-Pod target or None)
    entities: list[tuple[str, _ListenerWork, str, str, str | None]] = []
    claimed: set[str] = set()
    for work in exposed:
        entities.append((work.binding.name, work, work.spec.routing_key, work.spec.host, None))
        if work.spec.expose_pods_by_name:
            pods = snapshot.pod_targets(work.spec.routing_key)
            if len(pods) > MAX_PODS_BY_NAME:
                # per-Pod keys come from other sites' advertisements: what they make this site create is bounded
                notes.append((work.binding.obj, "PodsNotExposed", f"{len(pods) - MAX_PODS_BY_NAME} of "
                              f"{len(pods)} Pods of routing key {quoted(work.spec.routing_key)} are not exposed "
                              f"by name: at most {MAX_PODS_BY_NAME} per Listener"))
                pods = pods[:MAX_PODS_BY_NAME]
            for target in pods:
                name_problem = dns1035_label_problem(target)
                other = services.get(target)
                if (name_problem or target in hosts or target in claimed
                        or (other is not None and not is_controlled(other))):
                    why = (f"cannot name a Service: {name_problem}" if name_problem else
                           "is the host of a Listener" if target in hosts else
                           "is exposed by another Listener" if target in claimed else
                           "is the name of a Service the controller does not own")
                    notes.append((work.binding.obj, "PodNotExposed", f"Pod {quoted(target)} of routing key "
                                  f"{quoted(work.spec.routing_key)} is not exposed by name: {quoted(target)} {why}"))
                    continue
                claimed.add(target)
                entities.append((f"{work.binding.name}@{target}", work, f"{work.spec.routing_key}.{target}",
                                 target, target))

    previous_ports = recovered_ports(inputs.router_config_map)
    ports, _ = allocate(previous_ports, [e[0] for e in entities], ROUTER_RESERVED_PORTS)
    listener_docs: list[JsonDict] = []
    exposures: list[Exposure] = []
    for entity, work, key, service_name, pod in entities:
        if entity not in ports:
            if pod is None:
                work.binding.fail("PortsExhausted", "no free router port is left")
            continue
        if pod is None:
            work.binding.host = service_name
        exposures.append(Exposure(service_name, work.binding.name, work.spec.port, ports[entity]))
        profile = None
        authenticate = bool(work.multi and work.multi.require_client_cert)
        if work.spec.tls_credentials:
            problem = tls_problem(work.spec.tls_credentials, inputs.secrets.get(work.spec.tls_credentials),
                                  need_cert=True, need_ca=authenticate)
            if problem is not None:
                if pod is None:
                    work.binding.fail(problem.reason, str(problem))
                continue          # the entity is withheld until the Secret is usable; its Service and port stay
            profile = use_profile(work.spec.tls_credentials)
        listener_doc: JsonDict = {"name": entity, "routingKey": key, "host": "", "port": ports[entity],
                                  "tlsProfile": profile, "observer": work.spec.observer}
        if work.multi is not None:
            listener_doc["strategy"] = router_strategy(work.multi)
            listener_doc["authenticatePeer"] = authenticate
        listener_docs.append(listener_doc)

    document = parse_config(json.dumps({
        "version": CONFIG_VERSION,
        "site": {"id": site_meta.uid, "name": site_meta.name, "namespace": namespace},
        "router": {"metrics": {"host": "", "port": ROUTER_METRICS_PORT},
                   "reservedPorts": [p for p in ROUTER_RESERVED_PORTS if p != ROUTER_METRICS_PORT]},
        "tlsProfiles": [profiles[k] for k in sorted(profiles)],
        "listeners": sorted(listener_docs, key=lambda d: d["name"]),
        "connectors": sorted(connector_docs, key=lambda d: d["name"]),
        "links": sorted(link_docs, key=lambda d: d["name"]),
        "routerAccess": access.document_access,
        "peers": peers(inputs.identities.values(), inputs.credentials),
    }))   # the router's own checks: a failure here is a bug of this module (raised, never sent)
    document_text = document.to_json()
    document_dict = json.loads(document_text)
    observe_links(link_states, snapshot.links)
    notes.extend(link_warnings(link_states, snapshot.links))
    record = dataclasses.replace(record_of(document_dict),
                                 links=tuple(r for state in link_states for r in state.records()))
    snapshot = inputs.view.snapshot(namespace, record)
    for binding in listener_bindings:
        if binding.kind == "MultiKeyListener":
            keys = [str(k) for k in items(binding.obj, "spec", "strategy", "priority", "routingKeys")] or sorted(
                str(k) for k in mapping(binding.obj, "spec", "strategy", "weighted", "routingKeys"))
            binding.reachable = [k for k in keys if snapshot.has_connector(k)]
            binding.matched = bool(binding.reachable)
        else:
            binding.matched = snapshot.has_connector(str(mapping(binding.obj, "spec").get("routingKey") or ""))
    for binding in connector_bindings + [b for b in attached.states if b.kind == BINDING]:
        binding.matched = snapshot.has_listener(str(mapping(binding.obj, "spec").get("routingKey") or ""))
    for binding in listener_bindings:
        if binding.matched and binding.host is not None and binding.configured.status == "True":
            binding.configured = _carrying(binding.name, binding.host, inputs)

    desired_services = service_bodies(active, exposures)
    stale = [s for s in stale if meta(s).name not in desired_services]
    ports_text = json.dumps({e: ports[e] for e in sorted(ports)}, indent=2, sort_keys=True)

    link_access = str(mapping(active, "spec").get("linkAccess") or "")
    configured = ready()
    resolved = None
    if link_access not in LINK_ACCESS_VALUES:
        configured = error(f"Unsupported value for LinkAccess: {quoted(link_access)}")
    else:
        resolved = access.resolved
    network = [site.as_status() for site in snapshot.sites]
    site_states.insert(0, SiteState(active, configured, _running(inputs.router_pods), resolved, extra={
        "sitesInNetwork": len(network), "network": network,
        "controller": dict(inputs.controller) or None,
        # the link access endpoints, as upstream's CLI reads them (token issue, link generate)
        "endpoints": [dict(e) for e in access.endpoints] or None,
        # the CA that signs this site's link credentials, as upstream publishes it (link generate's Certificate)
        "defaultIssuer": default_issuer(active)}))
    secret_names = [p.secret.name for p in document.tls_profiles if p.secret is not None]
    objects = router_objects(active, inputs.router, secret_names, inputs.router_selectors)
    objects.insert(len(objects) - 1, network_status_config_map(active))    # before the Deployment: routers write it
    objects += ha_router_objects(active, inputs.router, document_text, ports_text, inputs.router_selectors)
    templates = inputs.templates
    if templates:     # upstream's objects get what label templates give them
        objects = [(info, with_extra(body, templates, name=DEPLOYMENT_NAME) if info.kind == "Deployment"
                    else with_extra(body, templates) if _router_config(body) else body) for info, body in objects]
        desired_services = {name: with_extra(body, templates) for name, body in desired_services.items()}
        access.services = [with_extra(body, templates) for body in access.services]
        access.certificates = [with_extra(body, templates) for body in access.certificates]
    router_config = config_map(active, document_text, ports_text)
    return SitePlan(namespace, active, site_states, objects,
                    (router_config[0], with_extra(router_config[1], templates)), desired_services, stale,
                    listener_bindings + connector_bindings + attached.states, record, notes, links=link_states, access=access)
