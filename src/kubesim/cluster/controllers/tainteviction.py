"""The taint-eviction controller (kube-controller-manager's, formerly the NoExecute taint manager): a Pod on a node
with ``NoExecute`` taints it does not tolerate is deleted at once; one that tolerates them for
``tolerationSeconds`` is deleted when that time, counted from the taint's ``timeAdded``, runs out
(``kubesim.taints.eviction_delay``), unless the taint is gone by then. Each eviction is a ``TaintManagerEviction``
Event. The deletion is an ordinary one: on a node whose kubelet is gone the Pod stays ``Terminating`` until the node
comes back or the Pod is force-deleted, as on a real cluster; a ReplicaSet replaces it meanwhile, a StatefulSet
waits for it."""

from __future__ import annotations

import datetime
import logging

from kubesim.cluster.base.context import NODES, PODS, Context
from kubesim.cluster.base.events import EventRecorder
from kubesim.cluster.base.indexes import PODS_BY_NODE
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import Obj, is_terminating, name_of
from kubesim.cluster.base.workqueue import Reconciler
from kubesim.errors import ApiError
from kubesim.taints import eviction_delay

log = logging.getLogger(__name__)


class TaintEvictionController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.events = EventRecorder(ctx.api, "taint-eviction-controller")
        self.queue: Reconciler[Key] = Reconciler("taint-eviction", self._reconcile, workers=1)
        ctx.informer(NODES).add_handler(self._on_node)
        ctx.informer(PODS).add_handler(self._on_pod)

    def start(self) -> None:
        self.queue.start()
        for node in self.ctx.informer(NODES).items():
            self._on_node("SYNC", node, None)

    async def stop(self) -> None:
        await self.queue.stop()

    def _on_node(self, event: str, node: Obj, old: Obj | None) -> None:
        taints = (node.get("spec") or {}).get("taints") or []
        before = ((old or {}).get("spec") or {}).get("taints") or []
        if event == "DELETED" or (taints == before and event == "MODIFIED"):
            return
        for pod in self.ctx.informer(PODS).by_index(PODS_BY_NODE, name_of(node)):
            self.queue.add((pod["metadata"].get("namespace", ""), name_of(pod)))

    def _on_pod(self, event: str, pod: Obj, old: Obj | None) -> None:
        if event != "DELETED" and pod.get("spec", {}).get("nodeName") and not is_terminating(pod):
            self.queue.add((pod["metadata"].get("namespace", ""), name_of(pod)))

    async def _reconcile(self, key: Key) -> None:
        pod = self.ctx.informer(PODS).get(*key)
        if pod is None or is_terminating(pod):
            return
        node = self.ctx.informer(NODES).get(None, str(pod.get("spec", {}).get("nodeName") or ""))
        if node is None:
            return
        delay = eviction_delay(pod, (node.get("spec") or {}).get("taints") or [], datetime.datetime.now(datetime.UTC))
        if delay is None:
            return
        if delay > 0:
            self.queue.add_after(key, delay)
            return
        try:
            await self.ctx.api.delete(PODS, name_of(pod), key[0])
        except ApiError as error:
            if error.code != 404:
                raise
            return
        await self.events.record(pod, "Pod", "v1", "Normal", "TaintManagerEviction",
                                 f"Marking for deletion Pod {key[0]}/{key[1]}")
