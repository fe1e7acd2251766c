"""DaemonSet controller: one Pod of the template on every eligible node, scheduled by the scheduler.

As Kubernetes' controller does, each Pod is pinned to its node by a required node affinity on ``metadata.name``
(``matchFields``) and gets the DaemonSet tolerations (not-ready and unreachable nodes, pressure conditions, and
``node.kubernetes.io/unschedulable``, so cordoned nodes keep their daemons). A node is eligible when the template's
``nodeSelector`` and required node affinity match it. Pods are labelled ``controller-revision-hash`` (the template's
hash) and ``pod-template-generation``; a template change replaces the Pods node by node (all at once: no
``maxUnavailable`` pacing), failed Pods are deleted and recreated, Pods of nodes that went away or no longer match
are deleted. Status: desired/current/ready/available/updated counts and ``observedGeneration``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from kubesim.cluster.base.context import DAEMON_SETS, NODES, PODS, Context
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import (
    Obj,
    condition_true,
    controller_of,
    is_terminating,
    labels_of,
    name_of,
    owner_reference,
    safe_suffix,
    short_hash,
    uid_of,
)
from kubesim.cluster.controllers.matching import pod_fits_node
from kubesim.cluster.controllers.workload import WorkloadController

REVISION_LABEL = "controller-revision-hash"
GENERATION_LABEL = "pod-template-generation"
TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def target_node(pod: Obj) -> str | None:
    """The node a DaemonSet Pod is for: its ``nodeName``, else the ``metadata.name`` its node affinity requires."""
    node = pod.get("spec", {}).get("nodeName")
    if node:
        return str(node)
    required = (((pod.get("spec", {}).get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and field.get("values"):
                return str(field["values"][0])
    return None


def pod_spec_for_node(template_spec: Obj, node: str) -> dict[str, Any]:
    """The template's Pod spec pinned to ``node``, with the DaemonSet tolerations added."""
    spec = copy.deepcopy(dict(template_spec))
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    tolerations = list(spec.get("tolerations") or [])
    for toleration in TOLERATIONS:
        if toleration not in tolerations:
            tolerations.append(toleration)
    spec["tolerations"] = tolerations
    return spec


class DaemonSetController(WorkloadController):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx, resource=DAEMON_SETS, kind="DaemonSet", component="daemonset-controller")
        ctx.informer(NODES).add_handler(self._on_node)
        self._created = 0

    def _on_node(self, event: str, node: Obj, old: Obj | None) -> None:
        for daemon_set in self.ctx.informer(DAEMON_SETS).items():
            self.queue.add((daemon_set["metadata"].get("namespace", ""), name_of(daemon_set)))

    async def _reconcile(self, key: Key) -> None:
        daemon_set = self.ctx.informer(DAEMON_SETS).get(*key)
        if daemon_set is None or is_terminating(daemon_set):
            return
        template = daemon_set.get("spec", {}).get("template") or {}
        revision = short_hash(json.dumps(template, sort_keys=True))
        probe = {"metadata": template.get("metadata") or {}, "spec": template.get("spec") or {}}
        eligible = sorted(name_of(node) for node in self.ctx.informer(NODES).items()
                          if not is_terminating(node) and pod_fits_node(probe, node) is None)
        owned = [p for p in self.ctx.informer(PODS).items(key[0])
                 if (controller_of(p) or {}).get("uid") == uid_of(daemon_set) and not is_terminating(p)]
        by_node: dict[str, list[Obj]] = {}
        for pod in owned:
            node = target_node(pod)
            if pod.get("status", {}).get("phase") == "Failed" or node not in eligible:
                await self._delete(daemon_set, pod)
                continue
            by_node.setdefault(str(node), []).append(pod)
        for node in eligible:
            pods = by_node.get(node, [])
            current = [p for p in pods if labels_of(p).get(REVISION_LABEL) == revision]
            for pod in [p for p in pods if p not in current] + sorted(
                    current, key=lambda p: p["metadata"].get("creationTimestamp", ""))[1:]:
                await self._delete(daemon_set, pod)
            if not current:
                await self._create(daemon_set, node, revision)
        await self._update_status(daemon_set, eligible, by_node, revision)

    async def _create(self, daemon_set: Obj, node: str, revision: str) -> None:
        namespace = daemon_set["metadata"].get("namespace", "")
        template = daemon_set.get("spec", {}).get("template") or {}
        template_meta = template.get("metadata") or {}
        self._created += 1
        name = f"{name_of(daemon_set)}-{safe_suffix(uid_of(daemon_set), node, str(self._created))}"
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "labels": {**(template_meta.get("labels") or {}), REVISION_LABEL: revision,
                       GENERATION_LABEL: str(daemon_set["metadata"].get("generation", 1))},
            "ownerReferences": [owner_reference(daemon_set, "apps/v1", "DaemonSet")],
        }
        if template_meta.get("annotations"):
            metadata["annotations"] = dict(template_meta["annotations"])
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                "spec": pod_spec_for_node(template.get("spec") or {}, node)}
        await self._create_for(daemon_set, PODS, body, failed="Error creating: ", created=f"Created pod: {name}")

    async def _delete(self, daemon_set: Obj, pod: Obj) -> None:
        await self._delete_pod(daemon_set, pod, f"Deleted pod: {name_of(pod)}")

    async def _update_status(self, daemon_set: Obj, eligible: list[str], by_node: dict[str, list[Obj]],
                             revision: str) -> None:
        scheduled = [node for node in eligible if by_node.get(node)]
        pods = [pod for node in scheduled for pod in by_node[node]]
        ready = sum(1 for pod in pods if condition_true(pod, "Ready"))
        updated = sum(1 for pod in pods if labels_of(pod).get(REVISION_LABEL) == revision)
        wanted = {
            "observedGeneration": daemon_set.get("metadata", {}).get("generation", 1),
            "desiredNumberScheduled": len(eligible),
            "currentNumberScheduled": len(scheduled),
            "numberMisscheduled": 0,
            "numberReady": ready,
            "numberAvailable": ready,
            "numberUnavailable": max(len(eligible) - ready, 0),
            "updatedNumberScheduled": updated,
        }
        status = daemon_set.get("status") or {}
        if all(status.get(k) == v for k, v in wanted.items()):
            return
        await self.ctx.patch_status(self.resource, daemon_set, wanted)
