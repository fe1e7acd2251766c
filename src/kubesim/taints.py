"""Taints and tolerations, pure (no I/O): which toleration tolerates which taint, the node-lifecycle taints a Node
should carry for its ``Ready`` condition, when a ``NoExecute`` taint evicts a Pod, and the tolerations the
DefaultTolerationSeconds admission plugin adds to every Pod.

The keys, effects and rules are Kubernetes' (``node.kubernetes.io/not-ready``, ``node.kubernetes.io/unreachable``,
``NoSchedule``/``NoExecute``, ``tolerationSeconds`` counted from the taint's ``timeAdded``)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
LIFECYCLE_KEYS = (NOT_READY, UNREACHABLE)
DEFAULT_TOLERATION_SECONDS = 300


def toleration_matches(toleration: Obj, taint: Obj) -> bool:
    """Whether ``toleration`` tolerates ``taint`` (an empty effect tolerates every effect; ``Exists`` without a key
    tolerates every taint)."""
    if not isinstance(toleration, dict):
        return False
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def tolerations_of(pod: Obj) -> list[Obj]:
    return [t for t in (pod.get("spec") or {}).get("tolerations") or [] if isinstance(t, dict)]


def untolerated(pod: Obj, taints: Iterable[Obj], effects: tuple[str, ...] = (NO_SCHEDULE, NO_EXECUTE)) -> list[Obj]:
    """The taints with one of ``effects`` that no toleration of ``pod`` tolerates."""
    tolerations = tolerations_of(pod)
    return [t for t in taints if t.get("effect") in effects
            and not any(toleration_matches(tol, t) for tol in tolerations)]


def lifecycle_taints(ready: str | None, now: str) -> list[Obj]:
    """The node-lifecycle taints for a ``Ready`` condition status (``True``: none, ``False``: not-ready,
    ``Unknown``/missing: unreachable), each with ``NoSchedule`` and ``NoExecute`` (the latter stamped
    ``timeAdded``)."""
    if ready == "True":
        return []
    key = NOT_READY if ready == "False" else UNREACHABLE
    return [{"key": key, "effect": NO_SCHEDULE}, {"key": key, "effect": NO_EXECUTE, "timeAdded": now}]


def with_lifecycle_taints(current: list[Obj], ready: str | None, now: str) -> list[Obj]:
    """``current`` with the lifecycle taints for ``ready``: other taints kept as they are, lifecycle taints that
    stay keep their ``timeAdded`` (so eviction is counted from when the node was first tainted)."""
    wanted = lifecycle_taints(ready, now)
    kept = [t for t in current if t.get("key") not in LIFECYCLE_KEYS]
    result = list(kept)
    for taint in wanted:
        same = next((t for t in current if t.get("key") == taint["key"] and t.get("effect") == taint["effect"]),
                    None)
        result.append(same if same is not None else taint)
    return result


def _parse(stamp: Any) -> datetime.datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    for pattern in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return datetime.datetime.strptime(stamp, pattern).replace(tzinfo=datetime.UTC)
        except ValueError:
            continue
    return None


def eviction_delay(pod: Obj, taints: Iterable[Obj], now: datetime.datetime) -> float | None:
    """Seconds until the ``NoExecute`` taints evict ``pod`` (0: now), or None when they never do. A taint no
    toleration tolerates evicts at once; otherwise the shortest ``tolerationSeconds`` of the tolerations that match,
    counted from each taint's ``timeAdded`` (a toleration without seconds tolerates forever)."""
    soonest: float | None = None
    tolerations = tolerations_of(pod)
    for taint in taints:
        if taint.get("effect") != NO_EXECUTE:
            continue
        matching = [t for t in tolerations if toleration_matches(t, taint)]
        if not matching:
            return 0.0
        bounded = [int(t["tolerationSeconds"]) for t in matching if isinstance(t.get("tolerationSeconds"), int)]
        if len(bounded) < len(matching):
            continue  # one toleration without seconds: tolerated for good
        seconds = min(bounded)
        added = _parse(taint.get("timeAdded")) or now
        left = max(seconds - (now - added).total_seconds(), 0.0)
        soonest = left if soonest is None else min(soonest, left)
    return soonest


def default_tolerations(pod: Obj, not_ready_seconds: int, unreachable_seconds: int) -> list[Obj]:
    """The DefaultTolerationSeconds admission plugin: ``NoExecute`` tolerations of the not-ready and unreachable
    taints, for ``tolerationSeconds``, added to the Pod's own unless it tolerates those taints already."""
    tolerations = tolerations_of(pod)
    added = []
    for key, seconds in ((NOT_READY, not_ready_seconds), (UNREACHABLE, unreachable_seconds)):
        taint = {"key": key, "effect": NO_EXECUTE}
        if any(toleration_matches(t, taint) for t in tolerations):
            continue
        added.append({"key": key, "operator": "Exists", "effect": NO_EXECUTE, "tolerationSeconds": seconds})
    return [*((pod.get("spec") or {}).get("tolerations") or []), *added]
