"""What the workload controllers (StatefulSet, ReplicaSet, Deployment, Job) share: one queue of workloads fed by two watches.

A change to a workload, or to any Pod that names a workload of that kind as its controller, queues the workload;
the subclass reconciles it. Creating and deleting the workload's Pods and claims, with the Events Kubernetes'
controllers record for that, is shared too; only the messages differ.
"""

from __future__ import annotations

from kubesim.cluster.base.context import PODS, Context
from kubesim.cluster.base.events import EventRecorder
from kubesim.cluster.base.indexes import BY_CONTROLLER, controller_uid
from kubesim.cluster.base.informer import Informer, Key
from kubesim.cluster.base.objects import Obj, controller_of, name_of, uid_of
from kubesim.cluster.base.workqueue import Reconciler
from kubesim.errors import ApiError


class WorkloadController:
    """``children``: the resource whose objects the workload controls (Pods; a Deployment's ReplicaSets)."""

    def __init__(self, ctx: Context, *, resource: str, kind: str, component: str, children: str = PODS,
                 api_version: str = "apps/v1") -> None:
        self.ctx = ctx
        self.resource = resource
        self.kind = kind
        self.api_version = api_version
        self.children = children
        self.events = EventRecorder(ctx.api, component)
        self.expectations = Expectations()
        self.queue: Reconciler[Key] = Reconciler(kind.lower(), self._reconcile, workers=2)
        ctx.informer(resource).add_handler(self._on_workload)
        ctx.informer(children).add_handler(self._on_pod)
        ctx.informer(children).add_index(BY_CONTROLLER, controller_uid)

    def start(self) -> None:
        self.queue.start()
        for workload in self.ctx.informer(self.resource).items():
            self._on_workload("SYNC", workload, None)

    async def stop(self) -> None:
        await self.queue.stop()

    def _on_workload(self, event: str, workload: Obj, old: Obj | None) -> None:
        key = (workload["metadata"].get("namespace", ""), name_of(workload))
        if event == "DELETED":
            self.expectations.forget(key)
        else:
            self.queue.add(key)

    def _on_pod(self, event: str, pod: Obj, old: Obj | None) -> None:
        owner = controller_of(pod)
        if owner and owner.get("kind") == self.kind:
            self.queue.add((pod["metadata"].get("namespace", ""), owner.get("name", "")))

    def _children_of(self, workload: Obj) -> list[Obj]:
        """The objects of ``children`` the workload controls (by the controller index), in its namespace."""
        namespace = workload["metadata"].get("namespace", "")
        return [c for c in self.ctx.informer(self.children).by_index(BY_CONTROLLER, uid_of(workload))
                if c["metadata"].get("namespace", "") == namespace]

    async def _reconcile(self, key: Key) -> None:
        raise NotImplementedError

    async def _record(self, workload: Obj, type_: str, reason: str, message: str) -> None:
        await self.events.record(workload, self.kind, self.api_version, type_, reason, message)

    async def _create_for(
        self, workload: Obj, resource: str, body: Obj, *, failed: str, created: str
    ) -> Obj | None:
        """Create a Pod or claim of the workload (None: one that already exists, 409, left as it is, silently);
        any other failure is recorded as ``FailedCreate`` (``failed`` + the API message) and raised. ``created`` may
        name the object with ``{name}`` (generated names are known once created)."""
        try:
            made = await self.ctx.api.create(resource, body, namespace=body["metadata"]["namespace"])
        except ApiError as error:
            if error.code == 409:
                return None
            await self._record(workload, "Warning", "FailedCreate", f"{failed}{error.message}")
            raise
        await self._record(workload, "Normal", "SuccessfulCreate", created.format(name=name_of(made)))
        return made

    async def _delete_pod(self, workload: Obj, pod: Obj, deleted: str) -> None:
        """Delete one of the workload's Pods; one already gone is fine and records nothing."""
        try:
            await self.ctx.api.delete(PODS, name_of(pod), pod["metadata"].get("namespace"))
        except ApiError as error:
            if error.code != 404:
                raise
            return
        await self._record(workload, "Normal", "SuccessfulDelete", deleted)


class Expectations:
    """Writes a controller made that its informer has not shown yet (client-go's ControllerExpectations): Pods it
    created (seen once the informer reached their resourceVersion) and Pods it deleted (seen once the informer shows
    them gone or terminating). A workload with unseen writes is not reconciled again, so the same Pod is not made
    twice because the cache lagged."""

    def __init__(self) -> None:
        self._created: dict[Key, list[str]] = {}  # workload -> resourceVersions of Pods it created
        self._deleted: dict[Key, list[tuple[Key, str]]] = {}  # workload -> (Pod key, uid) it deleted

    def written(self, workload: Key, obj: Obj) -> None:
        """``obj`` was created or changed by this controller: wait until the informer has seen that write."""
        self._created.setdefault(workload, []).append(str(obj.get("metadata", {}).get("resourceVersion") or "0"))

    def deleted(self, workload: Key, pod: Obj) -> None:
        key = (pod["metadata"].get("namespace", ""), name_of(pod))
        self._deleted.setdefault(workload, []).append((key, str(pod["metadata"].get("uid", ""))))

    def satisfied(self, workload: Key, informer: Informer) -> bool:
        created = [rv for rv in self._created.get(workload, []) if not informer.has_seen(rv)]
        deleted = []
        for key, uid in self._deleted.get(workload, []):
            pod = informer.get(*key)
            if pod is not None and pod["metadata"].get("uid") == uid and not pod["metadata"].get("deletionTimestamp"):
                deleted.append((key, uid))
        if created:
            self._created[workload] = created
        else:
            self._created.pop(workload, None)
        if deleted:
            self._deleted[workload] = deleted
        else:
            self._deleted.pop(workload, None)
        return not created and not deleted

    def forget(self, workload: Key) -> None:
        self._created.pop(workload, None)
        self._deleted.pop(workload, None)
