"""MultiKeyListeners (pure): their checks, the router listener's ``strategy`` and the status's reachable keys.

A MultiKeyListener is exposed exactly like a Listener (a Service port on its host, a router port), so it joins the
Listeners' host+port conflicts; it differs in the router listener's ``strategy`` (priority: failover in order;
weighted: spread by weight over the keys with a reachable connector), which the router applies per connection
(docs/service-network-router.md, "Listeners over several keys").

The CRD's CEL rules (exactly one of ``priority`` and ``weighted``; the strategy kind cannot change) are enforced by the
API server (kubesim too); the first is checked here as well, for API servers that skip CEL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from operator_runtime.objects import JsonDict, mapping, meta

from ..crd.models import ListenerSpec, MultiKeyListenerSpec
from .bindings import BindingError, check_exposure, parse_spec
from .validation import (
    quoted,
    routing_key_problem,
)

__all__ = ["MAX_KEYS", "MultiKey", "check_multi_key_listener", "reachable_status", "router_strategy"]

MAX_KEYS = 256
MAX_WEIGHT = 2**32 - 1


@dataclass(frozen=True)
class MultiKey:
    """A checked MultiKeyListener: its exposure as a Listener's, and its keys."""

    listener: ListenerSpec              # host, port, TLS; routingKey = the first key (labels the router's metrics)
    priority: tuple[str, ...] | None
    weights: Mapping[str, int] | None
    require_client_cert: bool

    @property
    def keys(self) -> tuple[str, ...]:
        return self.priority if self.priority is not None else tuple(sorted(self.weights or {}))


def check_multi_key_listener(obj: Mapping[str, Any]) -> MultiKey:
    spec = parse_spec(MultiKeyListenerSpec, obj)
    strategy = spec.strategy
    if (strategy.priority is None) == (strategy.weighted is None):
        raise BindingError("InvalidStrategy", "exactly one of the fields in [priority weighted] must be set")
    priority = tuple(strategy.priority.routing_keys) if strategy.priority is not None else None
    weights = dict(strategy.weighted.routing_keys) if strategy.weighted is not None else None
    keys = list(priority) if priority is not None else list(weights or {})
    if not 1 <= len(keys) <= MAX_KEYS:
        raise BindingError("InvalidStrategy", f"the strategy must name 1 to {MAX_KEYS} routing keys")
    if len(set(keys)) != len(keys):
        raise BindingError("InvalidStrategy", "a routing key is named twice in the strategy")
    for key in keys:
        if problem := routing_key_problem(key):
            raise BindingError("InvalidRoutingKey", problem)
    for key, weight in (weights or {}).items():
        if not 0 <= weight <= MAX_WEIGHT:
            raise BindingError("InvalidStrategy", f"weight {weight} of routing key {quoted(key)} is not between 0 "
                                                  f"and {MAX_WEIGHT}")
    check_exposure("MultiKeyListener", meta(obj).name, spec.host, spec.port)
    if spec.require_client_cert and not spec.tls_credentials:
        raise BindingError("InvalidSpec", "requireClientCert needs tlsCredentials (with the clients' CA)")
    listener = ListenerSpec(routing_key=keys[0], host=spec.host, port=spec.port,
                            tls_credentials=spec.tls_credentials, observer=spec.observer)
    return MultiKey(listener, priority, weights, bool(spec.require_client_cert))


def router_strategy(multi: MultiKey) -> JsonDict:
    """The router listener's ``strategy``."""
    if multi.priority is not None:
        return {"priority": list(multi.priority)}
    return {"weighted": [{"key": k, "weight": w} for k, w in sorted((multi.weights or {}).items())]}


def reachable_status(obj: Mapping[str, Any], reachable: Sequence[str]) -> JsonDict:
    """``status.strategy`` for the keys that have a reachable connector (in priority order, or with weights)."""
    strategy = mapping(obj, "spec", "strategy")
    weighted = mapping(strategy, "weighted", "routingKeys")
    if "weighted" in strategy:
        return {"weighted": {"routingKeysReachable": {k: weighted[k] for k in reachable if k in weighted}}}
    return {"priority": {"routingKeysReachable": list(reachable)}}
