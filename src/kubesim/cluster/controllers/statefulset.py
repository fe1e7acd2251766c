"""StatefulSet controller: stable Pods ``<name>-<ordinal>`` and claims ``<template>-<name>-<ordinal>``.

Claims from ``volumeClaimTemplates`` carry no owner by default, so they outlive Pods and the StatefulSet
(Kubernetes' default ``Retain`` retention). ``persistentVolumeClaimRetentionPolicy`` is honoured as Kubernetes
does it, through owner references the garbage collector follows: ``whenDeleted: Delete`` makes the StatefulSet
an owner of every claim, ``whenScaled: Delete`` makes a condemned Pod (ordinal beyond ``replicas``) the owner of
its claims before it is deleted, and a Pod back in range loses that reference again. ``OrderedReady`` (the default) creates Pods one at a time, each after its
predecessors are Running and Ready, and removes them from the highest ordinal down; ``Parallel`` does both at
once. Template changes are rolled out like the default ``RollingUpdate`` strategy: once every Pod is Running and
Ready, the highest-ordinal Pod of an older revision is deleted and recreated (``partition`` honoured);
``OnDelete`` leaves that to the user.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

from kubesim.cluster.base.context import PODS, PVCS, STATEFUL_SETS, Context
from kubesim.cluster.base.indexes import BY_CONTROLLER
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import (
    Obj,
    condition_true,
    is_terminating,
    labels_of,
    name_of,
    owner_reference,
    short_hash,
    uid_of,
)
from kubesim.cluster.controllers.workload import WorkloadController
from kubesim.errors import ApiError

log = logging.getLogger(__name__)

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
REVISION_LABEL = "controller-revision-hash"


def _ordinal(sts_name: str, pod_name: str) -> int | None:
    prefix = f"{sts_name}-"
    if not pod_name.startswith(prefix):
        return None
    rest = pod_name[len(prefix) :]
    return int(rest) if rest.isdigit() and str(int(rest)) == rest else None


def claim_name(template_name: str, sts: Obj, ordinal: int) -> str:
    """``<template>-<statefulset>-<ordinal>``: the claim a Pod of the set gets from one ``volumeClaimTemplate``."""
    return f"{template_name}-{name_of(sts)}-{ordinal}"


def _revision(sts: Obj) -> str:
    """The ``controller-revision-hash`` of the current Pod template."""
    template = json.dumps(sts.get("spec", {}).get("template"), sort_keys=True)
    return f"{name_of(sts)}-{short_hash(template)}"


def _retention(sts: Obj) -> tuple[bool, bool]:
    """``(delete when the set is deleted, delete when scaled down)`` from the claim retention policy."""
    policy = sts.get("spec", {}).get("persistentVolumeClaimRetentionPolicy") or {}
    return policy.get("whenDeleted") == "Delete", policy.get("whenScaled") == "Delete"


def _claim_owners(
    sts: Obj, pod: Obj | None, in_range: bool, current: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The claim's owner references under the retention policy; references to anything else are kept."""
    delete_with_set, delete_when_scaled = _retention(sts)
    ours = {uid_of(sts)} | ({uid_of(pod)} if pod is not None else set())
    owners = [ref for ref in current if ref.get("uid") not in ours]
    scaled_down = pod is not None and not in_range and delete_when_scaled
    if delete_with_set and not scaled_down:
        owners.append(owner_reference(sts, "apps/v1", "StatefulSet", controller=False))
    if scaled_down:
        assert pod is not None
        owners.append(owner_reference(pod, "v1", "Pod", controller=False))
    return owners


def _running_and_ready(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and condition_true(pod, "Ready")


class StatefulSetController(WorkloadController):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx, resource=STATEFUL_SETS, kind="StatefulSet", component="statefulset-controller")

    def _owned_pods(self, sts: Obj) -> dict[int, Obj]:
        namespace = sts["metadata"].get("namespace", "")
        pods: dict[int, Obj] = {}
        for pod in self.ctx.informer(PODS).by_index(BY_CONTROLLER, uid_of(sts)):
            if pod["metadata"].get("namespace", "") != namespace:
                continue
            ordinal = _ordinal(name_of(sts), name_of(pod))
            if ordinal is not None:
                pods[ordinal] = pod
        return pods

    async def _reconcile(self, key: Key) -> None:
        sts = self.ctx.informer(STATEFUL_SETS).get(*key)
        if sts is None or is_terminating(sts):
            return
        spec = sts.get("spec", {})
        replicas = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
        parallel = spec.get("podManagementPolicy") == "Parallel"
        start = int(((spec.get("ordinals") or {}).get("start")) or 0)
        pods = self._owned_pods(sts)
        wanted = range(start, start + replicas)
        for ordinal, pod in pods.items():
            await self._update_claim_owners(sts, ordinal, pod, ordinal in wanted)

        # scale down: highest ordinal first
        extra = sorted((o for o in pods if o not in wanted), reverse=True)
        for ordinal in extra:
            pod = pods[ordinal]
            if not is_terminating(pod):
                await self._delete_sts_pod(sts, pod)
            if not parallel:
                break
        if extra and not parallel:
            await self._update_status(sts, pods)
            return

        all_ready = True
        for ordinal in wanted:
            existing = pods.get(ordinal)
            if existing is None:
                all_ready = False
                await self._create_claims(sts, ordinal)
                await self._create_pod(sts, ordinal)
                if not parallel:
                    break
                continue
            if is_terminating(existing) or not _running_and_ready(existing):
                all_ready = False
                if not parallel:
                    break
        if all_ready:
            await self._roll_one(sts, pods, wanted)
        await self._update_status(sts, pods)

    async def _roll_one(self, sts: Obj, pods: dict[int, Obj], wanted: range) -> None:
        """RollingUpdate: replace the highest-ordinal Pod of an older revision (it is recreated from the template)."""
        if (sts.get("spec", {}).get("updateStrategy") or {}).get("type") == "OnDelete":
            return
        revision = _revision(sts)
        partition = int(
            ((sts.get("spec", {}).get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition")
            or 0
        )
        for ordinal in sorted(wanted, reverse=True):
            pod = pods.get(ordinal)
            if ordinal < partition or pod is None:
                continue
            if labels_of(pod).get(REVISION_LABEL) != revision:
                await self._delete_sts_pod(sts, pod)
                return

    def _claim_names(self, sts: Obj, ordinal: int) -> list[str]:
        return [
            claim_name((template.get("metadata") or {}).get("name", ""), sts, ordinal)
            for template in sts.get("spec", {}).get("volumeClaimTemplates") or []
        ]

    async def _update_claim_owners(self, sts: Obj, ordinal: int, pod: Obj, in_range: bool) -> None:
        """Bring the owner references of the Pod's claims in line with the retention policy (no-op writes skipped)."""
        namespace = sts["metadata"].get("namespace", "")
        for claim_name in self._claim_names(sts, ordinal):
            claim = self.ctx.informer(PVCS).get(namespace, claim_name)
            if claim is None or is_terminating(claim):
                continue
            current = list(claim.get("metadata", {}).get("ownerReferences") or [])
            wanted = _claim_owners(sts, pod, in_range, current)
            if wanted == current:
                continue
            try:
                await self.ctx.api.patch(
                    PVCS, claim_name, {"metadata": {"ownerReferences": wanted or None}}, namespace=namespace
                )
            except ApiError as error:
                if error.code != 404:
                    raise

    async def _create_claims(self, sts: Obj, ordinal: int) -> None:
        namespace = sts["metadata"].get("namespace", "")
        selector_labels = ((sts.get("spec", {}).get("selector") or {}).get("matchLabels")) or {}
        for template in sts.get("spec", {}).get("volumeClaimTemplates") or []:
            template_meta = template.get("metadata", {})
            name = claim_name(template_meta.get("name", ""), sts, ordinal)
            if self.ctx.informer(PVCS).get(namespace, name) is not None:
                continue
            metadata: dict[str, Any] = {
                "name": name,
                "namespace": namespace,
                "labels": {**(template_meta.get("labels") or {}), **selector_labels},
            }
            if template_meta.get("annotations"):
                metadata["annotations"] = dict(template_meta["annotations"])
            owners = _claim_owners(sts, None, True, [])
            if owners:
                metadata["ownerReferences"] = owners
            body = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": metadata,
                "spec": copy.deepcopy(template.get("spec") or {}),
            }
            await self._create_for(
                sts,
                PVCS,
                body,
                failed=f"create Claim {name} for Pod {name_of(sts)}-{ordinal} in StatefulSet {name_of(sts)} "
                "failed error: ",
                created=f"create Claim {name} Pod {name_of(sts)}-{ordinal} in StatefulSet {name_of(sts)} success",
            )

    def _pod_body(self, sts: Obj, ordinal: int) -> Obj:
        namespace = sts["metadata"].get("namespace", "")
        name = f"{name_of(sts)}-{ordinal}"
        template = copy.deepcopy(sts.get("spec", {}).get("template") or {})
        template_meta = template.get("metadata") or {}
        spec: dict[str, Any] = template.get("spec") or {}
        revision = _revision(sts)
        labels = {
            **(template_meta.get("labels") or {}),
            POD_NAME_LABEL: name,
            POD_INDEX_LABEL: str(ordinal),
            REVISION_LABEL: revision,
        }
        volumes = list(spec.get("volumes") or [])
        claim_volumes = {}
        for claim_template in sts.get("spec", {}).get("volumeClaimTemplates") or []:
            template_name = (claim_template.get("metadata") or {}).get("name", "")
            claim_volumes[template_name] = {
                "name": template_name,
                "persistentVolumeClaim": {"claimName": claim_name(template_name, sts, ordinal)},
            }
        volumes = [claim_volumes.pop(v.get("name"), v) for v in volumes] + list(claim_volumes.values())
        if volumes:
            spec["volumes"] = volumes
        spec["hostname"] = name
        if sts.get("spec", {}).get("serviceName"):
            spec["subdomain"] = sts["spec"]["serviceName"]
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(sts, "apps/v1", "StatefulSet")],
        }
        if template_meta.get("annotations"):
            metadata["annotations"] = dict(template_meta["annotations"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    async def _create_pod(self, sts: Obj, ordinal: int) -> None:
        body = self._pod_body(sts, ordinal)
        name = body["metadata"]["name"]
        await self._create_for(
            sts,
            PODS,
            body,
            failed=f"create Pod {name} in StatefulSet {name_of(sts)} failed error: ",
            created=f"create Pod {name} in StatefulSet {name_of(sts)} successful",
        )

    async def _delete_sts_pod(self, sts: Obj, pod: Obj) -> None:
        await self._delete_pod(
            sts, pod, f"delete Pod {name_of(pod)} in StatefulSet {name_of(sts)} successful"
        )

    async def _update_status(self, sts: Obj, pods: dict[int, Obj]) -> None:
        live = [p for p in pods.values() if not is_terminating(p)]
        ready = sum(1 for p in live if _running_and_ready(p))
        revision = _revision(sts)
        updated = sum(1 for p in live if labels_of(p).get(REVISION_LABEL) == revision)
        status = dict(sts.get("status") or {})
        wanted = {
            "observedGeneration": sts.get("metadata", {}).get("generation", 1),
            "replicas": len(live),
            "readyReplicas": ready,
            "currentReplicas": len(live),
            "updatedReplicas": updated,
            "availableReplicas": ready,
            "updateRevision": revision,
            "currentRevision": revision if updated == len(live) else status.get("currentRevision", revision),
        }
        if all(status.get(k) == v for k, v in wanted.items()):
            return
        await self.ctx.patch_status(self.resource, sts, wanted)
