"""One simulated kubelet per node: the volume, container and status lifecycle of the Pods bound to it.

Plugin registration lives in ``plugins.PluginRegistry``. For each Pod bound to the node the kubelet waits for
its claims to be bound, calls ``NodeStageVolume`` (if offered) and
``NodePublishVolume`` into ``<kubelet_dir>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount``, retries failures
with backoff and ``FailedMount`` Events, then gives the Pod an IP from the address block and starts its
containers through the runtime registry (``runtime/``): built-in servers bind the Pod IP; readiness, restarts and
``CrashLoopBackOff`` come from the containers (``runtime.supervisor``). A deleted Pod is kept by the finalizer
``kubesim.io/kubelet`` until its containers are stopped and every volume is unpublished.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from csi_proto import csi_pb2
from kubesim.auth.serviceaccounts import DEFAULT_EXPIRATION_SECONDS, ROOT_CA_CONFIGMAP
from kubesim.cluster.base.context import CSI_DRIVERS, NODES, PODS, PVCS, PVS, SERVICES, Context
from kubesim.cluster.base.events import EventRecorder
from kubesim.cluster.base.indexes import PODS_BY_NODE
from kubesim.cluster.base.informer import Key
from kubesim.cluster.base.nodefs import HostPathError, check_host_path_type
from kubesim.cluster.base.objects import (
    Obj,
    controller_of,
    is_terminating,
    name_of,
    now,
    set_condition,
    short_hash,
    uid_of,
    without_times,
)
from kubesim.cluster.base.workqueue import Reconciler, Retry
from kubesim.cluster.csi.client import grpc_error_text
from kubesim.cluster.csi.plugins import PluginRegistry
from kubesim.cluster.csi.provisioner import volume_capabilities
from kubesim.cluster.dns import names
from kubesim.cluster.dns.poddns import node_resolv_conf, pod_resolv_conf
from kubesim.cluster.kubelet.heartbeat import NodeHeartbeat
from kubesim.cluster.runtime import ContainerSpec, RuntimeRegistry
from kubesim.cluster.runtime.env import EnvError, container_env, referenced_objects
from kubesim.cluster.runtime.status import (
    SIMULATED_CONDITION,
    RuntimeStatus,
    restarted_status,
    runtime_status,
)
from kubesim.cluster.runtime.supervisor import PodRuntime
from kubesim.cluster.volumes.downward import write_downward_volume
from kubesim.cluster.volumes.volumefiles import VolumeError, referenced, volume_files, write_files
from kubesim.errors import ApiError
from kubesim.store.store import KUBELET_FINALIZER

log = logging.getLogger(__name__)

FINALIZER = KUBELET_FINALIZER
NODE_ID_ANNOTATION = "csi.volume.kubernetes.io/nodeid"
POD_INFO = {
    "name": "csi.storage.k8s.io/pod.name",
    "namespace": "csi.storage.k8s.io/pod.namespace",
    "uid": "csi.storage.k8s.io/pod.uid",
    "service_account": "csi.storage.k8s.io/serviceAccount.name",
    "ephemeral": "csi.storage.k8s.io/ephemeral",
}


@dataclass
class Published:
    """A volume this kubelet has set up for a Pod (what it must tear down later)."""

    driver: str
    volume_id: str
    target_path: str
    staging_path: str | None = None


@dataclass
class PodState:
    key: Key
    published: dict[str, Published] = field(default_factory=dict)  # pod volume name -> published volume
    plain_dirs: set[str] = field(default_factory=set)
    volume_dirs: dict[str, Path] = field(default_factory=dict)  # pod volume name -> host directory
    run_dirs: list[Path] = field(default_factory=list)  # the containers' run directories
    previous: dict[str, dict[str, Any]] = field(default_factory=dict)  # container statuses when taken up


class MountWaiting(Exception):
    """Volumes are not ready to be set up yet (claim missing, not this Pod's, or unbound)."""


class Kubelet:
    def __init__(self, ctx: Context, node: str, host_ip: str, runtime: RuntimeRegistry) -> None:
        self.ctx = ctx
        self.node = node
        self.host_ip = host_ip
        self.root = ctx.kubelet_dir(node)
        self.nodefs = ctx.nodefs(node)
        self.registry = PluginRegistry(ctx, node, on_change=self.resync)
        self.runtime = runtime
        self.pods: dict[str, PodState] = {}  # by Pod uid
        self.containers: dict[str, PodRuntime] = {}  # by Pod uid: its running containers
        self.not_ready: set[str] = set()  # Pod uids forced NotReady by ``set_ready(..., False)``
        self._taken_up: dict[str, dict[str, Any]] = {}  # Pod uid -> the status take_up_pods wrote
        self.events = EventRecorder(ctx.api, "kubelet", host=node)
        self.queue: Reconciler[Key] = Reconciler(
            f"kubelet-{node}", self._sync, workers=4, backoff=ctx.options.mount_backoff
        )
        self.heartbeat = NodeHeartbeat(ctx, node)
        self.running = False

    # --------------------------------------------------------------- lifecycle

    def start(self) -> None:
        (self.root / "pods").mkdir(parents=True, exist_ok=True)
        self._remove_orphaned_pod_dirs()
        self.running = True
        self.queue.start()
        self.registry.start()
        self.heartbeat.start()
        self.resync()

    async def stop(self) -> None:
        """Stop the kubelet, its heartbeats and every container it runs (their Pods stay as they are in the API,
        as when a node goes down; the containers' run directories go with them)."""
        self.running = False
        await self.heartbeat.stop()
        await self.registry.stop()
        await self.queue.stop()
        containers, self.containers = self.containers, {}
        await asyncio.gather(*(pod.stop(0) for pod in containers.values()))
        for state in self.pods.values():
            for directory in state.run_dirs:
                await asyncio.to_thread(shutil.rmtree, directory, True)
            state.run_dirs.clear()

    def _remove_orphaned_pod_dirs(self) -> None:
        """Directories of Pods no longer bound to this node (left by an earlier run) go, as the kubelet cleans up
        orphaned Pods; those of its Pods stay and are set up again."""
        ours = {uid_of(pod) for pod in self.ctx.informer(PODS).by_index(PODS_BY_NODE, self.node)}
        with contextlib.suppress(OSError):
            for entry in (self.root / "pods").iterdir():
                if entry.name not in ours and entry.name not in self.pods:
                    shutil.rmtree(entry, ignore_errors=True)

    def resync(self) -> None:
        if not self.running:
            return
        for pod in self.ctx.informer(PODS).by_index(PODS_BY_NODE, self.node):
            self.queue.add((pod["metadata"].get("namespace", ""), name_of(pod)))
        for state in self.pods.values():
            self.queue.add(state.key)

    def on_pod(self, event: str, pod: Obj, old: Obj | None) -> None:
        if not self.running:
            return
        if pod.get("spec", {}).get("nodeName") == self.node or uid_of(pod) in self.pods:
            self.queue.add((pod["metadata"].get("namespace", ""), name_of(pod)))

    def set_ready(self, uid: str, key: Key, ready: bool) -> None:
        """``False`` forces the Pod NotReady; ``True`` lets readiness follow its containers again."""
        if ready:
            self.not_ready.discard(uid)
        else:
            self.not_ready.add(uid)
        self.queue.add(key)

    # --------------------------------------------------------------- Pod sync

    async def _sync(self, key: Key) -> None:
        pod = self.ctx.informer(PODS).get(*key)
        current_uid = (
            uid_of(pod) if pod is not None and pod.get("spec", {}).get("nodeName") == self.node else None
        )
        for uid, state in list(self.pods.items()):
            if state.key == key and uid != current_uid:
                await self._teardown(uid)
        if pod is None or current_uid is None:
            return
        if is_terminating(pod):
            if current_uid not in self.pods:
                self._reconstruct(current_uid, key)  # set up before this kubelet started: read back from disk
            await self._teardown(current_uid)
            await self._release(pod)
            return
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return
        await self._ensure_finalizer(pod)
        known = self.pods.get(current_uid)
        if known is None:
            known = self.pods[current_uid] = PodState(key=key)
            taken_up = self._taken_up.pop(current_uid, None) or pod.get("status", {})  # the informer may lag
            known.previous = {str(s.get("name")): s for s in taken_up.get("containerStatuses") or []}
        state = known
        try:
            for volume in pod.get("spec", {}).get("volumes") or []:
                await self._setup_volume(pod, volume, state)
        except MountWaiting as waiting:
            # no timed retry: claim, volume, CSIDriver and plugin-registration events resync this Pod
            log.debug("node %s: Pod %s/%s waits: %s", self.node, key[0], key[1], waiting)
            return
        status = pod.get("status", {})
        if status.get("podIP"):
            self.ctx.pod_ips.adopt(current_uid, status["podIP"])
        pod_ip = self.ctx.pod_ips.allocate(current_uid)
        containers = self.containers.get(current_uid)
        if containers is None:
            containers = await self._containers_for(pod, pod_ip, state)
            self.containers[current_uid] = containers
            await containers.start()
        await self._report_running(pod, pod_ip, containers)

    async def take_up_pods(self) -> None:
        """The node (re)starts: the Pods bound to it whose status says their containers run lost them with the node,
        so they are shown not Ready, waiting to be created again (``runtime.status.restarted_status``) before this
        kubelet starts them, and nothing routes to them until they are Ready again."""
        for pod in self.ctx.informer(PODS).by_index(PODS_BY_NODE, self.node):
            if uid_of(pod) in self.containers or is_terminating(pod):
                continue
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue
            change = restarted_status(pod.get("status") or {}, now())
            if change is not None:
                await self.ctx.patch_status(PODS, pod, change)
                self._taken_up[uid_of(pod)] = change

    def _resolver(self, namespace: str) -> Callable[[str], str | None]:
        """Cluster DNS for a Pod of ``namespace``: the name itself, then ``<name>.<namespace>.svc``, then
        ``<name>.svc`` (a Pod's search path), from the informers' Nodes and Services."""
        def resolve(name: str) -> str | None:
            nodes = self.ctx.informer(NODES).items()
            services = self.ctx.informer(SERVICES).items()
            for candidate in (name, f"{name}.{namespace}.svc", f"{name}.svc"):
                found = names.resolve(candidate, nodes, services)
                if found is not None:
                    return found
            return None
        return resolve

    async def _environment(self, pod: Obj, container: dict[str, Any], pod_ip: str) -> dict[str, str]:
        """The container's environment; a missing ConfigMap or Secret is a ``Failed`` Event and a retry."""
        namespace = pod["metadata"].get("namespace", "")
        config_names, secret_names = referenced_objects(container)
        config_maps = {name: await self._get_or_none("configmaps", name, namespace) for name in config_names}
        secrets = {name: await self._get_or_none("secrets", name, namespace) for name in secret_names}
        node = self.ctx.informer(NODES).get(None, self.node) or {}
        try:
            return container_env(
                pod,
                container,
                service_env=self.ctx.api_access.service_env() if self.ctx.api_access is not None else {},
                pod_ip=pod_ip,
                host_ip=self.host_ip,
                config_maps=config_maps,
                secrets=secrets,
                allocatable=node.get("status", {}).get("allocatable") or {},
            )
        except EnvError as error:
            await self.events.record(pod, "Pod", "v1", "Warning", "Failed", f"Error: {error}")
            raise Retry(str(error)) from None

    async def _get_or_none(self, resource: str, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return await self.ctx.api.get(resource, name, namespace)
        except ApiError as error:
            if error.code != 404:
                raise
            return None

    def _run_dir(self, state: PodState) -> Path | None:
        if self.ctx.runtime_dir is None:
            return None
        directory = self.ctx.runtime_dir / f"{next(self.ctx.run_dir_numbers):x}"
        directory.mkdir(mode=0o700)
        state.run_dirs.append(directory)
        return directory

    async def _containers_for(self, pod: Obj, pod_ip: str, state: PodState) -> PodRuntime:
        uid = uid_of(pod)
        key = state.key
        containers = list(pod.get("spec", {}).get("containers") or [])
        init_containers = list(pod.get("spec", {}).get("initContainers") or [])
        environments = [await self._environment(pod, container, pod_ip) for container in
                        [*init_containers, *containers]]
        resolv_conf = pod_resolv_conf(pod, self.ctx.cluster_dns, node_resolv_conf())
        specs = []
        for container, env in zip([*init_containers, *containers], environments, strict=True):
            spec = ContainerSpec(
                pod=pod,
                container=container,
                pod_ip=pod_ip,
                node_name=self.node,
                volumes=dict(state.volume_dirs),
                log_path=self.root / "pods" / uid / "logs" / f"{container.get('name', '')}.log",
                env=env,
                run_dir=self._run_dir(state),
                resolve=self._resolver(str(pod["metadata"].get("namespace", ""))),
                resolv_conf=resolv_conf,
            )
            specs.append((spec, self.runtime.lookup(spec.image)))

        async def record(type_: str, reason: str, message: str) -> None:
            current = self.ctx.informer(PODS).get(*key)
            if current is not None and uid_of(current) == uid:
                await self.events.record(current, "Pod", "v1", type_, reason, message)

        return PodRuntime(
            specs[len(init_containers):],
            init_specs=specs[:len(init_containers)],
            restart_policy=pod.get("spec", {}).get("restartPolicy") or "Always",
            backoff=self.ctx.options.restart_backoff,
            on_change=lambda: self.queue.add(key) if self.running else None,
            on_event=record,
            images=self.runtime.images(),
            previous=state.previous,
        )

    async def _ensure_finalizer(self, pod: Obj) -> None:
        finalizers = list(pod.get("metadata", {}).get("finalizers") or [])
        if FINALIZER in finalizers:
            return
        await self.ctx.api.patch(
            PODS,
            name_of(pod),
            {"metadata": {"finalizers": [*finalizers, FINALIZER]}},
            namespace=pod["metadata"].get("namespace"),
        )

    async def _release(self, pod: Obj) -> None:
        """Drop our finalizer so the API server completes the deletion."""
        finalizers = list(pod.get("metadata", {}).get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        remaining = [f for f in finalizers if f != FINALIZER]
        try:
            await self.ctx.api.patch(
                PODS,
                name_of(pod),
                {"metadata": {"finalizers": remaining or None}},
                namespace=pod["metadata"].get("namespace"),
            )
        except ApiError as error:
            if error.code != 404:
                raise
        self.ctx.pod_ips.release(uid_of(pod))
        self.not_ready.discard(uid_of(pod))
        if self.ctx.api_access is not None:
            self.ctx.api_access.tokens.revoke_pod(uid_of(pod))

    def _pod_volume_dir(self, uid: str, plugin: str, name: str) -> Path:
        return self.root / "pods" / uid / "volumes" / plugin / name

    async def _setup_volume(self, pod: Obj, volume: dict[str, Any], state: PodState) -> None:
        name = volume.get("name", "")
        if name in state.published or name in state.plain_dirs:
            return
        namespace = pod["metadata"].get("namespace", "")
        claim: str | None = None
        if volume.get("persistentVolumeClaim"):
            claim = volume["persistentVolumeClaim"].get("claimName", "")
        elif volume.get("ephemeral"):
            claim = f"{name_of(pod)}-{name}"
        if claim is not None:
            pvc = self.ctx.informer(PVCS).get(namespace, claim)
            if pvc is None:
                raise MountWaiting(f'persistentvolumeclaim "{claim}" not found')
            if volume.get("ephemeral"):
                owner = controller_of(pvc)
                if owner is None or owner.get("uid") != uid_of(pod):
                    raise MountWaiting(f"PVC {namespace}/{claim} was not created for this pod")
            pv_name = pvc.get("spec", {}).get("volumeName")
            pv = self.ctx.informer(PVS).get(None, pv_name) if pv_name else None
            if pv is None or pvc.get("status", {}).get("phase") != "Bound":
                raise MountWaiting(f'persistentvolumeclaim "{claim}" is not bound')
            csi = pv.get("spec", {}).get("csi")
            if not csi:
                self._make_plain_dir(pod, "kubernetes.io~local-volume", name, state)
                return
            claim_source = volume.get("persistentVolumeClaim") or {}
            readonly = bool(csi.get("readOnly") or claim_source.get("readOnly"))
            await self._publish(
                pod,
                state,
                volume_name=name,
                spec_name=pv_name or name,
                driver=csi.get("driver", ""),
                volume_id=csi.get("volumeHandle", ""),
                attributes=dict(csi.get("volumeAttributes") or {}),
                volume_spec=pv.get("spec", {}),
                fs_type=csi.get("fsType", ""),
                readonly=readonly,
                ephemeral=False,
            )
            return
        if volume.get("csi"):
            inline = volume["csi"]
            driver = inline.get("driver", "")
            csi_driver = self.ctx.informer(CSI_DRIVERS).get(None, driver)
            modes = (csi_driver or {}).get("spec", {}).get("volumeLifecycleModes") or ["Persistent"]
            if "Ephemeral" not in modes:
                await self._failed_mount(
                    pod,
                    name,
                    f'volume mode "Ephemeral" not supported by driver {driver} (only supports {modes})',
                )
                raise Retry("inline volume not supported")
            await self._publish(
                pod,
                state,
                volume_name=name,
                spec_name=name,
                driver=driver,
                volume_id=f"csi-{short_hash(uid_of(pod), name, length=64)}",
                attributes=dict(inline.get("volumeAttributes") or {}),
                volume_spec={},  # kubelet treats inline volumes as ReadWriteOnce filesystems
                fs_type=inline.get("fsType", ""),
                readonly=bool(inline.get("readOnly")),
                ephemeral=True,
            )
            return
        if isinstance(volume.get("hostPath"), dict):
            await self._host_path_volume(pod, name, volume["hostPath"], state)
            return
        if any(isinstance(volume.get(kind), dict) for kind in ("configMap", "secret", "projected")):
            await self._file_volume(pod, volume, state)
            return
        kind = next((k for k in volume if k != "name"), "emptyDir")
        downward = volume.get("downwardAPI") if kind == "downwardAPI" else None
        self._make_plain_dir(
            pod, f"kubernetes.io~{_kebab(kind)}", name, state, downward if isinstance(downward, dict) else None
        )

    async def _host_path_volume(self, pod: Obj, name: str, source: dict[str, Any], state: PodState) -> None:
        """A directory (or file) of the node: mapped by the node's file system, its ``type`` checked."""
        node_path = str(source.get("path", ""))
        try:
            host = self.nodefs.host_path(node_path)
            await asyncio.to_thread(check_host_path_type, host, node_path, str(source.get("type") or ""))
        except (ValueError, HostPathError, OSError) as error:
            await self._failed_mount(pod, name, str(error))
            raise Retry(str(error)) from None
        state.plain_dirs.add(name)
        state.volume_dirs[name] = host

    async def _file_volume(self, pod: Obj, volume: dict[str, Any], state: PodState) -> None:
        """A ``configMap``, ``secret`` or ``projected`` volume: its files written from the objects it names and, for
        ``serviceAccountToken`` sources, a token of the Pod's ServiceAccount bound to the Pod."""
        name = volume.get("name", "")
        namespace = pod["metadata"].get("namespace", "")
        config_names, secret_names, token_sources = referenced(volume)
        config_maps = {n: await self._get_or_none("configmaps", n, namespace) for n in config_names}
        access = self.ctx.api_access
        if config_maps.get(ROOT_CA_CONFIGMAP, {}) is None:
            # kube-controller-manager publishes it in every namespace; kubesim stands in with its CA (empty when
            # the API server serves plain HTTP)
            ca = access.ca_pem.decode() if access is not None and access.ca_pem is not None else ""
            config_maps[ROOT_CA_CONFIGMAP] = {"data": {"ca.crt": ca}}
        secrets = {n: await self._get_or_none("secrets", n, namespace) for n in secret_names}
        tokens: dict[int, str] = {}
        try:
            for index, source in token_sources:
                if access is None:
                    continue  # no API server to issue tokens for: the file stays absent
                expiration = source.get("expirationSeconds", DEFAULT_EXPIRATION_SECONDS)
                tokens[index] = access.tokens.issue(
                    namespace,
                    str(pod.get("spec", {}).get("serviceAccountName") or "default"),
                    pod_name=name_of(pod),
                    pod_uid=uid_of(pod),
                    expiration_seconds=int(expiration) if isinstance(expiration, int) else DEFAULT_EXPIRATION_SECONDS,
                )
            files = volume_files(pod, volume, config_maps=config_maps, secrets=secrets, tokens=tokens)
        except (VolumeError, ValueError) as error:
            await self._failed_mount(pod, name, str(error))
            raise Retry(str(error)) from None
        kind = next(k for k in ("projected", "configMap", "secret") if isinstance(volume.get(k), dict))
        directory = self._pod_volume_dir(uid_of(pod), f"kubernetes.io~{_kebab(kind)}", name)
        await asyncio.to_thread(write_files, directory, files)
        state.plain_dirs.add(name)
        state.volume_dirs[name] = directory

    def _make_plain_dir(
        self, pod: Obj, plugin: str, name: str, state: PodState, downward: dict[str, Any] | None = None
    ) -> None:
        directory = self._pod_volume_dir(uid_of(pod), plugin, name)
        directory.mkdir(parents=True, exist_ok=True)
        if downward is not None:
            write_downward_volume(directory, pod, downward)
        state.plain_dirs.add(name)
        state.volume_dirs[name] = directory

    async def _publish(
        self,
        pod: Obj,
        state: PodState,
        *,
        volume_name: str,
        spec_name: str,
        driver: str,
        volume_id: str,
        attributes: dict[str, str],
        volume_spec: dict[str, Any],
        fs_type: str,
        readonly: bool,
        ephemeral: bool,
    ) -> None:
        """NodeStage (if offered) and NodePublish one volume, as kubelet's CSI volume plugin does.

        ``volume_spec`` is the PV spec: kubelet sends the capability of its *first* access mode, with the PV's
        mount options; a plugin with ``VOLUME_MOUNT_GROUP`` also gets the Pod's ``fsGroup``.
        """
        plugin = self.registry.plugins.get(driver)
        if plugin is None:
            await self._failed_mount(
                pod,
                spec_name,
                f"kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name {driver} not found in "
                "the list of registered CSI drivers",
            )
            raise Retry(f"driver {driver} not registered")
        capability = volume_capabilities(
            volume_spec,
            fs_type,
            list(volume_spec.get("mountOptions") or []),
            single_node_multi_writer=plugin.single_node_multi_writer,
        )[0]
        fs_group = (pod.get("spec", {}).get("securityContext") or {}).get("fsGroup")
        if plugin.volume_mount_group and fs_group is not None and capability.HasField("mount"):
            capability.mount.volume_mount_group = str(fs_group)
        csi_driver = self.ctx.informer(CSI_DRIVERS).get(None, driver)
        context = dict(attributes)
        if csi_driver is not None and csi_driver.get("spec", {}).get("podInfoOnMount"):
            context[POD_INFO["name"]] = name_of(pod)
            context[POD_INFO["namespace"]] = pod["metadata"].get("namespace", "")
            context[POD_INFO["uid"]] = uid_of(pod)
            context[POD_INFO["service_account"]] = pod.get("spec", {}).get("serviceAccountName") or "default"
            context[POD_INFO["ephemeral"]] = "true" if ephemeral else "false"
        volume_dir = self._pod_volume_dir(uid_of(pod), "kubernetes.io~csi", spec_name)
        target = volume_dir / "mount"
        volume_dir.mkdir(parents=True, exist_ok=True)
        (volume_dir / "vol_data.json").write_text(
            json.dumps(
                {
                    "driverName": driver,
                    "volumeHandle": volume_id,
                    "specVolID": spec_name,
                    "nodeName": self.node,
                    "volumeLifecycleMode": "Ephemeral" if ephemeral else "Persistent",
                }
            )
        )
        timeout = self.ctx.options.rpc_timeout
        staging: str | None = None
        try:
            if plugin.stage_unstage and not ephemeral:
                staging_dir = (
                    self.root
                    / "plugins"
                    / "kubernetes.io"
                    / "csi"
                    / driver
                    / short_hash(volume_id, length=64)
                    / "globalmount"
                )
                staging_dir.mkdir(parents=True, exist_ok=True)
                staging = str(staging_dir)
                await plugin.connection.node.NodeStageVolume(
                    csi_pb2.NodeStageVolumeRequest(
                        volume_id=volume_id,
                        staging_target_path=staging,
                        volume_capability=capability,
                        volume_context=context,
                    ),
                    timeout=timeout,
                )
            await plugin.connection.node.NodePublishVolume(
                csi_pb2.NodePublishVolumeRequest(
                    volume_id=volume_id,
                    staging_target_path=staging or "",
                    target_path=str(target),
                    volume_capability=capability,
                    readonly=readonly,
                    volume_context=context,
                ),
                timeout=timeout,
            )
        except grpc.aio.AioRpcError as error:
            text = grpc_error_text(error)
            await self._failed_mount(pod, spec_name, text)
            raise Retry(text) from None
        state.published[volume_name] = Published(driver, volume_id, str(target), staging)
        state.volume_dirs[volume_name] = target

    async def _failed_mount(self, pod: Obj, volume: str, text: str) -> None:
        await self.events.record(
            pod,
            "Pod",
            "v1",
            "Warning",
            "FailedMount",
            f'MountVolume.SetUp failed for volume "{volume}" : {text}',
        )

    async def _teardown(self, uid: str) -> None:
        """Unpublish (and unstage) every volume of a Pod this kubelet set up, then remove the Pod directory."""
        containers = self.containers.pop(uid, None)
        if containers is not None:
            await containers.stop(self._grace(uid))
        state = self.pods.get(uid)
        if state is None:
            return
        timeout = self.ctx.options.rpc_timeout
        for volume_name, published in list(state.published.items()):
            plugin = self.registry.plugins.get(published.driver)
            if plugin is None:
                raise Retry(
                    f"driver {published.driver} not registered; cannot unpublish {published.volume_id}"
                )
            try:
                await plugin.connection.node.NodeUnpublishVolume(
                    csi_pb2.NodeUnpublishVolumeRequest(
                        volume_id=published.volume_id, target_path=published.target_path
                    ),
                    timeout=timeout,
                )
                if published.staging_path and not self._staging_in_use(published, uid):
                    await plugin.connection.node.NodeUnstageVolume(
                        csi_pb2.NodeUnstageVolumeRequest(
                            volume_id=published.volume_id, staging_target_path=published.staging_path
                        ),
                        timeout=timeout,
                    )
            except grpc.aio.AioRpcError as error:
                pod = self.ctx.informer(PODS).get(*state.key)
                if pod is not None:
                    await self.events.record(
                        pod,
                        "Pod",
                        "v1",
                        "Warning",
                        "FailedUnmount",
                        f'UnmountVolume.TearDown failed for volume "{volume_name}" : {grpc_error_text(error)}',
                    )
                raise Retry(grpc_error_text(error)) from None
            del state.published[volume_name]
        await asyncio.to_thread(shutil.rmtree, self.root / "pods" / uid, True)
        for directory in state.run_dirs:
            await asyncio.to_thread(shutil.rmtree, directory, True)
        del self.pods[uid]

    def _reconstruct(self, uid: str, key: Key) -> None:
        """The CSI volumes an earlier run of this node published for a Pod, read back from their ``vol_data.json``
        (as the kubelet reconstructs volumes after a restart), so they are unpublished when the Pod goes."""
        csi_dir = self.root / "pods" / uid / "volumes" / "kubernetes.io~csi"
        if not csi_dir.is_dir():
            return
        state = PodState(key=key)
        for data in sorted(csi_dir.glob("*/vol_data.json")):
            try:
                facts = json.loads(data.read_text())
            except (OSError, ValueError):
                continue
            driver, volume_id = str(facts.get("driverName", "")), str(facts.get("volumeHandle", ""))
            staging = (self.root / "plugins" / "kubernetes.io" / "csi" / driver / short_hash(volume_id, length=64)
                       / "globalmount")
            state.published[data.parent.name] = Published(driver, volume_id, str(data.parent / "mount"),
                                                          str(staging) if staging.is_dir() else None)
        self.pods[uid] = state

    def _staging_in_use(self, published: Published, except_uid: str) -> bool:
        return any(
            p.staging_path == published.staging_path
            for uid, state in self.pods.items()
            if uid != except_uid
            for p in state.published.values()
        )

    def _grace(self, uid: str) -> float:
        state = self.pods.get(uid)
        pod = self.ctx.informer(PODS).get(*state.key) if state is not None else None
        seconds = (pod or {}).get("spec", {}).get("terminationGracePeriodSeconds")
        return float(seconds) if isinstance(seconds, int | float) and seconds >= 0 else 30.0

    async def _report_running(self, pod: Obj, pod_ip: str, containers: PodRuntime) -> None:
        uid = uid_of(pod)
        status = pod.get("status", {})
        runtime = runtime_status(
            containers.states(),
            list(pod.get("spec", {}).get("containers") or []),
            uid,
            False if uid in self.not_ready else None,
            containers.init_states(),
            list(pod.get("spec", {}).get("initContainers") or []),
        )
        conditions = list(status.get("conditions") or [])
        conditions = set_condition(conditions, "PodReadyToStartContainers", "True")
        if runtime.not_initialized:
            conditions = set_condition(conditions, "Initialized", "False", "ContainersNotInitialized",
                                       f"containers with incomplete status: [{' '.join(runtime.not_initialized)}]")
        else:
            conditions = set_condition(conditions, "Initialized", "True")
        for kind in ("Ready", "ContainersReady"):
            conditions = set_condition(conditions, kind, *_readiness(runtime))
        conditions = set_condition(conditions, "PodScheduled", "True")
        if runtime.simulated_message is not None:
            conditions = set_condition(
                conditions, SIMULATED_CONDITION, "True", "NoRuntimeHandler", runtime.simulated_message
            )
        else:
            conditions = [c for c in conditions if c.get("type") != SIMULATED_CONDITION]
        wanted: dict[str, Any] = {
            "phase": runtime.phase,
            "conditions": conditions,
            "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": status.get("startTime") or now(),
            "containerStatuses": runtime.container_statuses,
            **({"initContainerStatuses": runtime.init_container_statuses}
               if runtime.init_container_statuses is not None else {}),
            "qosClass": status.get("qosClass") or "BestEffort",
        }
        if _same_status(status, wanted):
            return
        await self.ctx.patch_status(PODS, pod, wanted)


def _readiness(runtime: RuntimeStatus) -> tuple[str, str, str]:
    """(status, reason, message) of the Ready and ContainersReady conditions."""
    if runtime.ready:
        return "True", "", ""
    if runtime.phase in ("Succeeded", "Failed"):
        return "False", "PodCompleted", ""
    return "False", "ContainersNotReady", f"containers with unready status: [{' '.join(runtime.not_ready)}]"


def _same_status(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    for key, value in wanted.items():
        if key == "conditions":
            if without_times(current.get(key) or []) != without_times(value):
                return False
        elif current.get(key) != value:
            return False
    return True


def _kebab(kind: str) -> str:
    return "".join(f"-{c.lower()}" if c.isupper() else c for c in kind).lstrip("-")
