"""AttachedConnectors and their AttachedConnectorBindings -> router connectors (pure).

An AttachedConnector lives in a workload's namespace and names the site's namespace (``spec.siteNamespace``); the
AttachedConnectorBinding of the same name in the site's namespace names the workload's namespace
(``spec.connectorNamespace``) and gives the routing key. Both sides consent: a binding alone cannot reach into a
namespace whose owner declared nothing, and an AttachedConnector alone cannot join a network the site's owner did
not bind it to. A pair becomes one router connector (and one per Pod with the binding's ``exposePodsByName``),
its entity named ``<connectorNamespace>/<name>``: ``/`` cannot occur in an object name, so it never collides with
a Connector's entity.

The AttachedConnector's Pods are selected in its own namespace; its ``tlsCredentials`` names a Secret of the site's
namespace, as upstream documents.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operator_runtime.objects import JsonDict, mapping, meta

from ..crd.models import AttachedConnectorBindingSpec, AttachedConnectorSpec, ConnectorSpec
from .bindings import (
    Binding,
    BindingError,
    SecretInfo,
    check_connector,
    connector_entities,
    pod_targets,
    tls_problem,
)
from .selector import LabelSelector, parse_selector
from .status import pending, ready
from .validation import quoted, routing_key_problem

__all__ = ["ATTACHED", "BINDING", "AttachedPlan", "compose_attached", "entity_name"]

ATTACHED = "AttachedConnector"
BINDING = "AttachedConnectorBinding"
NO_MATCHES = "No matches for selector"
PodSelect = Callable[[str, LabelSelector], Sequence[Mapping[str, Any]]]


@dataclass
class AttachedPlan:
    connectors: list[JsonDict] = field(default_factory=list)       # router document connectors
    states: list[Binding] = field(default_factory=list)           # bindings first, then attached connectors
    profiles: list[str] = field(default_factory=list)             # TLS profiles (Secret names) used


def entity_name(connector_namespace: str, name: str) -> str:
    return f"{connector_namespace}/{name}"


def _age(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(mapping(obj, "metadata").get("creationTimestamp") or ""), meta(obj).namespace, meta(obj).name)


def _as_connector(binding: AttachedConnectorBindingSpec, attached: AttachedConnectorSpec, name: str
                  ) -> ConnectorSpec:
    """The Connector a bound pair amounts to (checked by the Connector's own rules)."""
    spec: JsonDict = {
        "routingKey": binding.routing_key, "port": attached.port, "selector": attached.selector,
        "tlsCredentials": attached.tls_credentials, "useClientCert": attached.use_client_cert,
        "type": attached.type, "includeNotReadyPods": attached.include_not_ready_pods,
        "exposePodsByName": binding.expose_pods_by_name}
    return check_connector({"metadata": {"name": name},
                            "spec": {k: v for k, v in spec.items() if v is not None}})


def _parse_binding(obj: Mapping[str, Any]) -> AttachedConnectorBindingSpec:
    try:
        spec = AttachedConnectorBindingSpec.model_validate(dict(mapping(obj, "spec")))
    except ValueError:
        raise BindingError("InvalidSpec", "spec.connectorNamespace and spec.routingKey are required") from None
    if problem := routing_key_problem(spec.routing_key):
        raise BindingError("InvalidRoutingKey", problem)
    return spec


def _parse_attached(obj: Mapping[str, Any]) -> AttachedConnectorSpec:
    try:
        return AttachedConnectorSpec.model_validate(dict(mapping(obj, "spec")))
    except ValueError:
        raise BindingError("InvalidSpec", "spec.siteNamespace, spec.port and spec.selector are required") from None


def compose_attached(namespace: str, bindings: Sequence[Mapping[str, Any]], attached: Sequence[Mapping[str, Any]],
                     *, site_active: bool, secrets: Mapping[str, SecretInfo], select_pods: PodSelect
                     ) -> AttachedPlan:
    """The site namespace ``namespace``'s bindings and the AttachedConnectors naming it as their site."""
    plan = AttachedPlan()
    live = sorted((o for o in attached if not meta(o).deletion_timestamp
                   and mapping(o, "spec").get("siteNamespace") == namespace), key=_age)
    by_key = {(meta(o).namespace, meta(o).name): o for o in live}
    paired: set[tuple[str, str]] = set()
    attached_states: list[Binding] = []
    for obj in sorted((o for o in bindings if not meta(o).deletion_timestamp), key=_age):
        state = Binding(BINDING, obj, ready())
        plan.states.append(state)
        name = meta(obj).name
        if not site_active:
            state.fail("NoActiveSite", "No active site in namespace")
            continue
        try:
            bspec = _parse_binding(obj)
        except BindingError as e:
            state.fail(e.reason, str(e))
            continue
        key = (bspec.connector_namespace, name)
        peer = by_key.get(key)
        if peer is None:
            state.configured = pending(f"No AttachedConnector {quoted(name)} in namespace "
                                       f"{quoted(bspec.connector_namespace)}")
            continue
        paired.add(key)
        peer_state = Binding(ATTACHED, peer, ready())
        attached_states.append(peer_state)
        try:
            aspec = _parse_attached(peer)
            cspec = _as_connector(bspec, aspec, name)
        except BindingError as e:
            peer_state.fail(e.reason, str(e))
            state.fail(e.reason, f"AttachedConnector {bspec.connector_namespace}/{name}: {e}")
            continue
        selected = select_pods(bspec.connector_namespace, parse_selector(aspec.selector))
        targets = pod_targets(selected, bool(aspec.include_not_ready_pods))
        peer_state.selected_pods = [{"name": str(t["name"]), "ip": str(t["host"])} for t in targets]
        if not targets:
            peer_state.fail("NoMatchingPods", NO_MATCHES)
            state.fail("NoMatchingPods", f"AttachedConnector {bspec.connector_namespace}/{name}: {NO_MATCHES}")
            continue
        profile = None
        if aspec.tls_credentials:
            problem = tls_problem(aspec.tls_credentials, secrets.get(aspec.tls_credentials),
                                  need_cert=bool(aspec.use_client_cert), need_ca=True)
            if problem is not None:
                peer_state.fail(problem.reason, f"{problem} (in the site's namespace {quoted(namespace)})")
                state.fail(problem.reason, str(problem))
                continue
            profile = aspec.tls_credentials
            plan.profiles.append(profile)
        plan.connectors += connector_entities(entity_name(bspec.connector_namespace, name), cspec, targets, profile)
    for obj in live:
        key = (meta(obj).namespace, meta(obj).name)
        if key in paired:
            continue
        state = Binding(ATTACHED, obj, pending(f"No AttachedConnectorBinding {quoted(key[1])} in namespace "
                                                     f"{quoted(namespace)} names namespace {quoted(key[0])}"))
        if not site_active:
            state.fail("NoActiveSite", f"No active site in namespace {quoted(namespace)}")
        attached_states.append(state)
    plan.states += attached_states
    return plan
