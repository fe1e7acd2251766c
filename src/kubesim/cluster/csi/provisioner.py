"""External-provisioner behaviour (sig-storage csi-provisioner with ``--extra-create-metadata`` and Topology).

For claims whose StorageClass names a registered CSI driver it calls ``CreateVolume``, creates the PV and binds
claim and volume (the part of the PV controller a CSI setup relies on). When a bound claim is gone and the PV's
reclaim policy is ``Delete`` it calls ``DeleteVolume`` and deletes the PV. gRPC failures become
``ProvisioningFailed`` / ``VolumeFailedDelete`` Events and are retried with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from csi_proto import csi_pb2
from kubesim.cluster.base.context import CSI_NODES, NODES, PVCS, PVS, STORAGE_CLASSES, Context
from kubesim.cluster.base.events import EventRecorder
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.objects import Obj, annotations_of, is_terminating, name_of, parse_quantity, uid_of
from kubesim.cluster.base.storage import storage_class_of
from kubesim.cluster.base.workqueue import Reconciler, Retry
from kubesim.cluster.controllers.scheduler import SELECTED_NODE
from kubesim.cluster.csi.client import CsiConnection, grpc_error_text, wait_for_plugin
from kubesim.cluster.csi.topology import RequirementError, accessibility_requirements
from kubesim.errors import ApiError

log = logging.getLogger(__name__)

PARAM_PVC_NAME = "csi.storage.k8s.io/pvc/name"
PARAM_PVC_NAMESPACE = "csi.storage.k8s.io/pvc/namespace"
PARAM_PV_NAME = "csi.storage.k8s.io/pv/name"
RESERVED_PARAMETER_PREFIX = "csi.storage.k8s.io/"
FSTYPE_PARAMETER = "csi.storage.k8s.io/fstype"
# StorageClass parameters in the reserved namespace that the sidecar consumes itself (never sent to the driver);
# any other key there is a configuration error, as in csi-provisioner
KNOWN_RESERVED_PARAMETERS = frozenset(
    [FSTYPE_PARAMETER]
    + [
        f"{RESERVED_PARAMETER_PREFIX}{operation}-secret-{part}"
        for operation in (
            "provisioner",
            "controller-publish",
            "node-stage",
            "node-publish",
            "controller-expand",
            "node-expand",
        )
        for part in ("name", "namespace")
    ]
)
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
PROVISIONER_IDENTITY = "storage.kubernetes.io/csiProvisionerIdentity"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"

_MODE = csi_pb2.VolumeCapability.AccessMode
ACCESS_MODES = {
    "ReadWriteOnce": _MODE.SINGLE_NODE_WRITER,
    "ReadWriteOncePod": _MODE.SINGLE_NODE_WRITER,
    "ReadOnlyMany": _MODE.MULTI_NODE_READER_ONLY,
    "ReadWriteMany": _MODE.MULTI_NODE_MULTI_WRITER,
}
# With the SINGLE_NODE_MULTI_WRITER capability, kubelet and the provisioner tell the driver how many workloads
# on the node may write: ReadWriteOncePod is single-writer, ReadWriteOnce multi-writer.
ACCESS_MODES_SINGLE_NODE_MULTI_WRITER = {
    **ACCESS_MODES,
    "ReadWriteOnce": _MODE.SINGLE_NODE_MULTI_WRITER,
    "ReadWriteOncePod": _MODE.SINGLE_NODE_SINGLE_WRITER,
}



#: Told of a failed CreateVolume: the claim and the error text (``rpc error: code = ... desc = ...``).
ProvisioningFailureHandler = Callable[[Obj, str], Awaitable[None]]

class ParameterError(ValueError):
    """The StorageClass has a parameter in the reserved ``csi.storage.k8s.io/`` namespace the sidecar does not know."""


@dataclass
class ControllerPlugin:
    driver: str
    connection: CsiConnection
    topology: bool  # VOLUME_ACCESSIBILITY_CONSTRAINTS
    single_node_multi_writer: bool  # controller capability SINGLE_NODE_MULTI_WRITER
    identity: str  # storage.kubernetes.io/csiProvisionerIdentity value


def volume_capabilities(
    spec: dict[str, Any], fs_type: str, mount_flags: list[str], *, single_node_multi_writer: bool = False
) -> list[Any]:
    """One VolumeCapability per access mode of a claim/PV spec (block or mount by volumeMode).

    ``single_node_multi_writer``: the plugin offers that capability, so the single-node modes are told apart.
    """
    modes = ACCESS_MODES_SINGLE_NODE_MULTI_WRITER if single_node_multi_writer else ACCESS_MODES
    capabilities = []
    for mode in spec.get("accessModes") or ["ReadWriteOnce"]:
        capability = csi_pb2.VolumeCapability(
            access_mode=csi_pb2.VolumeCapability.AccessMode(mode=modes.get(mode, _MODE.UNKNOWN))
        )
        if spec.get("volumeMode") == "Block":
            capability.block.SetInParent()
        else:
            capability.mount.fs_type = fs_type
            capability.mount.mount_flags.extend(mount_flags)
        capabilities.append(capability)
    return capabilities


class Provisioner:
    def __init__(self, ctx: Context, *, on_failure: ProvisioningFailureHandler | None = None) -> None:
        """``on_failure(pvc, text)`` hears of every failed CreateVolume of a claim a node was selected for (the
        scheduler tells the Pods waiting for it)."""
        self.ctx = ctx
        self.on_failure = on_failure
        self.plugins: dict[str, ControllerPlugin] = {}
        self.events = EventRecorder(ctx.api, "external-provisioner")
        self.claims: Reconciler[Key] = Reconciler(
            "provisioner-claims", self._provision, workers=4, backoff=ctx.options.provision_backoff
        )
        self.volumes: Reconciler[Key] = Reconciler(
            "provisioner-volumes", self._reclaim, workers=2, backoff=ctx.options.provision_backoff
        )
        self._announced: set[str] = set()
        # PVs this provisioner created that its informer has not delivered yet: a claim event arriving in between
        # must bind to them, not call CreateVolume again
        self._created: dict[str, Obj] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        ctx.informer(PVCS).add_handler(self._on_claim)
        ctx.informer(PVS).add_handler(self._on_volume)
        for resource in (STORAGE_CLASSES, CSI_NODES):
            ctx.informer(resource).add_handler(lambda *_: self._requeue_claims())

    def start(self) -> None:
        self.claims.start()
        self.volumes.start()
        self._requeue_claims()
        for pv in self.ctx.informer(PVS).items():
            self.volumes.add(("", name_of(pv)))

    async def stop(self) -> None:
        await self.claims.stop()
        await self.volumes.stop()
        for plugin in self.plugins.values():
            await plugin.connection.close()
        self.plugins.clear()

    async def register(self, driver: str, endpoint: str) -> None:
        """Connect to the controller plugin as the sidecar does at start-up; waits for the socket."""
        async with self._locks.setdefault(driver, asyncio.Lock()):
            existing = self.plugins.get(driver)
            if existing is not None and existing.connection.endpoint == endpoint:
                await wait_for_plugin(
                    existing.connection, self.ctx.options.plugin_wait_timeout, self.ctx.options.rpc_timeout
                )
                self._requeue_claims()
                return
            await self._register_locked(driver, endpoint)

    async def unregister(self, driver: str, endpoint: str) -> None:
        """Detach from the controller plugin at ``endpoint`` (its sidecar stopped); claims wait for another."""
        async with self._locks.setdefault(driver, asyncio.Lock()):
            plugin = self.plugins.get(driver)
            if plugin is None or plugin.connection.endpoint != endpoint:
                return
            del self.plugins[driver]
            await plugin.connection.close()

    async def _register_locked(self, driver: str, endpoint: str) -> None:
        connection = CsiConnection(endpoint)
        try:
            name = await wait_for_plugin(
                connection, self.ctx.options.plugin_wait_timeout, self.ctx.options.rpc_timeout
            )
        except BaseException:
            await connection.close()
            raise
        if name != driver:
            await connection.close()
            raise ValueError(f"plugin at {endpoint} is {name!r}, not {driver!r}")
        capabilities = await connection.identity.GetPluginCapabilities(
            csi_pb2.GetPluginCapabilitiesRequest(), timeout=self.ctx.options.rpc_timeout
        )
        services = {cap.service.type for cap in capabilities.capabilities if cap.HasField("service")}
        controller = await connection.controller.ControllerGetCapabilities(
            csi_pb2.ControllerGetCapabilitiesRequest(), timeout=self.ctx.options.rpc_timeout
        )
        rpcs = {cap.rpc.type for cap in controller.capabilities if cap.HasField("rpc")}
        if csi_pb2.ControllerServiceCapability.RPC.CREATE_DELETE_VOLUME not in rpcs:
            await connection.close()
            raise ValueError(f"plugin {driver!r} does not offer CREATE_DELETE_VOLUME")
        old = self.plugins.get(driver)
        self.plugins[driver] = ControllerPlugin(
            driver=driver,
            connection=connection,
            topology=csi_pb2.PluginCapability.Service.VOLUME_ACCESSIBILITY_CONSTRAINTS in services,
            single_node_multi_writer=csi_pb2.ControllerServiceCapability.RPC.SINGLE_NODE_MULTI_WRITER in rpcs,
            identity=f"{int(time.time() * 1000)}-{driver}",
        )
        if old is not None:
            await old.connection.close()
        self._requeue_claims()
        for pv in self.ctx.informer(PVS).items():
            self.volumes.add(("", name_of(pv)))

    # ------------------------------------------------------------------ triggers

    def _requeue_claims(self) -> None:
        for pvc in self.ctx.informer(PVCS).items():
            self.claims.add((pvc["metadata"].get("namespace", ""), name_of(pvc)))

    def _on_claim(self, event: str, pvc: Obj, old: Obj | None) -> None:
        if event != "DELETED":
            self.claims.add((pvc["metadata"].get("namespace", ""), name_of(pvc)))
        volume = pvc.get("spec", {}).get("volumeName")
        if volume and (event == "DELETED" or is_terminating(pvc)):
            self.volumes.add(("", volume))

    def _on_volume(self, event: str, pv: Obj, old: Obj | None) -> None:
        self._created.pop(name_of(pv), None)
        if event != "DELETED":
            self.volumes.add(("", name_of(pv)))
        claim_ref = pv.get("spec", {}).get("claimRef") or {}
        if claim_ref.get("name"):
            self.claims.add((claim_ref.get("namespace", ""), claim_ref["name"]))

    # ---------------------------------------------------------------- provision

    async def _provision(self, key: Key) -> None:
        pvc = self.ctx.informer(PVCS).get(*key)
        if pvc is None or is_terminating(pvc):
            return
        spec = pvc.get("spec", {})
        volume_name = spec.get("volumeName")
        if volume_name:
            pv = self.ctx.informer(PVS).get(None, volume_name)
            if pv is not None:
                await self._bind(pvc, pv)
            return
        storage_class = storage_class_of(self.ctx, pvc)
        if storage_class is None:
            return
        driver = storage_class.get("provisioner", "")
        plugin = self.plugins.get(driver)
        if plugin is None:
            return  # not ours, or the driver is not registered yet (registration requeues every claim)
        selected_node = annotations_of(pvc).get(SELECTED_NODE)
        if storage_class.get("volumeBindingMode") == "WaitForFirstConsumer" and not selected_node:
            return
        pv_name = f"pvc-{uid_of(pvc)}"
        existing = self.ctx.informer(PVS).get(None, pv_name) or self._created.get(pv_name)
        if existing is not None:
            await self._bind(pvc, existing)
            return
        if pv_name not in self._announced:
            self._announced.add(pv_name)
            await self.events.record(
                pvc,
                "PersistentVolumeClaim",
                "v1",
                "Normal",
                "Provisioning",
                f'External provisioner is provisioning volume for claim "{key[0]}/{key[1]}"',
            )
        await self._ensure_provisioner_annotation(pvc, driver)
        try:
            request = self._create_request(pvc, storage_class, plugin, pv_name, selected_node)
            response = await plugin.connection.controller.CreateVolume(
                request, timeout=self.ctx.options.rpc_timeout
            )
        except (grpc.aio.AioRpcError, RequirementError, ParameterError) as error:
            text = grpc_error_text(error) if isinstance(error, grpc.aio.AioRpcError) else str(error)
            await self.events.record(
                pvc,
                "PersistentVolumeClaim",
                "v1",
                "Warning",
                "ProvisioningFailed",
                f'failed to provision volume with StorageClass "{name_of(storage_class)}": {text}',
            )
            if selected_node and self.on_failure is not None:
                await self.on_failure(pvc, text)
            raise Retry(text) from None
        pv = self._volume_object(pvc, storage_class, plugin, pv_name, response.volume)
        try:
            pv = await self.ctx.api.create(PVS, pv)
        except ApiError as error:
            if error.code != 409:
                raise
            pv = await self.ctx.api.get(PVS, pv_name)
        if self.ctx.informer(PVS).get(None, pv_name) is None:
            self._created[pv_name] = pv
        await self.events.record(
            pvc,
            "PersistentVolumeClaim",
            "v1",
            "Normal",
            "ProvisioningSucceeded",
            f"Successfully provisioned volume {pv_name}",
        )
        await self._bind(pvc, pv)

    async def _ensure_provisioner_annotation(self, pvc: Obj, driver: str) -> None:
        if annotations_of(pvc).get(STORAGE_PROVISIONER) == driver:
            return
        await self.ctx.api.patch(
            PVCS,
            name_of(pvc),
            {
                "metadata": {
                    "annotations": {
                        STORAGE_PROVISIONER: driver,
                        "volume.beta.kubernetes.io/storage-provisioner": driver,
                    }
                }
            },
            namespace=pvc["metadata"].get("namespace"),
        )

    def _create_request(
        self, pvc: Obj, storage_class: Obj, plugin: ControllerPlugin, pv_name: str, selected_node: str | None
    ) -> Any:
        spec = pvc.get("spec", {})
        class_parameters = dict(storage_class.get("parameters") or {})
        fs_type = class_parameters.get(FSTYPE_PARAMETER, "")
        unknown = sorted(
            k
            for k in class_parameters
            if k.startswith(RESERVED_PARAMETER_PREFIX) and k not in KNOWN_RESERVED_PARAMETERS
        )
        if unknown:
            raise ParameterError(
                f"found unknown parameter key {unknown[0]!r} with reserved namespace {RESERVED_PARAMETER_PREFIX}"
            )
        parameters = {
            k: v for k, v in class_parameters.items() if not k.startswith(RESERVED_PARAMETER_PREFIX)
        }
        parameters[PARAM_PVC_NAME] = name_of(pvc)
        parameters[PARAM_PVC_NAMESPACE] = pvc["metadata"].get("namespace", "")
        parameters[PARAM_PV_NAME] = pv_name
        request = csi_pb2.CreateVolumeRequest(
            name=pv_name,
            volume_capabilities=volume_capabilities(
                spec,
                fs_type,
                list(storage_class.get("mountOptions") or []),
                single_node_multi_writer=plugin.single_node_multi_writer,
            ),
            parameters=parameters,
        )
        requested = parse_quantity(((spec.get("resources") or {}).get("requests") or {}).get("storage"))
        limit = parse_quantity(((spec.get("resources") or {}).get("limits") or {}).get("storage"))
        if requested or limit:
            request.capacity_range.required_bytes = requested
            request.capacity_range.limit_bytes = limit
        if plugin.topology:
            requisite, preferred = self._accessibility(plugin.driver, selected_node, storage_class)
            for segments in requisite:
                request.accessibility_requirements.requisite.add(segments=segments)
            for segments in preferred:
                request.accessibility_requirements.preferred.add(segments=segments)
        return request

    def _accessibility(
        self, driver: str, selected_node: str | None, storage_class: Obj
    ) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        return accessibility_requirements(
            driver,
            selected_node,
            storage_class,
            self.ctx.informer(CSI_NODES).items(),
            {name_of(n): n for n in self.ctx.informer(NODES).items()},
        )

    def _volume_object(
        self, pvc: Obj, storage_class: Obj, plugin: ControllerPlugin, pv_name: str, volume: Any
    ) -> Obj:
        spec = pvc.get("spec", {})
        requested = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
        capacity = str(volume.capacity_bytes) if volume.capacity_bytes else str(requested)
        attributes = dict(volume.volume_context)
        attributes[PROVISIONER_IDENTITY] = plugin.identity
        csi_source: dict[str, Any] = {
            "driver": plugin.driver,
            "volumeHandle": volume.volume_id,
            "volumeAttributes": attributes,
        }
        fs_type = (storage_class.get("parameters") or {}).get(FSTYPE_PARAMETER)
        if fs_type and spec.get("volumeMode") != "Block":
            csi_source["fsType"] = fs_type
        pv_spec: dict[str, Any] = {
            "capacity": {"storage": capacity},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy") or "Delete",
            "storageClassName": name_of(storage_class),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": pvc["metadata"].get("namespace", ""),
                "name": name_of(pvc),
                "uid": uid_of(pvc),
                "resourceVersion": pvc["metadata"].get("resourceVersion", ""),
            },
            "csi": csi_source,
        }
        if storage_class.get("mountOptions"):
            pv_spec["mountOptions"] = list(storage_class["mountOptions"])
        terms = [
            {
                "matchExpressions": [
                    {"key": k, "operator": "In", "values": [v]} for k, v in sorted(t.segments.items())
                ]
            }
            for t in volume.accessible_topology
            if t.segments
        ]
        if terms:
            pv_spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": terms}}
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "annotations": {PROVISIONED_BY: plugin.driver}},
            "spec": pv_spec,
        }

    async def _bind(self, pvc: Obj, pv: Obj) -> None:
        """Bind both sides (as the PV controller does); writes only what is not already so."""
        namespace = pvc["metadata"].get("namespace", "")
        claim_ref = pv.get("spec", {}).get("claimRef") or {}
        if claim_ref.get("uid") not in (None, "", uid_of(pvc)):
            return  # the PV belongs to an earlier claim of the same name
        pv_name = name_of(pv)
        if pv.get("status", {}).get("phase") != "Bound":
            await self.ctx.api.patch(PVS, pv_name, {"status": {"phase": "Bound"}}, subresource="status")
        annotations = annotations_of(pvc)
        if (
            pvc.get("spec", {}).get("volumeName") != pv_name
            or annotations.get("pv.kubernetes.io/bind-completed") != "yes"
        ):
            await self.ctx.api.patch(
                PVCS,
                name_of(pvc),
                {
                    "metadata": {
                        "annotations": {
                            "pv.kubernetes.io/bind-completed": "yes",
                            "pv.kubernetes.io/bound-by-controller": "yes",
                        }
                    },
                    "spec": {"volumeName": pv_name},
                },
                namespace=namespace,
            )
        status = pvc.get("status", {})
        wanted = {
            "phase": "Bound",
            "accessModes": list(pv.get("spec", {}).get("accessModes") or []),
            "capacity": dict(pv.get("spec", {}).get("capacity") or {}),
        }
        if any(status.get(k) != v for k, v in wanted.items()):
            await self.ctx.api.patch(
                PVCS, name_of(pvc), {"status": wanted}, namespace=namespace, subresource="status"
            )

    # ------------------------------------------------------------------ reclaim

    async def _reclaim(self, key: Key) -> None:
        pv = self.ctx.informer(PVS).get(None, key[1])
        if pv is None:
            return
        spec = pv.get("spec", {})
        claim_ref = spec.get("claimRef") or {}
        if not claim_ref.get("name"):
            return
        claim = self.ctx.informer(PVCS).get(claim_ref.get("namespace", ""), claim_ref["name"])
        if claim is not None and uid_of(claim) == claim_ref.get("uid") and not is_terminating(claim):
            return
        if claim is not None and uid_of(claim) == claim_ref.get("uid"):
            return  # terminating: wait until the claim object is gone
        driver = (spec.get("csi") or {}).get("driver", "")
        if pv.get("status", {}).get("phase") not in ("Released", "Failed"):
            await self.ctx.api.patch(
                PVS, name_of(pv), {"status": {"phase": "Released"}}, subresource="status"
            )
        if spec.get("persistentVolumeReclaimPolicy", "Delete") != "Delete" or is_terminating(pv):
            return
        plugin = self.plugins.get(driver)
        if plugin is None or annotations_of(pv).get(PROVISIONED_BY) != driver:
            return
        try:
            await plugin.connection.controller.DeleteVolume(
                csi_pb2.DeleteVolumeRequest(volume_id=spec["csi"]["volumeHandle"]),
                timeout=self.ctx.options.rpc_timeout,
            )
        except grpc.aio.AioRpcError as error:
            text = grpc_error_text(error)
            await self.events.record(pv, "PersistentVolume", "v1", "Warning", "VolumeFailedDelete", text)
            raise Retry(text) from None
        try:
            await self.ctx.api.delete(PVS, name_of(pv))
        except ApiError as error:
            if error.code != 404:
                raise
