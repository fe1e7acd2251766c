"""What the StatefulSet and Deployment controllers share: one queue of workloads fed by two watches.

A change to a workload, or to any Pod that names a workload of that kind as its controller, queues the workload;
the subclass reconciles it.
"""

from __future__ import annotations

from typing import Any

from kubesim.errors import ApiError

from .context import PODS, Context
from .events import EventRecorder
from .informer import Key
from .objects import Obj, controller_of, name_of
from .workqueue import Reconciler


class WorkloadController:
    def __init__(self, ctx: Context, *, resource: str, kind: str, component: str) -> None:
        self.ctx = ctx
        self.resource = resource
        self.kind = kind
        self.events = EventRecorder(ctx.api, component)
        self.queue: Reconciler[Key] = Reconciler(kind.lower(), self._reconcile, workers=2)
        ctx.informer(resource).add_handler(self._on_workload)
        ctx.informer(PODS).add_handler(self._on_pod)

    def start(self) -> None:
        self.queue.start()
        for workload in self.ctx.informer(self.resource).items():
            self._on_workload("SYNC", workload, None)

    async def stop(self) -> None:
        await self.queue.stop()

    def _on_workload(self, event: str, workload: Obj, old: Obj | None) -> None:
        if event != "DELETED":
            self.queue.add((workload["metadata"].get("namespace", ""), name_of(workload)))

    def _on_pod(self, event: str, pod: Obj, old: Obj | None) -> None:
        owner = controller_of(pod)
        if owner and owner.get("kind") == self.kind:
            self.queue.add((pod["metadata"].get("namespace", ""), owner.get("name", "")))

    async def _reconcile(self, key: Key) -> None:
        raise NotImplementedError

    async def _write_status(self, workload: Obj, status: dict[str, Any]) -> None:
        """Patch the workload's status (callers skip unchanged ones); a workload deleted meanwhile is fine."""
        try:
            await self.ctx.api.patch(
                self.resource,
                name_of(workload),
                {"status": status},
                namespace=workload["metadata"].get("namespace"),
                subresource="status",
            )
        except ApiError as error:
            if error.code != 404:
                raise
