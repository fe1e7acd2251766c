"""Deployment controller for simple workloads: Pods owned directly by the Deployment (no ReplicaSets).

Pods are named ``<deployment>-<template hash>-<suffix>`` and labelled ``pod-template-hash``. A template change
replaces all Pods (like the ``Recreate`` strategy); surplus Pods are removed not-ready first, newest first.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from typing import Any

from .context import DEPLOYMENTS, PODS, Context
from .indexes import BY_CONTROLLER
from .informer import Key
from .objects import (
    Obj,
    condition_true,
    is_terminating,
    labels_of,
    name_of,
    owner_reference,
    safe_suffix,
    set_condition,
    short_hash,
    uid_of,
    without_times,
)
from .workload import WorkloadController

log = logging.getLogger(__name__)

TEMPLATE_HASH_LABEL = "pod-template-hash"


class DeploymentController(WorkloadController):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx, resource=DEPLOYMENTS, kind="Deployment", component="deployment-controller")
        self._created = 0

    async def _reconcile(self, key: Key) -> None:
        deployment = self.ctx.informer(DEPLOYMENTS).get(*key)
        if deployment is None or is_terminating(deployment):
            return
        namespace = key[0]
        spec = deployment.get("spec", {})
        replicas = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
        template_hash = short_hash(json.dumps(spec.get("template") or {}, sort_keys=True))
        owned = [
            p
            for p in self.ctx.informer(PODS).by_index(BY_CONTROLLER, uid_of(deployment))
            if p["metadata"].get("namespace", "") == namespace
        ]
        live = [p for p in owned if not is_terminating(p)]
        outdated = [p for p in live if labels_of(p).get(TEMPLATE_HASH_LABEL) != template_hash]
        current = [p for p in live if labels_of(p).get(TEMPLATE_HASH_LABEL) == template_hash]
        for pod in outdated:
            await self._delete(deployment, pod)
        if len(current) > replicas:
            newest_first = sorted(
                current, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True
            )
            victims = sorted(newest_first, key=lambda p: condition_true(p, "Ready"))[
                : len(current) - replicas
            ]
            for pod in victims:
                await self._delete(deployment, pod)
            current = [p for p in current if p not in victims]
        for _ in range(replicas - len(current)):
            await self._create(deployment, template_hash)
        await self._update_status(deployment, current, replicas)

    async def _create(self, deployment: Obj, template_hash: str) -> None:
        namespace = deployment["metadata"].get("namespace", "")
        template = copy.deepcopy(deployment.get("spec", {}).get("template") or {})
        template_meta = template.get("metadata") or {}
        self._created += 1
        name = f"{name_of(deployment)}-{template_hash}-{safe_suffix(uid_of(deployment), str(self._created), str(time.monotonic_ns()))}"
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "labels": {**(template_meta.get("labels") or {}), TEMPLATE_HASH_LABEL: template_hash},
            "ownerReferences": [owner_reference(deployment, "apps/v1", "Deployment")],
        }
        if template_meta.get("annotations"):
            metadata["annotations"] = dict(template_meta["annotations"])
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template.get("spec") or {}}
        await self._create_for(
            deployment, PODS, body, failed="Error creating: ", created=f"Created pod: {name}"
        )

    async def _delete(self, deployment: Obj, pod: Obj) -> None:
        await self._delete_pod(deployment, pod, f"Deleted pod: {name_of(pod)}")

    async def _update_status(self, deployment: Obj, current: list[Obj], replicas: int) -> None:
        ready = sum(1 for p in current if condition_true(p, "Ready"))
        status = dict(deployment.get("status") or {})
        available = ready >= replicas
        conditions = set_condition(
            list(status.get("conditions") or []),
            "Available",
            "True" if available else "False",
            "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
            "Deployment has minimum availability."
            if available
            else "Deployment does not have minimum availability.",
        )
        wanted: dict[str, Any] = {
            "observedGeneration": deployment.get("metadata", {}).get("generation", 1),
            "replicas": len(current),
            "updatedReplicas": len(current),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(replicas - ready, 0),
            "conditions": conditions,
        }
        same = all(status.get(k) == v for k, v in wanted.items() if k != "conditions") and without_times(
            status.get("conditions") or []
        ) == without_times(conditions)
        if same:
            return
        await self.ctx.patch_status(self.resource, deployment, wanted)
