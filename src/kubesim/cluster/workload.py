"""What the StatefulSet and Deployment controllers share: one queue of workloads fed by two watches.

A change to a workload, or to any Pod that names a workload of that kind as its controller, queues the workload;
the subclass reconciles it. Creating and deleting the workload's Pods and claims, with the Events Kubernetes'
controllers record for that, is shared too; only the messages differ.
"""

from __future__ import annotations

from kubesim.errors import ApiError

from .context import PODS, Context
from .events import EventRecorder
from .indexes import BY_CONTROLLER, controller_uid
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
        ctx.informer(PODS).add_index(BY_CONTROLLER, controller_uid)

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

    async def _record(self, workload: Obj, type_: str, reason: str, message: str) -> None:
        await self.events.record(workload, self.kind, "apps/v1", type_, reason, message)

    async def _create_for(
        self, workload: Obj, resource: str, body: Obj, *, failed: str, created: str
    ) -> None:
        """Create a Pod or claim of the workload: one that already exists (409) is left as it is, silently;
        any other failure is recorded as ``FailedCreate`` (``failed`` + the API message) and raised."""
        try:
            await self.ctx.api.create(resource, body, namespace=body["metadata"]["namespace"])
        except ApiError as error:
            if error.code == 409:
                return
            await self._record(workload, "Warning", "FailedCreate", f"{failed}{error.message}")
            raise
        await self._record(workload, "Normal", "SuccessfulCreate", created)

    async def _delete_pod(self, workload: Obj, pod: Obj, deleted: str) -> None:
        """Delete one of the workload's Pods; one already gone is fine and records nothing."""
        try:
            await self.ctx.api.delete(PODS, name_of(pod), pod["metadata"].get("namespace"))
        except ApiError as error:
            if error.code != 404:
                raise
            return
        await self._record(workload, "Normal", "SuccessfulDelete", deleted)
