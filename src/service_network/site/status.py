"""Status of Sites, Listeners and Connectors (pure), exactly as upstream composes it (skupper-listener.md §3.3-§3.4,
§4.2; upstream ``pkg/apis/skupper/v2alpha1/types.go``):

- each condition is True/``Ready``/``OK``, False/``Error``/<the error>, or False/``Pending``/<what is awaited>;
- a condition's ``lastTransitionTime`` changes only when its ``status`` flips; ``observedGeneration`` is the
  object's generation;
- ``Ready`` and the ``status``/``message`` fields aggregate the required conditions in order: the first missing one
  gives Pending "Not <Type>", the first False one gives its reason and message, else Ready/OK;
- ``hasMatchingConnector`` / ``hasMatchingListener`` are omitted when false (upstream's ``omitempty``).

The functions return a new status; the caller writes it only when it differs from the current one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONFIGURED",
    "MATCHED",
    "OPERATIONAL",
    "READY",
    "RESOLVED",
    "RUNNING",
    "ConditionState",
    "binding_status",
    "condition",
    "error",
    "is_ready",
    "pending",
    "ready",
    "set_condition",
    "set_ready",
    "site_status",
]

CONFIGURED = "Configured"
OPERATIONAL = "Operational"
NO_DESTINATION = "No connector for any of the routing keys"
MATCHED = "Matched"
RUNNING = "Running"
RESOLVED = "Resolved"
READY = "Ready"
STATUS_OK = "OK"


@dataclass(frozen=True)
class ConditionState:
    status: str      # "True" | "False"
    reason: str      # "Ready" | "Pending" | "Error"
    message: str


def ready() -> ConditionState:
    return ConditionState("True", "Ready", STATUS_OK)


def error(message: str) -> ConditionState:
    return ConditionState("False", "Error", message)


def pending(message: str) -> ConditionState:
    return ConditionState("False", "Pending", message)


def condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for item in status.get("conditions") or []:
        if isinstance(item, Mapping) and item.get("type") == type_:
            return item
    return None


def is_ready(obj: Mapping[str, Any]) -> bool:
    status = obj.get("status")
    found = condition(status, READY) if isinstance(status, Mapping) else None
    return found is not None and found.get("status") == "True"


def set_condition(status: dict[str, Any], type_: str, state: ConditionState, generation: int | None,
                  now: str) -> bool:
    """Set one condition in ``status`` (in place); True when anything of it changed."""
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    new: dict[str, Any] = {"type": type_, "status": state.status, "reason": state.reason, "message": state.message,
                           "lastTransitionTime": now}
    if generation is not None:
        new["observedGeneration"] = generation
    for i, existing in enumerate(conditions):
        if existing.get("type") != type_:
            continue
        if existing.get("status") == state.status and existing.get("lastTransitionTime"):
            new["lastTransitionTime"] = existing["lastTransitionTime"]
        if existing == new:
            return False
        conditions[i] = new
        return True
    conditions.append(new)
    return True


def _ready_state(status: Mapping[str, Any], required: Sequence[str]) -> ConditionState:
    for type_ in required:
        found = condition(status, type_)
        if found is None:
            return pending(f"Not {type_}")
        if found.get("status") == "False":
            return ConditionState("False", str(found.get("reason") or "Pending"), str(found.get("message") or ""))
    return ready()


def set_ready(status: dict[str, Any], required: Sequence[str], generation: int | None, now: str) -> bool:
    """Aggregate ``required`` conditions into ``status``, ``message`` and the Ready condition (in place)."""
    state = _ready_state(status, required)
    changed = status.get("status") != state.reason or status.get("message") != state.message
    status["status"] = state.reason
    status["message"] = state.message
    return set_condition(status, READY, state, generation, now) or changed


def _start(previous: Mapping[str, Any] | None) -> dict[str, Any]:
    status = copy.deepcopy(dict(previous or {}))
    if not isinstance(status.get("conditions"), list):
        status["conditions"] = []
    status["conditions"] = [c for c in status["conditions"] if isinstance(c, dict)]
    return status


def binding_status(previous: Mapping[str, Any] | None, *, kind: str, configured: ConditionState, matched: bool,
                   generation: int | None, now: str, selected_pods: list[dict[str, str]] | None = None,
                   strategy: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The status of a Listener, MultiKeyListener, Connector, AttachedConnectorBinding or AttachedConnector
    (``kind``).

    ``configured``: ready(), or error(...) with upstream's message; ``matched``: whether a counterpart with the
    routing key exists in the network (network view; an AttachedConnector has no routing key of its own, its
    binding has; a MultiKeyListener is matched when one of its keys is, its ``Operational`` condition and
    ``hasDestination``, with the reachable keys in ``strategy``). ``selected_pods`` (Connector, AttachedConnector)
    is set when given and removed otherwise.
    """
    status = _start(previous)
    set_condition(status, CONFIGURED, configured, generation, now)
    if kind == "AttachedConnector":
        set_ready(status, (CONFIGURED,), generation, now)
    elif kind == "MultiKeyListener":
        if matched:
            status["hasDestination"] = True
        else:
            status.pop("hasDestination", None)
        set_condition(status, OPERATIONAL, ready() if matched else pending(NO_DESTINATION), generation, now)
        set_ready(status, (CONFIGURED, OPERATIONAL), generation, now)
        if strategy is not None:
            status["strategy"] = dict(strategy)
    else:
        field, missing = (("hasMatchingConnector", "No matching connectors") if kind == "Listener"
                          else ("hasMatchingListener", "No matching listeners"))
        if matched:
            status[field] = True
        else:
            status.pop(field, None)
        set_condition(status, MATCHED, ready() if matched else pending(missing), generation, now)
        set_ready(status, (CONFIGURED, MATCHED), generation, now)
    if kind in ("Connector", "AttachedConnector"):
        if selected_pods:
            status["selectedPods"] = selected_pods
        else:
            status.pop("selectedPods", None)
    return status


def site_status(previous: Mapping[str, Any] | None, *, configured: ConditionState,
                running: ConditionState | None, resolved: ConditionState | None, generation: int | None, now: str,
                extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The status of a Site. ``running`` None: not set (an inactive Site); ``resolved`` None: not required (no
    link access). ``extra`` sets further fields (``network``, ``sitesInNetwork``, ``controller``); a key mapped
    to None is removed."""
    status = _start(previous)
    set_condition(status, CONFIGURED, configured, generation, now)
    required = [CONFIGURED]
    if running is not None:
        set_condition(status, RUNNING, running, generation, now)
        required.append(RUNNING)
    if resolved is not None:
        set_condition(status, RESOLVED, resolved, generation, now)
        required.append(RESOLVED)
    set_ready(status, required, generation, now)
    for key, value in (extra or {}).items():
        if value is None:
            status.pop(key, None)
        else:
            status[key] = value
    return status
