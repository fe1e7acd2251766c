"""Pure rules of a Deployment's rollout over its ReplicaSets (no I/O): the Pod template hash, revisions, which
ReplicaSet is the new one, how far the rolling update may scale up and down, and the Deployment's status.

The names, annotations and condition reasons are Kubernetes' (``deployment.kubernetes.io/revision``,
``pod-template-hash``, ``MinimumReplicasAvailable``, ``NewReplicaSetAvailable``, ...), so kubectl's ``rollout``
commands read them as they read a real cluster's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from kubesim.cluster.base.objects import Obj, annotations_of, name_of

TEMPLATE_HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ROLLBACK_TO = "deprecated.deployment.rollback.to"
#: Deployment annotations that are not copied onto its ReplicaSets (the controller's own and kubectl's).
NOT_COPIED = frozenset({LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS, ROLLBACK_TO})

_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_FNV_OFFSET, _FNV_PRIME = 0x811C9DC5, 0x01000193


def _fnv32a(data: bytes) -> int:
    value = _FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value


def safe_encode(text: str) -> str:
    """Each character mapped into the alphabet Kubernetes uses for generated names (no vowels, no look-alikes)."""
    return "".join(_SAFE_ALPHABET[ord(c) % len(_SAFE_ALPHABET)] for c in text)


def template_hash(template: dict[str, Any] | None, collision_count: int = 0) -> str:
    """The ``pod-template-hash`` of a Pod template: a 32-bit FNV-1a hash of the template, written in the safe
    alphabet (up to 10 characters, as on a real cluster; the bytes hashed are kubesim's canonical JSON)."""
    data = json.dumps(template_without_hash(template or {}), sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    return safe_encode(str(_fnv32a(data)))


def template_without_hash(template: dict[str, Any]) -> dict[str, Any]:
    """The template minus the ``pod-template-hash`` label (what kubectl compares and rolls back to)."""
    meta = dict(template.get("metadata") or {})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != TEMPLATE_HASH_LABEL}
    if labels:
        meta["labels"] = labels
    else:
        meta.pop("labels", None)
    result = dict(template)
    if meta:
        result["metadata"] = meta
    else:
        result.pop("metadata", None)
    return result


def same_template(replica_set: Obj, deployment: Obj) -> bool:
    """Whether the ReplicaSet runs the Deployment's current template (ignoring the hash label)."""
    return template_without_hash((replica_set.get("spec") or {}).get("template") or {}) == template_without_hash(
        (deployment.get("spec") or {}).get("template") or {})


def revision_of(obj: Obj) -> int:
    """The ``deployment.kubernetes.io/revision`` annotation as a number (0 when absent or malformed)."""
    text = annotations_of(obj).get(REVISION, "")
    return int(text) if text.isdigit() else 0


def replicas_of(obj: Obj) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 1


def int_or_percent(value: Any, total: int, round_up: bool) -> int:
    """An ``IntOrString`` such as ``25%`` or ``1`` against ``total`` (percentages rounded up or down)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return max(value, 0)
    text = str(value or "0").strip()
    if text.endswith("%") and text[:-1].isdigit():
        share = int(text[:-1]) * total / 100
        return int(math.ceil(share) if round_up else math.floor(share))
    return int(text) if text.isdigit() else 0


def surge_and_unavailable(deployment: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) resolved against ``replicas``: surge rounds up, unavailable down, and both
    zero becomes one unavailable (so a rollout can always proceed), as ``ResolveFenceposts`` does."""
    strategy = (deployment.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0, replicas_of(deployment)
    rolling = strategy.get("rollingUpdate") or {}
    replicas = replicas_of(deployment)
    surge = int_or_percent(rolling.get("maxSurge", "25%"), replicas, round_up=True)
    unavailable = int_or_percent(rolling.get("maxUnavailable", "25%"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def replica_set_annotations(deployment: Obj, revision: int, current: dict[str, str] | None = None
                            ) -> dict[str, str]:
    """A ReplicaSet's annotations: the Deployment's own (but the controller's and kubectl's), its revision, and the
    replica counts it was sized for. ``current``: what the ReplicaSet has, whose revision moves into the history."""
    surge, _ = surge_and_unavailable(deployment)
    replicas = replicas_of(deployment)
    result = {k: v for k, v in annotations_of(deployment).items() if k not in NOT_COPIED}
    old = (current or {}).get(REVISION)
    history = [h for h in (current or {}).get(REVISION_HISTORY, "").split(",") if h]
    if old and old != str(revision):
        history.append(old)
    if history:
        result[REVISION_HISTORY] = ",".join(history)
    result[REVISION] = str(revision)
    result[DESIRED_REPLICAS] = str(replicas)
    result[MAX_REPLICAS] = str(replicas + surge)
    return result


@dataclass(frozen=True)
class ReplicaCounts:
    """What a ReplicaSet asks for and has (``spec.replicas``, ``status.replicas`` / ``availableReplicas``)."""

    name: str
    wanted: int
    current: int
    available: int
    ready: int

    @staticmethod
    def of(replica_set: Obj) -> ReplicaCounts:
        status = replica_set.get("status") or {}
        return ReplicaCounts(name_of(replica_set), replicas_of(replica_set), int(status.get("replicas") or 0),
                             int(status.get("availableReplicas") or 0), int(status.get("readyReplicas") or 0))


def scale_up_new(replicas: int, surge: int, new: ReplicaCounts, all_sets: list[ReplicaCounts]) -> int:
    """The new ReplicaSet's size for this step: up to ``replicas``, and no more Pods in all than ``replicas +
    maxSurge`` (``NewRSNewReplicas`` of the rolling update)."""
    if new.wanted >= replicas:
        return replicas
    total = sum(rs.wanted for rs in all_sets)
    room = replicas + surge - total
    if room <= 0:
        return new.wanted
    return min(new.wanted + room, replicas)


def scale_down_old(replicas: int, unavailable: int, new: ReplicaCounts, old: list[ReplicaCounts]
                   ) -> dict[str, int]:
    """The old ReplicaSets' sizes for this step (name -> replicas, oldest first as given): first their Pods that
    are not available, then available ones, never leaving fewer than ``replicas - maxUnavailable`` available and
    counting the new ReplicaSet's Pods that are not available yet (``reconcileOldReplicaSets``)."""
    result = {rs.name: rs.wanted for rs in old}
    all_pods = new.wanted + sum(rs.wanted for rs in old)
    min_available = replicas - unavailable
    new_unavailable = max(new.wanted - new.available, 0)
    budget = all_pods - min_available - new_unavailable
    if budget <= 0:
        return result
    for rs in old:  # unhealthy replicas first: scaling them away costs no availability
        if budget <= 0:
            break
        unhealthy = max(rs.wanted - rs.available, 0)
        cut = min(unhealthy, budget, result[rs.name])
        result[rs.name] -= cut
        budget -= cut
    available = new.available + sum(min(rs.available, result[rs.name]) for rs in old)
    budget = available - min_available
    for rs in old:
        if budget <= 0:
            break
        cut = min(result[rs.name], budget)
        result[rs.name] -= cut
        budget -= cut
    return result


@dataclass(frozen=True)
class DeploymentStatus:
    replicas: int
    updated: int
    ready: int
    available: int
    unavailable: int


def deployment_status(new: ReplicaCounts | None, old: list[ReplicaCounts]) -> DeploymentStatus:
    """The counts of ``calculateStatus``: Pods of every ReplicaSet; updated = the new one's."""
    every = ([new] if new is not None else []) + old
    wanted = sum(rs.wanted for rs in every)
    available = sum(rs.available for rs in every)
    return DeploymentStatus(
        replicas=sum(rs.current for rs in every),
        updated=new.current if new is not None else 0,
        ready=sum(rs.ready for rs in every),
        available=available,
        unavailable=max(wanted - available, 0),
    )


def rollout_complete(replicas: int, new: ReplicaCounts | None, old: list[ReplicaCounts]) -> bool:
    """Every replica runs the new template and is available, and no old Pod is left."""
    return (new is not None and new.wanted == replicas and new.current == replicas and new.available == replicas
            and all(rs.current == 0 and rs.wanted == 0 for rs in old))
