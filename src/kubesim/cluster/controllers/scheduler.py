"""The scheduler: binds Pending Pods to Ready nodes.

Honours ``nodeSelector``, required node affinity, unschedulable (cordoned) nodes (unless the Pod tolerates
``node.kubernetes.io/unschedulable``, as DaemonSet Pods do), ``NoSchedule`` and ``NoExecute`` taints the Pod does
not tolerate (a node the node-lifecycle controller tainted not-ready or unreachable), the node affinity of bound
PVs, and delayed binding: for unbound ``WaitForFirstConsumer`` claims it picks a node, writes
``volume.kubernetes.io/selected-node`` on the claims and binds the Pod only once the provisioner has bound them.
Pods that fit nowhere get ``PodScheduled=False`` and a ``FailedScheduling`` Event saying why.
"""

from __future__ import annotations

import logging
from collections import Counter

from kubesim.cluster.base.context import NODES, PODS, PVCS, PVS, STORAGE_CLASSES, Context
from kubesim.cluster.base.events import EventRecorder
from kubesim.cluster.base.indexes import ACTIVE_PODS_BY_NODE, PODS_BY_NODE, active_pod_node, pod_node
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import (
    Obj,
    annotations_of,
    condition,
    condition_true,
    controller_of,
    is_terminating,
    name_of,
    set_condition,
    uid_of,
    without_times,
)
from kubesim.cluster.base.storage import claim_names, storage_class_of
from kubesim.cluster.base.workqueue import Reconciler
from kubesim.cluster.controllers.matching import pod_fits_node, pv_fits_node, tolerates
from kubesim.errors import ApiError
from kubesim.taints import NOT_READY, UNREACHABLE, untolerated

log = logging.getLogger(__name__)

SELECTED_NODE = "volume.kubernetes.io/selected-node"
SCHEDULER_NAMES = ("", "default-scheduler")
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


class Unschedulable(Exception):
    """The Pod cannot be placed right now; the message is what users see in the condition and Event."""


class Scheduler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.events = EventRecorder(ctx.api, "default-scheduler")
        self.queue: Reconciler[Key] = Reconciler("scheduler", self._schedule, workers=1, backoff=(0.2, 5.0))
        self._assumed: dict[Key, str] = {}
        self._reported: dict[str, str] = {}  # Pod uid -> last FailedScheduling message
        ctx.informer(PODS).add_handler(self._on_pod)
        ctx.informer(PODS).add_index(PODS_BY_NODE, pod_node)
        ctx.informer(PODS).add_index(ACTIVE_PODS_BY_NODE, active_pod_node)
        for resource in (NODES, PVCS, PVS, STORAGE_CLASSES):
            ctx.informer(resource).add_handler(self._on_world_change)

    def start(self) -> None:
        self.queue.start()
        self._on_world_change("SYNC", {}, None)

    async def stop(self) -> None:
        await self.queue.stop()

    def _pending(self, pod: Obj) -> bool:
        spec = pod.get("spec", {})
        return (
            not spec.get("nodeName")
            and not is_terminating(pod)
            and spec.get("schedulerName", "") in SCHEDULER_NAMES
        )

    def _on_pod(self, event: str, pod: Obj, old: Obj | None) -> None:
        key = (pod["metadata"].get("namespace", ""), name_of(pod))
        if event == "DELETED" or not self._pending(pod):
            self._assumed.pop(key, None)
            self._reported.pop(uid_of(pod), None)
            return
        self.queue.add(key)

    def _on_world_change(self, event: str, obj: Obj, old: Obj | None) -> None:
        for pod in self.ctx.informer(PODS).by_index(PODS_BY_NODE, ""):  # the unscheduled ones
            if self._pending(pod):
                self.queue.add((pod["metadata"].get("namespace", ""), name_of(pod)))

    def _pods_per_node(self, nodes: list[str]) -> Counter[str]:
        pods = self.ctx.informer(PODS)
        counts: Counter[str] = Counter({node: pods.count(ACTIVE_PODS_BY_NODE, node) for node in nodes})
        for key, node in self._assumed.items():
            assumed = self.ctx.informer(PODS).get(*key)
            if assumed is not None and not assumed.get("spec", {}).get("nodeName"):
                counts[node] += 1
        return counts

    async def _schedule(self, key: Key) -> None:
        pod = self.ctx.informer(PODS).get(*key)
        if pod is None or not self._pending(pod):
            return
        try:
            node, delayed = self._place(pod)
        except Unschedulable as reason:
            # no timed retry: every change that could make room (nodes, claims, volumes, classes, the Pod
            # itself) brings the Pod back through the watches
            await self._mark_unschedulable(pod, str(reason))
            return
        if delayed:
            await self._select_node_for_claims(delayed, node)
            self._assumed[key] = node
            return  # the claims' binding events bring the Pod back here
        await self._bind(pod, node)

    def _place(self, pod: Obj) -> tuple[str, list[Obj]]:
        """The node for ``pod`` and the unbound WaitForFirstConsumer claims that must be provisioned first."""
        namespace = pod["metadata"].get("namespace", "")
        bound_pvs: list[Obj] = []
        delayed: list[Obj] = []
        for _volume, claim, ephemeral in claim_names(pod):
            pvc = self.ctx.informer(PVCS).get(namespace, claim)
            if pvc is None:
                if ephemeral:
                    raise Unschedulable(
                        f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{claim}"'
                    )
                raise Unschedulable(f'persistentvolumeclaim "{claim}" not found')
            if ephemeral:
                owner = controller_of(pvc)
                if owner is None or owner.get("uid") != uid_of(pod):
                    raise Unschedulable(
                        f"PVC {namespace}/{claim} was not created for pod {namespace}/{name_of(pod)} "
                        "(pod is not owner)"
                    )
            if is_terminating(pvc):
                raise Unschedulable(f'persistentvolumeclaim "{claim}" is being deleted')
            volume_name_bound = pvc.get("spec", {}).get("volumeName")
            if volume_name_bound:
                pv = self.ctx.informer(PVS).get(None, volume_name_bound)
                if pv is None:
                    raise Unschedulable(f'persistentvolume "{volume_name_bound}" not found')
                bound_pvs.append(pv)
                continue
            storage_class = storage_class_of(self.ctx, pvc)
            if storage_class is not None and storage_class.get("volumeBindingMode") == "WaitForFirstConsumer":
                delayed.append(pvc)
            else:
                raise Unschedulable("pod has unbound immediate PersistentVolumeClaims")

        reasons: Counter[str] = Counter()
        feasible: list[str] = []
        nodes = self.ctx.informer(NODES).items()
        for node in nodes:
            reason = self._node_problem(pod, node, bound_pvs)
            if reason:
                reasons[reason] += 1
            else:
                feasible.append(name_of(node))
        if not feasible:
            detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
            raise Unschedulable(
                f"0/{len(nodes)} nodes are available: {detail}." if nodes else "no nodes available"
            )
        # keep a node already selected for the claims while it still fits
        for pvc in delayed:
            selected = annotations_of(pvc).get(SELECTED_NODE)
            if selected in feasible:
                return selected, delayed
        counts = self._pods_per_node(feasible)
        return min(feasible, key=lambda n: (counts[n], n)), delayed

    def _node_problem(self, pod: Obj, node: Obj, bound_pvs: list[Obj]) -> str | None:
        if is_terminating(node):
            return "node(s) were being deleted"
        if not condition_true(node, "Ready"):
            # what the node-lifecycle controller's taint says (it may not be written yet)
            unknown = (condition(node, "Ready") or {}).get("status", "Unknown") == "Unknown"
            lifecycle_key = UNREACHABLE if unknown else NOT_READY
            if not tolerates(pod, lifecycle_key, "NoSchedule"):
                return f"node(s) had untolerated taint {{{lifecycle_key}: }}"
        if node.get("spec", {}).get("unschedulable") and not tolerates(pod, UNSCHEDULABLE_TAINT, "NoSchedule"):
            return "node(s) were unschedulable"
        taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != UNSCHEDULABLE_TAINT]
        refused = untolerated(pod, taints)
        if refused:
            taint = refused[0]
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
        reason = pod_fits_node(pod, node)
        if reason:
            return reason
        if any(not pv_fits_node(pv, node) for pv in bound_pvs):
            return "node(s) had volume node affinity conflict"
        return None

    async def _select_node_for_claims(self, claims: list[Obj], node: str) -> None:
        for pvc in claims:
            if annotations_of(pvc).get(SELECTED_NODE) == node:
                continue
            await self.ctx.api.patch(
                PVCS,
                name_of(pvc),
                {"metadata": {"annotations": {SELECTED_NODE: node}}},
                namespace=pvc["metadata"].get("namespace"),
            )

    async def _bind(self, pod: Obj, node: str) -> None:
        """``pods/<name>/binding``, as kube-scheduler binds: the API server sets nodeName and PodScheduled=True."""
        namespace = pod["metadata"].get("namespace", "")
        name = name_of(pod)
        try:
            await self.ctx.api.bind(namespace, name, node)
        except ApiError as error:
            if error.code in (404, 409):  # gone, bound by someone else, or being deleted
                return
            raise
        self._assumed[(namespace, name)] = node
        await self.events.record(
            pod, "Pod", "v1", "Normal", "Scheduled", f"Successfully assigned {namespace}/{name} to {node}"
        )

    async def claim_failed(self, pvc: Obj, text: str) -> None:
        """The external-provisioner could not provision ``pvc`` for the node this scheduler chose. As
        kube-scheduler's VolumeBinding PreBind reports it, the Pods waiting for the claim say so (PodScheduled=False
        and a FailedScheduling Event), with the provisioner's error, instead of an older message (such as the wait for
        the ephemeral volume controller) that no longer applies."""
        namespace, claim = pvc["metadata"].get("namespace", ""), name_of(pvc)
        message = (f'running PreBind plugin "VolumeBinding": binding volumes: provisioning failed for PVC "{claim}": '
                   f"{text}")
        for pod in self.ctx.informer(PODS).items():
            if pod["metadata"].get("namespace", "") != namespace or pod.get("spec", {}).get("nodeName"):
                continue
            if any(name == claim for _volume, name, _ephemeral in claim_names(pod)):
                await self._mark_unschedulable(pod, message, reason="SchedulerError")

    async def _mark_unschedulable(self, pod: Obj, message: str, reason: str = "Unschedulable") -> None:
        current = condition(pod, "PodScheduled")
        if not (current and current.get("status") == "False" and current.get("message") == message):
            conditions = set_condition(
                list(pod.get("status", {}).get("conditions") or []),
                "PodScheduled",
                "False",
                reason,
                message,
            )
            if without_times(conditions) != without_times(pod.get("status", {}).get("conditions") or []):
                await self.ctx.patch_status(PODS, pod, {"phase": "Pending", "conditions": conditions})
        if self._reported.get(uid_of(pod)) != message:
            self._reported[uid_of(pod)] = message
            await self.events.record(pod, "Pod", "v1", "Warning", "FailedScheduling", message)
