"""Generic ephemeral volumes: ``pod.spec.volumes[].ephemeral`` becomes a PVC ``<pod>-<volume>`` owned by the Pod.

The claim has the Pod as controller owner, so the API server's garbage collector deletes it with the Pod.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from kubesim.cluster.base.context import PODS, PVCS, Context
from kubesim.cluster.base.events import EventRecorder
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import Obj, controller_of, is_terminating, name_of, owner_reference, uid_of
from kubesim.cluster.base.workqueue import Reconciler
from kubesim.errors import ApiError

log = logging.getLogger(__name__)


class EphemeralVolumeController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.events = EventRecorder(ctx.api, "ephemeral-volume-controller")
        self.queue: Reconciler[Key] = Reconciler("ephemeral", self._reconcile, workers=2)
        ctx.informer(PODS).add_handler(self._on_pod)
        ctx.informer(PVCS).add_handler(self._on_claim)

    def start(self) -> None:
        self.queue.start()
        for pod in self.ctx.informer(PODS).items():
            self._on_pod("SYNC", pod, None)

    async def stop(self) -> None:
        await self.queue.stop()

    def _on_pod(self, event: str, pod: Obj, old: Obj | None) -> None:
        if event == "DELETED":
            return
        if any(v.get("ephemeral") for v in pod.get("spec", {}).get("volumes") or []):
            self.queue.add((pod["metadata"].get("namespace", ""), name_of(pod)))

    def _on_claim(self, event: str, pvc: Obj, old: Obj | None) -> None:
        owner = controller_of(pvc)
        if event == "DELETED" and owner and owner.get("kind") == "Pod":
            self.queue.add((pvc["metadata"].get("namespace", ""), owner.get("name", "")))

    async def _reconcile(self, key: Key) -> None:
        pod = self.ctx.informer(PODS).get(*key)
        if pod is None or is_terminating(pod):
            return
        namespace = key[0]
        for volume in pod.get("spec", {}).get("volumes") or []:
            ephemeral = volume.get("ephemeral")
            if not ephemeral:
                continue
            claim_name = f"{name_of(pod)}-{volume.get('name', '')}"
            existing = self.ctx.informer(PVCS).get(namespace, claim_name)
            if existing is not None:
                if (controller_of(existing) or {}).get("uid") != uid_of(pod):
                    await self.events.record(
                        pod,
                        "Pod",
                        "v1",
                        "Warning",
                        "FailedBinding",
                        f"PVC {namespace}/{claim_name} was not created for pod {namespace}/{name_of(pod)} "
                        "(pod is not owner)",
                    )
                continue
            template = ephemeral.get("volumeClaimTemplate") or {}
            template_meta = template.get("metadata") or {}
            metadata: dict[str, Any] = {
                "name": claim_name,
                "namespace": namespace,
                "ownerReferences": [owner_reference(pod, "v1", "Pod")],
            }
            for field in ("labels", "annotations"):
                if template_meta.get(field):
                    metadata[field] = dict(template_meta[field])
            body = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": metadata,
                "spec": copy.deepcopy(template.get("spec") or {}),
            }
            try:
                await self.ctx.api.create(PVCS, body, namespace=namespace)
            except ApiError as error:
                if error.code != 409:
                    raise
