"""The Listener status the controller writes, composed without I/O (behaviour.md "Status" and "Ready condition").

:func:`compose_status` turns a reconcile's outcome (the applied Service's name, the class's service type, the
computed addresses) into ``serviceName``, ``ingressAddresses``, ``nodePorts`` (NodePort classes only), one ``Ready``
condition saying why there are or are not addresses, and ``observedGeneration``. :func:`failure_status` records a
failed reconcile in the condition while keeping the addresses already published. The ``lastTransitionTime`` of the
condition only moves when its status changes, so a reconcile that changes nothing composes exactly the status the
Listener already has (and writes nothing, see :func:`status_is_current`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from listener_operator.addresses import ListenerAddresses
from listener_operator.crd.models import ServiceType
from operator_runtime.objects import JsonDict, items, mapping

__all__ = [
    "ADDRESS_FIELDS",
    "MESSAGE_LIMIT",
    "READY",
    "STALE_NOTE",
    "STATUS_FIELDS",
    "compose_status",
    "failure_status",
    "is_ready",
    "ready_condition",
    "status_is_current",
]

READY = "Ready"
#: The status fields this controller owns, compared to decide whether a write is needed.
STATUS_FIELDS = ("serviceName", "ingressAddresses", "nodePorts", "conditions", "observedGeneration")
#: What a failure leaves as it was.
ADDRESS_FIELDS = ("serviceName", "ingressAddresses", "nodePorts")
#: metav1.Condition allows messages of at most 32768 characters.
MESSAGE_LIMIT = 32768


def ready_condition(state: str, reason: str, message: str, *, generation: int | None,
                    previous: Mapping[str, Any], now: str) -> JsonDict:
    """The ``Ready`` condition; ``previous`` is the status the Listener has now (or is about to have), whose
    ``lastTransitionTime`` is kept when the condition's status does not change."""
    before = next((c for c in items(previous, "conditions") if isinstance(c, Mapping) and c.get("type") == READY),
                  None)
    transition = before.get("lastTransitionTime") if before and before.get("status") == state else None
    condition: JsonDict = {"type": READY, "status": state, "reason": reason, "message": message[:MESSAGE_LIMIT],
                           "lastTransitionTime": transition or now}
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def no_backing_nodes_message(service_name: str, unready_endpoints: int, selector: Mapping[str, Any]) -> str:
    """Why a NodePort Listener has no node: its selected Pods are not ready, or none is selected (a Pod that
    mounts the Listener but lacks its ``extraPodSelectorLabels`` is not)."""
    if unready_endpoints:
        return (f"{unready_endpoints} Pod(s) selected by Service {service_name} are not ready; a node backs this "
                "Listener once a ready Pod runs on it, or a volume is pinned to it")
    labels = ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))
    return (f"no Pod selected by Service {service_name} ({labels or 'no selector'}) runs on a node, and no "
            "volume is pinned to a node; Pods that mount this Listener without carrying its "
            "extraPodSelectorLabels are not selected")


def compose_status(*, service_name: str, service_type: ServiceType, addresses: ListenerAddresses,
                   generation: int | None, previous: Mapping[str, Any], now: str,
                   selector: Mapping[str, Any] | None = None) -> JsonDict:
    """The status after a successful reconcile; ``selector``: the Service's Pod selector (for the message when no
    node backs a NodePort Listener)."""
    status: JsonDict = {"serviceName": service_name, "ingressAddresses": addresses.ingress_addresses}
    if service_type is ServiceType.NODE_PORT:
        status["nodePorts"] = addresses.node_ports or {}
    skipped = addresses.missing_nodes + addresses.nodes_without_address
    if addresses.ingress_addresses:
        state, reason = "True", "AddressesPublished"
        message = f"{len(addresses.ingress_addresses)} address(es) published"
    elif service_type is ServiceType.LOAD_BALANCER:
        state, reason = "False", "AwaitingLoadBalancer"
        message = f"waiting for a load balancer to report an address for Service {service_name}"
    elif service_type is ServiceType.CLUSTER_IP:
        state, reason = "False", "AwaitingClusterIP"
        message = f"Service {service_name} has no cluster IP yet"
    else:
        state, reason = "False", "NoBackingNodes"
        message = no_backing_nodes_message(service_name, addresses.unready_endpoints, selector or {})
    if addresses.missing_nodes:
        reason = "NodesMissing"
        message += "; skipped missing node(s): " + ", ".join(addresses.missing_nodes)
    if addresses.nodes_without_address:
        message += "; skipped node(s) without an address: " + ", ".join(addresses.nodes_without_address)
    if skipped and not addresses.ingress_addresses:
        state = "False"
    status["conditions"] = [ready_condition(state, reason, message, generation=generation, previous=previous,
                                            now=now)]
    status["observedGeneration"] = generation
    return status


#: Appended to a failure's message while addresses of an earlier reconcile are still published.
STALE_NOTE = ("; the published addresses are kept from the last successful reconcile and may be stale (the Service "
              "stays as it was last applied)")


def failure_status(reason: str, message: str, *, generation: int | None, previous: Mapping[str, Any],
                   now: str) -> JsonDict:
    """The status after a failed reconcile: the addresses stay as published (the Service stays too, so they may
    still work), and the condition says what failed and, when there are addresses, that they may be stale."""
    status: JsonDict = {k: previous[k] for k in ADDRESS_FIELDS if k in previous}
    if items(previous, "ingressAddresses"):
        message = message[:MESSAGE_LIMIT - len(STALE_NOTE)] + STALE_NOTE
    status["conditions"] = [ready_condition("False", reason, message, generation=generation, previous=previous,
                                            now=now)]
    status["observedGeneration"] = generation
    return status


def status_is_current(live: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether the Listener's ``live`` status already has every field of ``status`` this controller owns (absent
    and None count alike)."""
    return all(live.get(k) == status.get(k) for k in STATUS_FIELDS)


def is_ready(listener: Mapping[str, Any]) -> bool:
    """Whether the Listener's ``Ready`` condition is ``True``."""
    return any(isinstance(c, Mapping) and c.get("type") == READY and c.get("status") == "True"
               for c in items(mapping(listener, "status"), "conditions"))
