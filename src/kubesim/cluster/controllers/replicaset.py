"""ReplicaSet controller: keeps ``spec.replicas`` Pods of the template running, as Kubernetes' does.

Pods are created with ``generateName: <replicaset>-`` (a name like ``web-6d4cf56db6-x2v7k``) and the ReplicaSet as
their controller; Pods that ended (Succeeded/Failed) or are being deleted do not count, so a Pod evicted from a
lost node is replaced at once. Surplus Pods are deleted in the order Kubernetes prefers: unscheduled before
scheduled, Pending before Running, not Ready before Ready, the newest first. Status: ``replicas``,
``fullyLabeledReplicas``, ``readyReplicas``, ``availableReplicas`` (Ready for ``minReadySeconds``),
``observedGeneration``.
"""

from __future__ import annotations

import copy
import datetime
import logging
from typing import Any

from kubesim.cluster.base.context import PODS, REPLICA_SETS, Context
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import (
    Obj,
    condition,
    condition_true,
    is_terminating,
    labels_of,
    name_of,
    owner_reference,
)
from kubesim.cluster.controllers.rollout import replicas_of
from kubesim.cluster.controllers.workload import WorkloadController

log = logging.getLogger(__name__)

_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def is_active(pod: Obj) -> bool:
    """Counts towards a ReplicaSet's replicas: not being deleted, not ended."""
    return not is_terminating(pod) and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def _seconds_since(stamp: str | None, now: datetime.datetime) -> float:
    if not stamp:
        return 0.0
    try:
        then = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return 0.0
    return (now - then).total_seconds()


def availability(pod: Obj, min_ready_seconds: int, now: datetime.datetime) -> tuple[bool, float]:
    """(available, seconds until it will be): Ready for at least ``minReadySeconds``."""
    if not condition_true(pod, "Ready"):
        return False, 0.0
    if min_ready_seconds <= 0:
        return True, 0.0
    ready_for = _seconds_since((condition(pod, "Ready") or {}).get("lastTransitionTime"), now)
    if ready_for >= min_ready_seconds:
        return True, 0.0
    return False, min_ready_seconds - ready_for


def deletion_order(pods: list[Obj]) -> list[Obj]:
    """Pods in the order a ReplicaSet scales them away (the first are deleted first)."""
    def rank(pod: Obj) -> tuple[Any, ...]:
        scheduled = bool(pod.get("spec", {}).get("nodeName"))
        phase = _PHASE_RANK.get(str(pod.get("status", {}).get("phase")), 1)
        created = str(pod["metadata"].get("creationTimestamp") or "")
        return (scheduled, phase, condition_true(pod, "Ready"), _negated(created))
    return sorted(pods, key=rank)


def _negated(text: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in text)


def min_ready_seconds(workload: Obj) -> int:
    value = (workload.get("spec") or {}).get("minReadySeconds")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class ReplicaSetController(WorkloadController):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx, resource=REPLICA_SETS, kind="ReplicaSet", component="replicaset-controller")

    async def _reconcile(self, key: Key) -> None:
        replica_set = self.ctx.informer(REPLICA_SETS).get(*key)
        if replica_set is None or is_terminating(replica_set):
            return
        if not self.expectations.satisfied(key, self.ctx.informer(PODS)):
            return  # the informer has not shown our last writes yet; their events bring us back
        replicas = replicas_of(replica_set)
        active = [p for p in self._children_of(replica_set) if is_active(p)]
        if len(active) < replicas:
            for _ in range(replicas - len(active)):
                made = await self._create(replica_set)
                if made is not None:
                    self.expectations.written(key, made)
        elif len(active) > replicas:
            for pod in deletion_order(active)[: len(active) - replicas]:
                await self._delete_pod(replica_set, pod, f"Deleted pod: {name_of(pod)}")
                self.expectations.deleted(key, pod)
        await self._update_status(key, replica_set)

    async def _create(self, replica_set: Obj) -> Obj | None:
        template = copy.deepcopy((replica_set.get("spec") or {}).get("template") or {})
        template_meta = template.get("metadata") or {}
        metadata: dict[str, Any] = {
            "generateName": f"{name_of(replica_set)}-",
            "namespace": replica_set["metadata"].get("namespace", ""),
            "labels": dict(template_meta.get("labels") or {}),
            "ownerReferences": [owner_reference(replica_set, "apps/v1", "ReplicaSet")],
        }
        if template_meta.get("annotations"):
            metadata["annotations"] = dict(template_meta["annotations"])
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template.get("spec") or {}}
        return await self._create_for(replica_set, PODS, body, failed="Error creating: ",
                                      created="Created pod: {name}")

    async def _update_status(self, key: Key, replica_set: Obj) -> None:
        pods = [p for p in self._children_of(replica_set) if is_active(p)]
        now = datetime.datetime.now(datetime.UTC)
        wait = min_ready_seconds(replica_set)
        template_labels = ((replica_set.get("spec") or {}).get("template") or {}).get("metadata", {}).get(
            "labels") or {}
        available = 0
        soonest: float | None = None
        for pod in pods:
            ok, later = availability(pod, wait, now)
            available += ok
            if not ok and later > 0:
                soonest = later if soonest is None else min(soonest, later)
        if soonest is not None:
            self.queue.add_after(key, soonest)
        wanted = {
            "replicas": len(pods),
            "fullyLabeledReplicas": sum(1 for p in pods if template_labels.items() <= labels_of(p).items()),
            "readyReplicas": sum(1 for p in pods if condition_true(p, "Ready")),
            "availableReplicas": available,
            "observedGeneration": replica_set["metadata"].get("generation", 1),
        }
        status = replica_set.get("status") or {}
        if all(status.get(k, 0) == v for k, v in wanted.items()):
            return
        await self.ctx.patch_status(REPLICA_SETS, replica_set, wanted)
