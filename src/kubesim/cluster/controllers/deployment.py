"""Deployment controller: ReplicaSets per Pod template and the rollout between them, as Kubernetes' does.

The ReplicaSet of the current template is ``<deployment>-<pod-template-hash>`` (the hash also labels its selector,
template and Pods); each new template gets the next ``deployment.kubernetes.io/revision``, written on the
ReplicaSet and the Deployment, so ``kubectl rollout history`` lists the revisions (with ``kubernetes.io/change-cause``)
and ``kubectl rollout undo`` brings an old template back: its ReplicaSet becomes the new one again, under a new
revision. ``RollingUpdate`` (the default) scales the new ReplicaSet up and the old ones down within ``maxSurge`` and
``maxUnavailable`` (``rollout.py``), step by step as Pods become available; ``Recreate`` scales the old ones to zero
and waits for their Pods to be gone first. Old ReplicaSets at zero beyond ``revisionHistoryLimit`` are deleted.
``spec.paused`` stops the rollout. Status and the ``Available`` / ``Progressing`` conditions as Kubernetes reports
them; ``ScalingReplicaSet`` Events.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from kubesim.cluster.base.context import DEPLOYMENTS, PODS, REPLICA_SETS, Context
from kubesim.cluster.base.indexes import BY_CONTROLLER
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import (
    Obj,
    annotations_of,
    controller_of,
    is_terminating,
    name_of,
    owner_reference,
    set_condition,
    uid_of,
    without_times,
)
from kubesim.cluster.controllers.rollout import (
    REVISION,
    TEMPLATE_HASH_LABEL,
    ReplicaCounts,
    deployment_status,
    replica_set_annotations,
    replicas_of,
    revision_of,
    rollout_complete,
    same_template,
    scale_down_old,
    scale_up_new,
    surge_and_unavailable,
    template_hash,
)
from kubesim.cluster.controllers.workload import WorkloadController
from kubesim.errors import ApiError

log = logging.getLogger(__name__)

__all__ = ["TEMPLATE_HASH_LABEL", "DeploymentController"]


class DeploymentController(WorkloadController):
    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx, resource=DEPLOYMENTS, kind="Deployment", component="deployment-controller",
                         children=REPLICA_SETS)
        ctx.informer(PODS).add_handler(self._on_pod_gone)

    def _on_pod_gone(self, event: str, pod: Obj, old: Obj | None) -> None:
        """A Pod of one of our ReplicaSets is gone: a Recreate rollout may go on now."""
        if event != "DELETED":
            return
        owner = controller_of(pod)
        if owner is None or owner.get("kind") != "ReplicaSet":
            return
        namespace = pod["metadata"].get("namespace", "")
        replica_set = self.ctx.informer(REPLICA_SETS).get(namespace, str(owner.get("name", "")))
        deployment = controller_of(replica_set) if replica_set is not None else None
        if deployment is not None and deployment.get("kind") == "Deployment":
            self.queue.add((namespace, str(deployment.get("name", ""))))

    def _replica_sets(self, deployment: Obj) -> list[Obj]:
        """The Deployment's ReplicaSets, oldest first."""
        owned = [rs for rs in self._children_of(deployment) if not is_terminating(rs)]
        return sorted(owned, key=lambda rs: (str(rs["metadata"].get("creationTimestamp") or ""), name_of(rs)))

    async def _reconcile(self, key: Key) -> None:
        deployment = self.ctx.informer(DEPLOYMENTS).get(*key)
        if deployment is None or is_terminating(deployment):
            return
        if not self.expectations.satisfied(key, self.ctx.informer(REPLICA_SETS)):
            return
        sets = self._replica_sets(deployment)
        new = next((rs for rs in sets if same_template(rs, deployment)), None)
        old = [rs for rs in sets if rs is not new]
        paused = bool((deployment.get("spec") or {}).get("paused"))
        if not paused:
            revision = max((revision_of(rs) for rs in old), default=0) + 1
            if new is None:
                new = await self._create_replica_set(key, deployment, revision, scaled=not old)
                if new is None:
                    return
            elif revision_of(new) < revision or _annotations_stale(deployment, new, revision_of(new)):
                new = await self._annotate(new, deployment, max(revision_of(new), revision))
                self.expectations.written(key, new)
            await self._annotate_deployment(deployment, revision_of(new))
            strategy = ((deployment.get("spec") or {}).get("strategy") or {}).get("type")
            if strategy == "Recreate":
                await self._recreate(key, deployment, new, old)
            else:
                await self._roll(key, deployment, new, old)
            await self._clean_up(deployment, old)
        await self._update_status(deployment, new, old, paused)

    # ------------------------------------------------------------------------------------------- ReplicaSets

    async def _create_replica_set(self, key: Key, deployment: Obj, revision: int, scaled: bool) -> Obj | None:
        spec = deployment.get("spec") or {}
        template = copy.deepcopy(spec.get("template") or {})
        pod_hash = template_hash(template)
        template.setdefault("metadata", {})
        template["metadata"]["labels"] = {**(template["metadata"].get("labels") or {}), TEMPLATE_HASH_LABEL: pod_hash}
        selector = copy.deepcopy(spec.get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), TEMPLATE_HASH_LABEL: pod_hash}
        name = f"{name_of(deployment)}-{pod_hash}"
        replicas = replicas_of(deployment)
        surge, _ = surge_and_unavailable(deployment)
        strategy = (spec.get("strategy") or {}).get("type")
        # the first ReplicaSet takes every replica at once; a later one starts within the surge (0 for Recreate)
        first_size = replicas if scaled else (0 if strategy == "Recreate" else min(replicas, surge))
        body: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": deployment["metadata"].get("namespace", ""),
                "labels": dict(template["metadata"]["labels"]),
                "annotations": replica_set_annotations(deployment, revision),
                "ownerReferences": [owner_reference(deployment, "apps/v1", "Deployment")],
            },
            "spec": {"replicas": first_size, "minReadySeconds": spec.get("minReadySeconds", 0),
                     "selector": selector, "template": template},
        }
        try:
            made = await self.ctx.api.create(REPLICA_SETS, body, namespace=body["metadata"]["namespace"])
        except ApiError as error:
            if error.code != 409:
                await self._record(deployment, "Warning", "FailedCreate",
                                   f'Failed to create new replica set "{name}": {error.message}')
                raise
            existing = self.ctx.informer(REPLICA_SETS).get(body["metadata"]["namespace"], name)
            if existing is not None and same_template(existing, deployment):
                return existing  # ours, the informer had not shown it yet
            log.warning("ReplicaSet %s exists with another template or owner; waiting", name)
            return None
        self.expectations.written(key, made)
        await self._record(deployment, "Normal", "ScalingReplicaSet",
                           f"Scaled up replica set {name} from 0 to {first_size}")
        return made

    async def _annotate(self, replica_set: Obj, deployment: Obj, revision: int) -> Obj:
        """The new ReplicaSet (again, after an undo) under ``revision``, with the Deployment's annotations."""
        annotations = replica_set_annotations(deployment, revision, annotations_of(replica_set))
        wanted = {k: v for k, v in annotations.items() if annotations_of(replica_set).get(k) != v}
        if not wanted:
            return replica_set
        return await self.ctx.api.patch(REPLICA_SETS, name_of(replica_set), {"metadata": {"annotations": wanted}},
                                        namespace=replica_set["metadata"].get("namespace"))

    async def _annotate_deployment(self, deployment: Obj, revision: int) -> None:
        if annotations_of(deployment).get(REVISION) == str(revision):
            return
        try:
            await self.ctx.api.patch(DEPLOYMENTS, name_of(deployment),
                                     {"metadata": {"annotations": {REVISION: str(revision)}}},
                                     namespace=deployment["metadata"].get("namespace"))
        except ApiError as error:
            if error.code != 404:
                raise

    async def _scale(self, key: Key, deployment: Obj, replica_set: Obj, replicas: int) -> None:
        current = replicas_of(replica_set)
        if current == replicas:
            return
        surge, _ = surge_and_unavailable(deployment)
        size = replicas_of(deployment)
        change: dict[str, Any] = {
            "metadata": {"annotations": {"deployment.kubernetes.io/desired-replicas": str(size),
                                         "deployment.kubernetes.io/max-replicas": str(size + surge)}},
            "spec": {"replicas": replicas},
        }
        try:
            scaled = await self.ctx.api.patch(REPLICA_SETS, name_of(replica_set), change,
                                              namespace=replica_set["metadata"].get("namespace"))
        except ApiError as error:
            if error.code == 404:
                return
            raise
        self.expectations.written(key, scaled)
        direction = "up" if replicas > current else "down"
        await self._record(deployment, "Normal", "ScalingReplicaSet",
                           f"Scaled {direction} replica set {name_of(replica_set)} from {current} to {replicas}")

    # ------------------------------------------------------------------------------------------ strategies

    async def _roll(self, key: Key, deployment: Obj, new: Obj, old: list[Obj]) -> None:
        replicas = replicas_of(deployment)
        surge, unavailable = surge_and_unavailable(deployment)
        new_counts = ReplicaCounts.of(new)
        old_counts = [ReplicaCounts.of(rs) for rs in old]
        size = scale_up_new(replicas, surge, new_counts, [new_counts, *old_counts])
        if size != new_counts.wanted:
            await self._scale(key, deployment, new, size)
            new_counts = ReplicaCounts(new_counts.name, size, new_counts.current, new_counts.available,
                                       new_counts.ready)
        sizes = scale_down_old(replicas, unavailable, new_counts, old_counts)
        for rs in old:
            if sizes[name_of(rs)] != replicas_of(rs):
                await self._scale(key, deployment, rs, sizes[name_of(rs)])

    async def _recreate(self, key: Key, deployment: Obj, new: Obj, old: list[Obj]) -> None:
        for rs in old:
            await self._scale(key, deployment, rs, 0)
        pods = self.ctx.informer(PODS)
        if any(pods.count(BY_CONTROLLER, uid_of(rs)) for rs in old):
            return  # the old Pods' deletion events bring the Deployment back
        await self._scale(key, deployment, new, replicas_of(deployment))

    async def _clean_up(self, deployment: Obj, old: list[Obj]) -> None:
        """Old ReplicaSets at zero beyond ``revisionHistoryLimit`` (oldest revisions first) are deleted."""
        limit = (deployment.get("spec") or {}).get("revisionHistoryLimit", 10)
        if not isinstance(limit, int):
            return
        idle = sorted((rs for rs in old if replicas_of(rs) == 0 and not (rs.get("status") or {}).get("replicas")),
                      key=revision_of)
        for rs in idle[: max(len(idle) - limit, 0)]:
            try:
                await self.ctx.api.delete(REPLICA_SETS, name_of(rs), rs["metadata"].get("namespace"))
            except ApiError as error:
                if error.code != 404:
                    raise

    # ---------------------------------------------------------------------------------------------- status

    async def _update_status(self, deployment: Obj, new: Obj | None, old: list[Obj], paused: bool) -> None:
        replicas = replicas_of(deployment)
        _, unavailable = surge_and_unavailable(deployment)
        new_counts = ReplicaCounts.of(new) if new is not None else None
        old_counts = [ReplicaCounts.of(rs) for rs in old]
        counts = deployment_status(new_counts, old_counts)
        status = dict(deployment.get("status") or {})
        conditions = list(status.get("conditions") or [])
        enough = counts.available >= replicas - unavailable
        conditions = set_condition(
            conditions, "Available", "True" if enough else "False",
            "MinimumReplicasAvailable" if enough else "MinimumReplicasUnavailable",
            "Deployment has minimum availability." if enough else "Deployment does not have minimum availability.")
        new_name = name_of(new) if new is not None else ""
        if paused:
            conditions = set_condition(conditions, "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused")
        elif new is not None and rollout_complete(replicas, new_counts, old_counts):
            conditions = set_condition(conditions, "Progressing", "True", "NewReplicaSetAvailable",
                                       f'ReplicaSet "{new_name}" has successfully progressed.')
        elif new is not None:
            conditions = set_condition(conditions, "Progressing", "True", "ReplicaSetUpdated",
                                       f'ReplicaSet "{new_name}" is progressing.')
        wanted: dict[str, Any] = {
            "observedGeneration": deployment.get("metadata", {}).get("generation", 1),
            "replicas": counts.replicas,
            "updatedReplicas": counts.updated,
            "readyReplicas": counts.ready,
            "availableReplicas": counts.available,
            "unavailableReplicas": counts.unavailable,
            "conditions": conditions,
        }
        same = all(status.get(k) == v for k, v in wanted.items() if k != "conditions") and without_times(
            status.get("conditions") or []) == without_times(conditions)
        if not same:
            await self.ctx.patch_status(self.resource, deployment, wanted)


def _annotations_stale(deployment: Obj, replica_set: Obj, revision: int) -> bool:
    wanted = replica_set_annotations(deployment, revision, annotations_of(replica_set))
    current = annotations_of(replica_set)
    return any(current.get(k) != v for k, v in wanted.items())
