"""The node-lifecycle controller of kube-controller-manager: it watches the nodes' heartbeats (their Leases in
``kube-node-lease`` and the ``lastHeartbeatTime`` of their Ready condition) and, as Kubernetes does:

- marks a node whose kubelet has been silent for ``node_monitor_grace`` (50 s by default, as kube-controller-manager
  since 1.32) ``Unknown`` (every condition; reason ``NodeStatusUnknown``, "Kubelet stopped posting node status."),
  records a ``NodeNotReady`` Event and marks the node's Pods not Ready, so they leave Services' endpoints;
- keeps the node's lifecycle taints in step with its Ready condition: ``node.kubernetes.io/unreachable`` (Unknown)
  or ``node.kubernetes.io/not-ready`` (False), each ``NoSchedule`` and ``NoExecute``, removed once it is Ready again
  (``kubesim.taints``); the taint-eviction controller (``tainteviction.py``) acts on the ``NoExecute`` ones.

Silence is measured on this controller's own clock from the moment it last saw a heartbeat change (as the real
controller does, never trusting the nodes' clocks); it looks at every node every ``node_monitor_period`` seconds and
at once when a Node or Lease changes. A controller that starts gives every node a full grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from kubesim.cluster.base.context import LEASES, NODE_LEASE_NAMESPACE, NODES, PODS, Context
from kubesim.cluster.base.events import EventRecorder
from kubesim.cluster.base.indexes import PODS_BY_NODE
from kubesim.cluster.base.objects import Obj, condition, name_of, now, set_condition
from kubesim.cluster.base.workqueue import Reconciler
from kubesim.errors import ApiError
from kubesim.taints import with_lifecycle_taints

log = logging.getLogger(__name__)

UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."


def heartbeat_signature(node: Obj, lease: Obj | None) -> tuple[str, str]:
    """What changes with every heartbeat: the Lease's ``renewTime`` and the Ready condition's
    ``lastHeartbeatTime``."""
    renewed = str(((lease or {}).get("spec") or {}).get("renewTime") or "")
    ready = condition(node, "Ready") or {}
    return renewed, str(ready.get("lastHeartbeatTime") or "")


def unknown_conditions(conditions: list[dict[str, Any]], stamp: str) -> list[dict[str, Any]]:
    """Every condition ``Unknown`` (what the controller writes for a silent node); heartbeat times stay."""
    result = []
    for entry in conditions:
        if entry.get("status") != "Unknown":
            entry = {**entry, "status": "Unknown", "reason": UNKNOWN_REASON, "message": UNKNOWN_MESSAGE,
                     "lastTransitionTime": stamp}
        result.append(entry)
    if not any(c.get("type") == "Ready" for c in result):
        result.append({"type": "Ready", "status": "Unknown", "reason": UNKNOWN_REASON, "message": UNKNOWN_MESSAGE,
                       "lastTransitionTime": stamp})
    return result


class NodeLifecycleController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.grace = ctx.options.node_monitor_grace
        self.period = ctx.options.node_monitor_period
        self.events = EventRecorder(ctx.api, "node-controller")
        self.queue: Reconciler[str] = Reconciler("node-lifecycle", self._reconcile, workers=1)
        self._heard: dict[str, tuple[tuple[str, str], float]] = {}  # node -> (heartbeat signature, seen at)
        self._monitor: asyncio.Task[None] | None = None
        ctx.informer(NODES).add_handler(self._on_node)
        ctx.informer(LEASES).add_handler(self._on_lease)

    def start(self) -> None:
        self.queue.start()
        self._monitor = asyncio.create_task(self._watch_the_clock(), name="node-lifecycle-monitor")

    async def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
            self._monitor = None
        await self.queue.stop()

    def _on_node(self, event: str, node: Obj, old: Obj | None) -> None:
        if event == "DELETED":
            self._heard.pop(name_of(node), None)
        else:
            self.queue.add(name_of(node))

    def _on_lease(self, event: str, lease: Obj, old: Obj | None) -> None:
        if lease["metadata"].get("namespace") == NODE_LEASE_NAMESPACE and event != "DELETED":
            self.queue.add(name_of(lease))

    async def _watch_the_clock(self) -> None:
        """Silence is the absence of events: look at every node each period (``--node-monitor-period``)."""
        while True:
            for node in self.ctx.informer(NODES).items():
                self.queue.add(name_of(node))
            await asyncio.sleep(self.period)  # the monitor period itself: a timer, not a wait for an event

    async def _reconcile(self, name: str) -> None:
        node = self.ctx.informer(NODES).get(None, name)
        if node is None:
            return
        lease = self.ctx.informer(LEASES).get(NODE_LEASE_NAMESPACE, name)
        signature = heartbeat_signature(node, lease)
        heard = self._heard.get(name)
        if heard is None or heard[0] != signature:
            heard = self._heard[name] = (signature, time.monotonic())
        silent = time.monotonic() - heard[1]
        ready = (condition(node, "Ready") or {}).get("status")
        if silent > self.grace and ready != "Unknown":
            node = await self._mark_unknown(node)
            ready = "Unknown"
        elif silent <= self.grace:
            self.queue.add_after(name, self.grace - silent + 0.01)  # look again when the grace period runs out
        await self._taint(node, ready)
        if ready != "True":
            await self._pods_not_ready(name)

    async def _mark_unknown(self, node: Obj) -> Obj:
        conditions = unknown_conditions(list(node.get("status", {}).get("conditions") or []), now())
        try:
            node = await self.ctx.api.patch(NODES, name_of(node), {"status": {"conditions": conditions}},
                                            subresource="status")
        except ApiError as error:
            if error.code != 404:
                raise
            return node
        await self.events.record(node, "Node", "v1", "Normal", "NodeNotReady",
                                 f"Node {name_of(node)} status is now: NodeNotReady")
        return node

    async def _taint(self, node: Obj, ready: str | None) -> None:
        current = list((node.get("spec") or {}).get("taints") or [])
        wanted = with_lifecycle_taints(current, ready, now())
        if wanted == current:
            return
        with contextlib.suppress(ApiError):
            await self.ctx.api.patch(NODES, name_of(node), {"spec": {"taints": wanted or None}})

    async def _pods_not_ready(self, node: str) -> None:
        """The Pods of a node that is not Ready are not Ready either (``MarkPodsNotReady``)."""
        for pod in self.ctx.informer(PODS).by_index(PODS_BY_NODE, node):
            ready = condition(pod, "Ready")
            if ready is None or ready.get("status") != "True":
                continue
            conditions = set_condition(list(pod.get("status", {}).get("conditions") or []), "Ready", "False",
                                       "NodeNotReady", f"node {node} is not ready")
            try:
                await self.ctx.api.patch(PODS, name_of(pod), {"status": {"conditions": conditions}},
                                         namespace=pod["metadata"].get("namespace"), subresource="status")
            except ApiError as error:
                if error.code != 404:
                    raise
                continue
            await self.events.record(pod, "Pod", "v1", "Warning", "NodeNotReady", "Node is not ready")
