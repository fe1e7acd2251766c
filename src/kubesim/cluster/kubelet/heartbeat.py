"""A kubelet's heartbeats, as the real kubelet sends them: it renews its node's Lease in ``kube-node-lease`` every
quarter of the lease duration (``node_lease_renew``), and reports the node status (conditions with a fresh
``lastHeartbeatTime``) at start and then every ``node_status_report`` seconds when nothing changed. A stopped
kubelet sends neither, and the node-lifecycle controller notices (``controllers/nodelifecycle.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from typing import Any

from kubesim.cluster.base.context import LEASES, NODE_LEASE_NAMESPACE, NODES, Context
from kubesim.cluster.base.objects import Obj, name_of, now, uid_of
from kubesim.errors import ApiError

log = logging.getLogger(__name__)


def micro_time(moment: datetime.datetime | None = None) -> str:
    """A ``MicroTime`` as the API writes it (``2026-11-27T10:00:00.123456Z``)."""
    return (moment or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_lease(node: Obj, duration: float, renewed: str) -> Obj:
    """The node's Lease as the kubelet writes it: held by the node, owned by the Node object."""
    name = name_of(node)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid_of(node)}]},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": int(duration), "renewTime": renewed},
    }


def heartbeat_conditions(conditions: list[dict[str, Any]], stamp: str) -> list[dict[str, Any]]:
    """The kubelet's conditions, each with ``lastHeartbeatTime`` now; Ready is ``KubeletReady``."""
    result = []
    for condition in conditions:
        condition = {**condition, "lastHeartbeatTime": stamp}
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            condition.update(status="True", reason="KubeletReady", message="kubelet is posting ready status",
                             lastTransitionTime=stamp)
        elif condition.get("type") != "Ready" and condition.get("status") == "Unknown":
            condition.update(status="False", lastTransitionTime=stamp)
        result.append(condition)
    return result


class NodeHeartbeat:
    def __init__(self, ctx: Context, node: str) -> None:
        self.ctx = ctx
        self.node = node
        options = ctx.options
        self.duration = options.node_lease_duration
        self.renew = options.node_lease_renew or self.duration / 4
        self.report = options.node_status_report
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"heartbeat:{self.node}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        next_report = 0.0
        while True:
            try:
                await self._renew_lease()
                if time.monotonic() >= next_report:
                    await self._report_status()
                    next_report = time.monotonic() + self.report
            except asyncio.CancelledError:
                raise
            except Exception as error:  # an API hiccup: the next beat tries again
                log.warning("node %s: heartbeat failed: %s", self.node, error)
            await asyncio.sleep(self.renew)  # the heartbeat's own period: a timer, not a wait for an event

    async def _renew_lease(self) -> None:
        renewed = micro_time()
        try:
            await self.ctx.api.patch(LEASES, self.node, {"spec": {"holderIdentity": self.node,
                                                                  "leaseDurationSeconds": int(self.duration),
                                                                  "renewTime": renewed}},
                                     namespace=NODE_LEASE_NAMESPACE)
            return
        except ApiError as error:
            if error.code != 404:
                raise
        node = self.ctx.informer(NODES).get(None, self.node)
        if node is None:
            node = await self.ctx.api.get(NODES, self.node)
        try:
            await self.ctx.api.create(LEASES, node_lease(node, self.duration, renewed), namespace=NODE_LEASE_NAMESPACE)
        except ApiError as error:
            if error.code != 409:
                raise

    async def _report_status(self) -> None:
        node = await self.ctx.api.get(NODES, self.node)
        conditions = heartbeat_conditions(list(node.get("status", {}).get("conditions") or []), now())
        await self.ctx.api.patch(NODES, self.node, {"status": {"conditions": conditions}}, subresource="status")
