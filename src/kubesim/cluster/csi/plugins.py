"""CSI node-plugin registration on one node, as node-driver-registrar and kubelet's plugin manager do it.

A plugin is registered when its socket appears under ``<kubelet_dir>/plugins/<driver>/csi.sock`` (inotify, see
``plugin_watch``) or when ``register`` is called: ``GetPluginInfo`` must name the driver, ``NodeGetInfo`` gives
the node ID and topology, which go into the node's CSINode entry (topology keys) and Node labels (segments)
plus the ``csi.volume.kubernetes.io/nodeid`` annotation. A vanished socket unregisters the plugin.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from csi_proto import csi_pb2
from kubesim.cluster.base.background import BackgroundTasks
from kubesim.cluster.base.context import CSI_NODES, NODES, Context
from kubesim.cluster.base.objects import check_dns_subdomain, owner_reference
from kubesim.cluster.csi.client import CsiConnection, wait_for_plugin
from kubesim.cluster.csi.plugin_watch import SocketWatcher
from kubesim.errors import ApiError

log = logging.getLogger(__name__)

NODE_ID_ANNOTATION = "csi.volume.kubernetes.io/nodeid"


@dataclass
class NodePlugin:
    driver: str
    endpoint: str
    connection: CsiConnection
    node_id: str
    stage_unstage: bool
    single_node_multi_writer: bool  # node capability SINGLE_NODE_MULTI_WRITER
    volume_mount_group: bool  # node capability VOLUME_MOUNT_GROUP: kubelet passes the Pod's fsGroup


class PluginRegistry:
    def __init__(self, ctx: Context, node: str, on_change: Callable[[], None]) -> None:
        self.ctx = ctx
        self.node = node
        self.root = ctx.kubelet_dir(node)
        self.on_change = on_change
        self.plugins: dict[str, NodePlugin] = {}
        self._registration_locks: dict[str, asyncio.Lock] = {}
        self._watcher: SocketWatcher | None = None
        self._background = BackgroundTasks()

    def start(self) -> None:
        (self.root / "plugins").mkdir(parents=True, exist_ok=True)
        (self.root / "plugins_registry").mkdir(parents=True, exist_ok=True)
        if self.ctx.options.discover_plugins:
            self._watcher = SocketWatcher(self.root / "plugins", self._socket_added, self._socket_removed)
            self._watcher.start()

    async def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        await self._background.cancel_all()
        for plugin in self.plugins.values():
            await plugin.connection.close()
        self.plugins.clear()

    def _socket_added(self, driver: str, socket: Path) -> None:
        try:
            check_dns_subdomain(driver, "CSI driver name")
        except ValueError as error:
            log.warning("node %s: ignoring plugin socket %s: %s", self.node, socket, error)
            return
        self._background.spawn(self._auto_register(driver, f"unix://{socket}"))

    async def _auto_register(self, driver: str, endpoint: str) -> None:
        async with self._registration_locks.setdefault(driver, asyncio.Lock()):
            current = self.plugins.get(driver)
            if current is not None and current.endpoint == endpoint:
                return  # registered explicitly meanwhile
        try:
            await self.register(driver, endpoint)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("node %s: registering plugin %s at %s failed: %s", self.node, driver, endpoint, error)

    def _socket_removed(self, driver: str, socket: Path) -> None:
        self._background.spawn(self.deregister(driver, f"unix://{socket}"))

    async def deregister(self, driver: str, endpoint: str) -> None:
        """The plugin's registration is gone (its registrar stopped, or its socket vanished): forget the plugin and
        drop it from CSINode, as kubelet does. Nothing happens when another endpoint is registered meanwhile."""
        async with self._registration_locks.setdefault(driver, asyncio.Lock()):
            plugin = self.plugins.get(driver)
            if plugin is None or plugin.endpoint != endpoint:
                return
            del self.plugins[driver]
            await plugin.connection.close()
            try:
                current = await self.ctx.api.get(CSI_NODES, self.node)
                drivers = [d for d in current.get("spec", {}).get("drivers") or [] if d.get("name") != driver]
                await self.ctx.api.update(
                    CSI_NODES, {**current, "spec": {**current.get("spec", {}), "drivers": drivers}}
                )
            except ApiError as error:
                log.info("node %s: could not drop %s from CSINode: %s", self.node, driver, error)

    async def register(self, driver: str, endpoint: str) -> None:
        """Register (or refresh) a node plugin; the same endpoint keeps its existing connection."""
        check_dns_subdomain(driver, "CSI driver name")
        async with self._registration_locks.setdefault(driver, asyncio.Lock()):
            await self._register_locked(driver, endpoint)

    async def _register_locked(self, driver: str, endpoint: str) -> None:
        old = self.plugins.get(driver)
        reuse = old is not None and old.endpoint == endpoint
        connection = old.connection if old is not None and reuse else CsiConnection(endpoint)
        timeout = self.ctx.options.rpc_timeout
        try:
            name = await wait_for_plugin(connection, self.ctx.options.plugin_wait_timeout, timeout)
            if name != driver:
                raise ValueError(f"plugin at {endpoint} is {name!r}, not {driver!r}")
            info = await connection.node.NodeGetInfo(csi_pb2.NodeGetInfoRequest(), timeout=timeout)
            capabilities = await connection.node.NodeGetCapabilities(
                csi_pb2.NodeGetCapabilitiesRequest(), timeout=timeout
            )
        except BaseException:
            if not reuse:
                await connection.close()
            raise
        if not info.node_id:
            if not reuse:
                await connection.close()
            raise ValueError(f"plugin {driver!r} on node {self.node} returned an empty node_id")
        rpcs = {cap.rpc.type for cap in capabilities.capabilities if cap.HasField("rpc")}
        topology = dict(info.accessible_topology.segments)
        await self._update_csi_node(driver, info.node_id, sorted(topology), int(info.max_volumes_per_node))
        await self._update_node_labels(driver, info.node_id, topology)
        registration = self.root / "plugins_registry" / f"{driver}-reg.json"
        registration.write_text(json.dumps({"driver": driver, "endpoint": endpoint, "nodeID": info.node_id}))
        self.plugins[driver] = NodePlugin(
            driver=driver,
            endpoint=endpoint,
            connection=connection,
            node_id=info.node_id,
            stage_unstage=csi_pb2.NodeServiceCapability.RPC.STAGE_UNSTAGE_VOLUME in rpcs,
            single_node_multi_writer=csi_pb2.NodeServiceCapability.RPC.SINGLE_NODE_MULTI_WRITER in rpcs,
            volume_mount_group=csi_pb2.NodeServiceCapability.RPC.VOLUME_MOUNT_GROUP in rpcs,
        )
        if old is not None and not reuse:
            await old.connection.close()
        self.on_change()

    async def _update_csi_node(self, driver: str, node_id: str, keys: list[str], max_volumes: int) -> None:
        entry: dict[str, Any] = {"name": driver, "nodeID": node_id}
        if keys:
            entry["topologyKeys"] = keys
        if max_volumes > 0:
            entry["allocatable"] = {"count": min(max_volumes, 2**31 - 1)}
        current = self.ctx.informer(CSI_NODES).get(None, self.node)
        for _ in range(5):
            try:
                if current is None:
                    current = await self.ctx.api.get(CSI_NODES, self.node)
            except ApiError as error:
                if error.code != 404:
                    raise
                node = await self.ctx.api.get(NODES, self.node)
                body = {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "CSINode",
                    "metadata": {
                        "name": self.node,
                        "ownerReferences": [owner_reference(node, "v1", "Node", controller=False)],
                    },
                    "spec": {"drivers": [entry]},
                }
                try:
                    await self.ctx.api.create(CSI_NODES, body)
                    return
                except ApiError as create_error:
                    if create_error.code != 409:
                        raise
                    current = None
                    continue
            present = current.get("spec", {}).get("drivers") or []
            if [d for d in present if d.get("name") == driver] == [entry]:
                return
            drivers = [d for d in present if d.get("name") != driver]
            drivers.append(entry)
            updated = {**current, "spec": {**current.get("spec", {}), "drivers": drivers}}
            try:
                await self.ctx.api.update(CSI_NODES, updated)
                return
            except ApiError as error:
                if error.code != 409:
                    raise
                current = await self.ctx.api.get(CSI_NODES, self.node)
        raise RuntimeError(f"could not update CSINode {self.node}: conflicts")

    async def _update_node_labels(self, driver: str, node_id: str, topology: dict[str, str]) -> None:
        node = await self.ctx.api.get(NODES, self.node)
        annotations = node.get("metadata", {}).get("annotations") or {}
        try:
            node_ids = json.loads(annotations.get(NODE_ID_ANNOTATION, "{}"))
        except ValueError:
            node_ids = {}
        node_ids[driver] = node_id
        labels = node.get("metadata", {}).get("labels") or {}
        patch: dict[str, Any] = {
            "metadata": {"annotations": {NODE_ID_ANNOTATION: json.dumps(node_ids, sort_keys=True)}}
        }
        missing = {k: v for k, v in topology.items() if labels.get(k) != v}
        if missing:
            patch["metadata"]["labels"] = missing
        elif annotations.get(NODE_ID_ANNOTATION) == patch["metadata"]["annotations"][NODE_ID_ANNOTATION]:
            return
        await self.ctx.api.patch(NODES, self.node, patch)
