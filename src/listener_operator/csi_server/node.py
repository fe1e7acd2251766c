"""CSI Node service: binds a listener volume to its Listener and writes the Pod's addresses (behaviour.md
"Publishing").

NodePublishVolume follows upstream's order: context -> PV -> PVC -> Pod -> Listener (created by SSA for
``listener-class`` volumes, "Per-volume Listener") -> PV reservation labels -> Pod mount label -> Pod-local
addresses -> PodListeners -> files. Differences, each deliberate (behaviour.md "Differences from upstream"):

* both selector annotations, CSI inline volumes and hostile names/target paths are refused with INVALID_ARGUMENT
  before any API call ("Exactly one selector annotation", "Inline volumes refused early"); hostile addresses or
  port names in a Listener status before PodListeners or any file is written;
* when the Listener has no address yet the call waits a short, bounded time for its status to change before
  failing with UNAVAILABLE ("Bounded wait for an address"), and Warning Events on the Pod and the Listener say why
  the mount waits; a Listener whose class is missing fails at once, naming the class, since waiting cannot help;
* the file tree is swapped atomically and stale addresses disappear ("Atomic volume files");
* NodeUnpublishVolume also removes the volume's PodListeners entry while the Pod exists ("Unpublish cleans up");
* a PVC whose selector annotation was edited after provisioning gets a Warning Event: the edit has no effect
  ("Edited claim annotations are reported");
* nothing is written when the per-volume Listener, the labels, the PodListeners entry or the files are already
  as wanted (a re-publish only reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from prometheus_client import Gauge

from csi_proto import csi_pb2, csi_pb2_grpc
from listener_operator.addresses import (
    NodeAddressError,
    class_address_type,
    pod_listener_scope,
    pod_local_addresses,
)
from listener_operator.constants import (
    ANNOTATION_LISTENER_CLASS,
    ANNOTATION_LISTENER_NAME,
    DRIVER_NAME,
    FIELD_MANAGER_VOLUME,
    PV_LABEL_LISTENER_NAME,
    PV_LABEL_LISTENER_NAMESPACE,
    TOPOLOGY_KEY_HOSTNAME,
    mount_label_key,
)
from listener_operator.crd.models import AddressType
from listener_operator.csi_server.controller import check_volume_capabilities
from listener_operator.csi_server.errors import (
    ApiReadFailed,
    ApiWriteFailed,
    CsiError,
    InvalidInput,
    ListenerClassMissing,
    ListenerWithoutClass,
    MissingArgument,
    MountLabelUnavailable,
    NoAddressesYet,
    NodeWithoutAddress,
    NoPodVolume,
    PodNotScheduled,
    PodReplaced,
    PvWithoutClaim,
    UnsupportedVolume,
    UnusableListenerName,
    VolumeNotFound,
    VolumeWriteFailed,
    csi_rpc,
    error_chain,
    get_optional,
    get_required,
)
from listener_operator.csi_server.filetree import (
    DATA_LINK,
    VERSION_PREFIX,
    published_addresses,
    remove_tree,
    write_address_tree,
)
from listener_operator.csi_server.mounted import MountedVolume, MountedVolumes, selects_pod, trimmed_pod
from listener_operator.csi_server.objects import (
    per_volume_listener,
    pod_listeners_entry,
    pod_volume_for_claim,
)
from listener_operator.csi_server.reporting import EventPublisher, publish_event, publish_warning
from listener_operator.csi_server.validation import InvalidVolumeInput, VolumeTarget, resolve_target_path
from listener_operator.csi_server.volume_context import (
    CONTEXT_EPHEMERAL,
    CONTEXT_POD_NAME,
    CONTEXT_POD_NAMESPACE,
    CONTEXT_POD_UID,
    ListenerSelector,
    check_object_name,
    decode_selector,
    required_object,
)
from listener_operator.kinds import LISTENER, LISTENER_CLASS, POD_LISTENERS
from listener_operator.messages import brief, cut
from listener_operator.names import is_dns1123_subdomain, service_name_problem
from operator_runtime.api import KubeApi
from operator_runtime.applied import apply_is_noop
from operator_runtime.errors import BadRequest, Forbidden, Invalid, KubeError, NotFound
from operator_runtime.kinds import NODE, POD, PV, PVC
from operator_runtime.objects import JsonDict, items, mapping, meta, object_reference

__all__ = ["DEFAULT_LISTENER_WAIT_SECONDS", "NodeService"]

log = logging.getLogger(__name__)

#: How long NodePublishVolume waits for a Listener without addresses before answering UNAVAILABLE. Short: kubelet
#: holds a CSI call for at most a couple of minutes and retries anyway.
DEFAULT_LISTENER_WAIT_SECONDS = 5.0
#: A mount waiting longer than this for its Listener's address gets the Normal Events saying so (ListenerNotReady on
#: the Pod, MountWaiting on the Listener); a shorter wait is a healthy start (a new per-replica Listener).
ANNOUNCE_WAIT_AFTER_SECONDS = 2.0
_MAX_VOLUMES = 2**63 - 1

_Context = grpc.aio.ServicerContext[Any, Any]


@dataclass(frozen=True)
class _Publish:
    """The validated input of one NodePublishVolume call."""

    volume_id: str
    target: VolumeTarget
    pod_namespace: str
    pod_name: str
    pod_uid: str | None
    selector: ListenerSelector

    @property
    def pod_reference(self) -> JsonDict:
        ref: JsonDict = {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name, "namespace": self.pod_namespace}
        if self.pod_uid:
            ref["uid"] = self.pod_uid
        return ref


def _listener_id(listener: JsonDict) -> str:
    return f"Listener {meta(listener).namespace}/{meta(listener).name}"


def _published_targets(kubelet_dir: Path) -> list[VolumeTarget]:
    """The volumes under ``kubelet_dir`` that hold a tree this driver wrote (a ``..data`` link to a version)."""
    found: list[VolumeTarget] = []
    for mount in sorted(Path(kubelet_dir).glob("pods/*/volumes/kubernetes.io~csi/*/mount")):
        try:
            if not os.readlink(mount / DATA_LINK).startswith(VERSION_PREFIX):
                continue
            found.append(resolve_target_path(str(mount), kubelet_dir))
        except (OSError, InvalidVolumeInput):
            continue
    return found


def _why_no_addresses(listener: JsonDict) -> str:
    """The Listener's own account of why it has no addresses: its Ready condition, when the controller wrote one."""
    ready = next((c for c in items(listener, "status", "conditions")
                  if isinstance(c, dict) and c.get("type") == "Ready"), None)
    if ready is None:
        return "the Listener controller has not reported on it yet"
    return (f"the Listener is Ready={ready.get('status', 'Unknown')}, reason {ready.get('reason') or 'unknown'}: "
            f"{cut(str(ready.get('message') or ''), 500)}")


def _class_name(listener: JsonDict) -> str:
    """The Listener's class, required and checked: it becomes part of an API URL."""
    class_name = mapping(listener, "spec").get("className")
    if not class_name:
        raise ListenerWithoutClass(f"{_listener_id(listener)} has no spec.className")
    return check_object_name("ListenerClass", str(class_name), f"{_listener_id(listener)} spec.className")


class NodeService(csi_pb2_grpc.NodeServicer):  # type: ignore[misc]
    """NodePublishVolume / NodeUnpublishVolume / NodeGetInfo / NodeGetCapabilities for one node."""

    def __init__(self, api: KubeApi, node_name: str, kubelet_dir: Path, *, events: EventPublisher | None = None,
                 listener_wait_seconds: float = DEFAULT_LISTENER_WAIT_SECONDS,
                 mounts_waiting: Gauge | None = None) -> None:
        self._api = api
        self._node_name = node_name
        self._kubelet_dir = Path(kubelet_dir)
        self._events = events
        self._listener_wait = listener_wait_seconds
        self._mounts_waiting = mounts_waiting
        self._mounted = MountedVolumes(api, self._refresh_volume)

    @property
    def mounted(self) -> MountedVolumes:
        """The volumes this service published and keeps current."""
        return self._mounted

    async def close(self) -> None:
        """Stop keeping volumes current (their files stay); call when the server stops."""
        await self._mounted.close()

    async def start(self) -> None:
        """Keep the volumes published before this process started current too: they are found on disk (our trees
        in kubelet's layout), matched to the Pods of this node (one LIST) and their PVs, and refreshed once their
        Listener's watch has listed it. A volume that cannot be matched is left alone (logged)."""
        targets = await asyncio.to_thread(_published_targets, self._kubelet_dir)
        if not targets:
            return
        pods, _ = await self._api.list(POD, field_selector=f"spec.nodeName={self._node_name}")
        by_uid = {meta(pod).uid: pod for pod in pods}
        for target in targets:
            try:
                volume = await self._rediscover(target, by_uid.get(target.pod_uid))
            except (CsiError, KubeError) as error:
                log.warning("not keeping listener volume %s current: %s", target.path, error_chain(error))
                continue
            if volume is not None:
                async with self._mounted.lock(target):
                    self._mounted.track(volume)
        log.info("keeping %d listener volume(s) published earlier current", len(self._mounted))

    async def _rediscover(self, target: VolumeTarget, pod: JsonDict | None) -> MountedVolume | None:
        if pod is None:
            return None  # the Pod is gone: kubelet unpublishes the volume
        pv = await get_required(f"PersistentVolume {target.volume}", self._api.get(PV, target.volume))
        csi = mapping(pv, "spec", "csi")
        claim = mapping(pv, "spec", "claimRef")
        if csi.get("driver") != DRIVER_NAME or not claim.get("name"):
            return None
        selector = decode_selector(mapping(csi, "volumeAttributes"), f"volume {target.volume}")
        claim_name = check_object_name("PersistentVolumeClaim", str(claim["name"]), f"PersistentVolume {target.volume}")
        volume_name = pod_volume_for_claim(pod, claim_name)
        if volume_name is None:
            return None
        listener = selector.value if selector.mode == "name" else claim_name
        return MountedVolume(target, meta(pod).namespace, listener, trimmed_pod(pod), volume_name)

    # -- trivial RPCs -------------------------------------------------------------------------------------------

    @csi_rpc
    async def NodeGetInfo(self, request: csi_pb2.NodeGetInfoRequest, context: _Context
                          ) -> csi_pb2.NodeGetInfoResponse:
        return csi_pb2.NodeGetInfoResponse(
            node_id=self._node_name,
            max_volumes_per_node=_MAX_VOLUMES,
            accessible_topology=csi_pb2.Topology(segments={TOPOLOGY_KEY_HOSTNAME: self._node_name}),
        )

    @csi_rpc
    async def NodeGetCapabilities(self, request: csi_pb2.NodeGetCapabilitiesRequest, context: _Context
                                  ) -> csi_pb2.NodeGetCapabilitiesResponse:
        # No STAGE_UNSTAGE_VOLUME: kubelet calls NodePublishVolume directly (behaviour.md "Node service").
        return csi_pb2.NodeGetCapabilitiesResponse()

    # -- NodePublishVolume --------------------------------------------------------------------------------------

    @csi_rpc
    async def NodePublishVolume(self, request: csi_pb2.NodePublishVolumeRequest, context: _Context
                                ) -> csi_pb2.NodePublishVolumeResponse:
        publish = self._validate_publish(request)
        try:
            await self._publish(publish)
        except CsiError as error:
            if error.user_error:
                await publish_warning(self._events, publish.pod_reference, reason="ListenerVolumeFailed",
                                      note=error_chain(error), action="PublishVolume")
            raise
        return csi_pb2.NodePublishVolumeResponse()

    def _validate_publish(self, request: csi_pb2.NodePublishVolumeRequest) -> _Publish:
        if not request.volume_id:
            raise MissingArgument("volume_id is required")
        if not request.target_path:
            raise MissingArgument("target_path is required")
        if not request.HasField("volume_capability"):
            raise MissingArgument("volume_capability is required")
        check_volume_capabilities([request.volume_capability], field="volume_capability")
        target = self._resolve_target(request.target_path)
        context = request.volume_context
        if context.get(CONTEXT_EPHEMERAL) == "true":
            raise UnsupportedVolume(
                "CSI inline volumes (.volumes[].csi) are not supported by listeners.stackable.tech: use a generic "
                "ephemeral volume (.volumes[].ephemeral.volumeClaimTemplate with storageClassName "
                "listeners.stackable.tech and a listener annotation) instead")
        pod_namespace, pod_name = required_object(
            context, CONTEXT_POD_NAMESPACE, CONTEXT_POD_NAME, "Pod", source="volume context",
            hint="is the CSIDriver registered with podInfoOnMount: true?")
        check_object_name("PersistentVolume", request.volume_id, "volume_id")
        selector = decode_selector(context, f"volume {request.volume_id}")
        pod_uid = context.get(CONTEXT_POD_UID) or None
        if pod_uid is not None and pod_uid != target.pod_uid:
            raise InvalidInput(f"target_path {brief(request.target_path, 300)} is not in the directory of Pod uid "
                               f"{brief(pod_uid)} that the volume context names")
        return _Publish(request.volume_id, target, pod_namespace, pod_name, pod_uid, selector)

    def _resolve_target(self, target_path: str) -> VolumeTarget:
        try:
            return resolve_target_path(target_path, self._kubelet_dir)
        except InvalidVolumeInput as error:
            raise InvalidInput("refusing target_path") from error

    async def _publish(self, p: _Publish) -> None:
        pv = await get_required(f"PersistentVolume {p.volume_id}", self._api.get(PV, p.volume_id))
        claim_name = mapping(pv, "spec", "claimRef").get("name")
        if not claim_name:
            raise PvWithoutClaim(f"PersistentVolume {p.volume_id} has no corresponding PersistentVolumeClaim")
        check_object_name("PersistentVolumeClaim", str(claim_name), f"PersistentVolume {p.volume_id} spec.claimRef")
        pvc = await get_required(f"PersistentVolumeClaim {p.pod_namespace}/{claim_name}",
                                 self._api.get(PVC, claim_name, p.pod_namespace))
        await self._check_listener_name(p, pvc)
        pod = await get_required(f"Pod {p.pod_namespace}/{p.pod_name}",
                                 self._api.get(POD, p.pod_name, p.pod_namespace))
        if p.pod_uid and meta(pod).uid != p.pod_uid:
            raise PodReplaced(f"Pod {p.pod_namespace}/{p.pod_name} was replaced (uid {meta(pod).uid}, kubelet asked "
                              f"for {p.pod_uid})")
        await self._report_changed_selector(p, pvc)
        volume_name = pod_volume_for_claim(pod, claim_name)
        if volume_name is None:
            raise NoPodVolume(f"Pod {p.pod_namespace}/{p.pod_name} has no volume using PersistentVolumeClaim "
                              f"{claim_name}")

        listener = await self._resolve_listener(p, pv, pvc, pod)
        listener_name = meta(listener).name
        await self._label_pv(pv, p.pod_namespace, listener_name)
        await self._label_pod(pod, listener)

        listener, addresses = await self._addresses_or_wait(p, listener, pod)
        if not addresses:
            raise NoAddressesYet(f"Listener {p.pod_namespace}/{listener_name} has no addresses yet "
                                 f"(waited {self._listener_wait:g}s): {_why_no_addresses(listener)}")
        mount_label = {mount_label_key(meta(listener).uid): listener_name}  # _label_pod just set it
        volume = MountedVolume(p.target, p.pod_namespace, listener_name,
                               trimmed_pod(pod, added_labels=mount_label), volume_name,
                               status=dict(mapping(listener, "status")))
        async with self._mounted.lock(p.target):
            await self._write_volume(volume, listener, addresses)
            self._mounted.track(volume)

    async def _write_volume(self, volume: MountedVolume, listener: JsonDict, addresses: list[JsonDict]) -> None:
        """Validate ``addresses``, then write the Pod's PodListeners entry and the volume's files (each only when it
        changes); the caller holds the target's lock."""
        try:
            validated = published_addresses(addresses)
        except InvalidVolumeInput as error:
            raise InvalidInput(f"Listener {volume.listener_key} status cannot be written into the volume") from error
        await self._upsert_pod_listeners(volume.pod, volume.volume_name,
                                         {"scope": pod_listener_scope(listener), "ingressAddresses": addresses})
        target = volume.target.path
        try:
            await asyncio.to_thread(write_address_tree, target, validated)
        except InvalidVolumeInput as error:
            raise InvalidInput("refusing to write the volume") from error
        except OSError as error:
            raise VolumeWriteFailed(f"failed to write the address files into {target}") from error

    async def _refresh_volume(self, volume: MountedVolume, listener: JsonDict) -> None:
        """Rewrite a mounted volume after its Listener's status changed (behaviour.md "Volume files stay current").
        A Listener that has no address for this Pod now leaves the files as they were; a status that cannot be
        written is reported on the Pod, and so is a Listener whose addresses do not reach the Pod (behaviour.md
        "A recreated Listener")."""
        if not await self._reaches_pod(volume, listener):
            return
        addresses = await self._address_computer(volume.pod)(listener)
        if not addresses:
            log.info("Listener %s has no address for volume %s now; its files stay as they are",
                     volume.listener_key, volume.key)
            return
        try:
            await self._write_volume(volume, listener, addresses)
        except CsiError as error:
            if error.user_error:
                pod_meta = meta(volume.pod)
                await publish_warning(
                    self._events, {"apiVersion": "v1", "kind": "Pod", "name": pod_meta.name,
                                   "namespace": pod_meta.namespace, "uid": pod_meta.uid},
                    reason="ListenerVolumeNotUpdated", action="UpdateVolume",
                    note=f"volume {volume.volume_name} keeps its files: {error_chain(error)}",
                    related=object_reference(listener))
            raise
        log.info("updated listener volume %s of Pod %s/%s from Listener %s", volume.volume_name,
                 meta(volume.pod).namespace, meta(volume.pod).name, volume.listener_key)

    async def _reaches_pod(self, volume: MountedVolume, listener: JsonDict) -> bool:
        """Whether the Listener's Service selects the volume's Pod (as recorded, else as it is now), so that its
        addresses reach the Pod; if not, the files stay as they were and the Pod gets a Warning saying why."""
        if selects_pod(listener, volume.pod):
            return True
        pod_meta = meta(volume.pod)
        live = await get_optional(f"Pod {pod_meta.namespace}/{pod_meta.name}",
                                  self._api.get(POD, pod_meta.name, pod_meta.namespace))
        if live is None or meta(live).uid != pod_meta.uid:
            return False  # the Pod is gone: kubelet unpublishes the volume
        if selects_pod(listener, live):
            return True
        log.info("Listener %s (uid %s) does not select Pod %s/%s: volume %s keeps its files", volume.listener_key,
                 meta(listener).uid, pod_meta.namespace, pod_meta.name, volume.key)
        await publish_warning(
            self._events, {"apiVersion": "v1", "kind": "Pod", "name": pod_meta.name,
                           "namespace": pod_meta.namespace, "uid": pod_meta.uid},
            reason="ListenerVolumeNotUpdated", action="UpdateVolume", related=object_reference(listener),
            note=f"volume {volume.volume_name} keeps its files: Listener {volume.listener_key} does not select "
                 "this Pod, so its addresses do not reach it (the Listener was replaced after the Pod mounted "
                 "it: the Pod carries the mount label of the one it mounted); restart the Pod to mount the "
                 "current Listener")
        return False

    async def _check_listener_name(self, p: _Publish, pvc: JsonDict) -> None:
        """The Listener's name becomes a Service name and the value of the PV and Pod labels: a name that cannot be
        one is refused before anything is written, for good (INVALID_ARGUMENT), with an Event on the claim, where
        it has to be fixed (behaviour.md "Publishing")."""
        if p.selector.mode == "name":
            name, source = p.selector.value, f"annotation {ANNOTATION_LISTENER_NAME}"
        else:
            name, source = meta(pvc).name, "claim's name (a listener-class volume's Listener is named after its claim)"
        problem = service_name_problem(name)
        if problem is None:
            return
        error = UnusableListenerName(
            f"the Listener name from the {source} cannot be used: {problem}, because it names the Listener's Service "
            "and labels the PersistentVolume and the Pod")
        await publish_warning(self._events, object_reference(pvc), reason="InvalidListenerVolume",
                              note=error_chain(error), action="PublishVolume", related=p.pod_reference)
        raise error

    async def _report_changed_selector(self, p: _Publish, pvc: JsonDict) -> None:
        """The selector is fixed in the PV at provisioning (behaviour.md "Provisioning"): if the PVC's annotations say something
        else now, the edit has no effect, and the PVC is where its author looks for the reason."""
        annotations = meta(pvc).annotations
        current = {k: annotations[k] for k in (ANNOTATION_LISTENER_CLASS, ANNOTATION_LISTENER_NAME) if k in annotations}
        if current == {p.selector.annotation: p.selector.value}:
            return
        now = ", ".join(f"{k}={v}" for k, v in sorted(current.items())) or "no listener annotation"
        await publish_warning(
            self._events, object_reference(pvc), reason="ListenerVolumeAnnotationsIgnored", action="PublishVolume",
            note=f"the volume was provisioned with {p.selector.annotation}={p.selector.value} and keeps it; the "
                 f"claim now has {now}, which takes effect only for a new PersistentVolumeClaim")

    async def _resolve_listener(self, p: _Publish, pv: JsonDict, pvc: JsonDict, pod: JsonDict) -> JsonDict:
        if p.selector.mode == "name":
            return await get_required(f"Listener {p.pod_namespace}/{p.selector.value}",
                                      self._api.get(LISTENER, p.selector.value, p.pod_namespace))
        body = per_volume_listener(pv, pvc, pod, namespace=p.pod_namespace, class_name=p.selector.value)
        name = str(body["metadata"]["name"])
        live = await get_optional(f"Listener {p.pod_namespace}/{name}", self._api.get(LISTENER, name, p.pod_namespace))
        if live is not None and apply_is_noop(body, live, FIELD_MANAGER_VOLUME):
            return live  # a re-publish (kubelet retry, container restart): nothing to write
        try:
            return await self._api.apply(LISTENER, body, name=name, namespace=p.pod_namespace,
                                         field_manager=FIELD_MANAGER_VOLUME, force=True)
        except KubeError as error:
            # refused as invalid or forbidden: a person must change the claim, the Pod or the RBAC rules
            raise ApiWriteFailed(f"failed to apply Listener {p.pod_namespace}/{name}",
                                 user_error=isinstance(error, BadRequest | Forbidden | Invalid)) from error

    async def _label_pv(self, pv: JsonDict, listener_namespace: str, listener_name: str) -> None:
        """The reservation labels the controller reads for NodePort discovery (behaviour.md "NodePort"), by SSA."""
        wanted = {PV_LABEL_LISTENER_NAMESPACE: listener_namespace, PV_LABEL_LISTENER_NAME: listener_name}
        labels = meta(pv).labels
        if all(labels.get(k) == v for k, v in wanted.items()):
            return
        name = meta(pv).name
        body: JsonDict = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": wanted}}
        try:
            await self._api.apply(PV, body, name=name, field_manager=FIELD_MANAGER_VOLUME, force=True)
        except KubeError as error:
            raise ApiWriteFailed(f"failed to label PersistentVolume {name}") from error

    async def _label_pod(self, pod: JsonDict, listener: JsonDict) -> None:
        """Merge-patch the mount label so the Listener's Service selects this Pod (behaviour.md "Names")."""
        listener_meta = meta(listener)
        try:
            key = mount_label_key(listener_meta.uid)
        except ValueError as error:
            raise MountLabelUnavailable("cannot build the Pod mount label") from error
        value = listener_meta.name
        if meta(pod).labels.get(key) == value:
            return
        name, namespace = meta(pod).name, meta(pod).namespace
        try:
            await self._api.merge_patch(POD, {"metadata": {"labels": {key: value}}}, name=name, namespace=namespace)
        except KubeError as error:
            raise ApiWriteFailed(f"failed to label Pod {namespace}/{name}") from error

    async def _addresses_or_wait(self, p: _Publish, listener: JsonDict, pod: JsonDict
                                 ) -> tuple[JsonDict, list[JsonDict]]:
        """Pod-local addresses now, or after the Listener status changes within the bounded wait (behaviour.md
        "Bounded wait for an address")."""
        compute = self._address_computer(pod)
        addresses = await compute(listener)
        if addresses:
            return listener, addresses
        name = meta(listener).name
        await self._require_class(listener)
        if self._listener_wait <= 0:
            return listener, addresses
        # A new Listener (a per-replica one is made by this very publish) has no address for a moment: a healthy
        # start, not worth an Event. Only a wait longer than ANNOUNCE_WAIT_AFTER_SECONDS, or one that ends without
        # an address, is announced.
        grace = min(ANNOUNCE_WAIT_AFTER_SECONDS, self._listener_wait)
        announced = False
        waiting: contextlib.AbstractContextManager[Any] = (
            self._mounts_waiting.track_inprogress() if self._mounts_waiting is not None else contextlib.nullcontext())
        try:
            with waiting:
                for seconds in (grace, self._listener_wait - grace):
                    if seconds <= 0:
                        continue
                    with contextlib.suppress(TimeoutError):
                        latest, addresses = await self._wait_for_addresses(p, name, listener, compute, seconds)
                        if addresses:
                            return latest, addresses
                        break  # the Listener was deleted
                    if not announced:
                        await self._announce_wait(p, listener)
                        announced = True
        except KubeError as error:
            log.info("watch on Listener %s/%s ended: %s", p.pod_namespace, name, error_chain(error))
        if not announced:
            await self._announce_wait(p, listener)
        return listener, []

    async def _announce_wait(self, p: _Publish, listener: JsonDict) -> None:
        """Normal Events on the Pod (kubectl describe pod) and on the Listener (kubectl describe listener) saying the
        mount waits for the Listener's address. Normal: the failure after the wait is the Warning."""
        listener_reference = object_reference(listener)
        name = meta(listener).name
        await publish_event(self._events, p.pod_reference, type="Normal", reason="ListenerNotReady",
                            note=f"waiting for Listener {p.pod_namespace}/{name} to get an address before the "
                                 "volume can be published", action="PublishVolume", related=listener_reference)
        await publish_event(self._events, listener_reference, type="Normal", reason="MountWaiting",
                            note=f"Pod {p.pod_namespace}/{p.pod_name} cannot mount its listener volume until "
                                 "this Listener has an address in its status", action="PublishVolume",
                            related=p.pod_reference)

    async def _wait_for_addresses(self, p: _Publish, name: str, listener: JsonDict,
                                  compute: Callable[[JsonDict], Awaitable[list[JsonDict]]], seconds: float
                                  ) -> tuple[JsonDict, list[JsonDict]]:
        """Watch the Listener (from ``listener``'s version) until this Pod has addresses (TimeoutError after
        ``seconds``); no addresses when the Listener is deleted."""
        async with asyncio.timeout(seconds):
            async for event, latest in self._api.watch(
                    LISTENER, namespace=p.pod_namespace, field_selector=f"metadata.name={name}",
                    resource_version=meta(listener).resource_version,
                    timeout_seconds=max(1, int(seconds) + 1)):
                if event == "BOOKMARK":
                    continue
                if event == "DELETED":
                    break
                addresses = await compute(latest)
                if addresses:
                    return latest, addresses
        return listener, []

    async def _require_class(self, listener: JsonDict) -> None:
        """A Listener without addresses whose class is unset or gone never gets any: say so instead of waiting."""
        class_name = _class_name(listener)
        found = await get_optional(f"ListenerClass {class_name}", self._api.get(LISTENER_CLASS, class_name))
        if found is None:
            raise ListenerClassMissing(f"{_listener_id(listener)} uses ListenerClass {class_name}, which does not "
                                       "exist")

    def _address_computer(self, pod: JsonDict) -> Callable[[JsonDict], Awaitable[list[JsonDict]]]:
        """A function from a Listener to this Pod's addresses (behaviour.md "Pod-local addresses"); Node and class are fetched once, lazily."""
        node_cache: list[JsonDict] = []
        class_cache: dict[str, JsonDict] = {}

        async def compute(listener: JsonDict) -> list[JsonDict]:
            listener_id = _listener_id(listener)
            try:
                if mapping(listener, "status").get("nodePorts") is None:
                    # the status already holds the resolved addresses; the preferred type is not consulted
                    return pod_local_addresses(listener, None, AddressType.IP)
                node_name = mapping(pod, "spec").get("nodeName")
                if not node_name:
                    raise PodNotScheduled(f"Pod {meta(pod).namespace}/{meta(pod).name} has not been scheduled")
                class_name = _class_name(listener)
                if not node_cache:
                    node_cache.append(await get_required(f"Node {node_name}", self._api.get(NODE, str(node_name)),
                                                         user_error_if_missing=False))
                if class_name not in class_cache:
                    class_cache[class_name] = await get_required(f"ListenerClass {class_name}",
                                                                 self._api.get(LISTENER_CLASS, class_name))
                return pod_local_addresses(listener, node_cache[0], class_address_type(class_cache[class_name]))
            except NodeAddressError as error:
                raise NodeWithoutAddress(f"no address for this Pod on {listener_id}") from error
            except (KeyError, ValueError, TypeError) as error:
                raise InvalidInput(f"{listener_id} has a malformed status or class") from error

        return compute

    async def _upsert_pod_listeners(self, pod: JsonDict, volume_name: str, entry: JsonDict) -> None:
        """Create ``pod-<uid>`` or merge this volume's entry into it (behaviour.md "PodListeners write"); no write if already equal."""
        body = pod_listeners_entry(pod, volume_name, entry)
        name, namespace = str(body["metadata"]["name"]), str(body["metadata"]["namespace"])
        errors: list[BaseException] = []
        try:
            existing = await self._api.get(POD_LISTENERS, name, namespace)
        except NotFound:
            pass
        except KubeError as error:
            raise ApiReadFailed(f"failed to read PodListeners {namespace}/{name}") from error
        else:
            if mapping(existing, "spec", "listeners").get(volume_name) == entry:
                return
            try:
                await self._api.merge_patch(POD_LISTENERS, body, name=name, namespace=namespace)
                return
            except KubeError as error:
                raise ApiWriteFailed(f"failed to update PodListeners {namespace}/{name}") from error
        try:
            await self._api.create(POD_LISTENERS, body, namespace)
            return
        except KubeError as error:
            errors.append(error)
        try:  # created concurrently by another volume of the same Pod
            await self._api.merge_patch(POD_LISTENERS, body, name=name, namespace=namespace)
        except KubeError as error:
            raise ApiWriteFailed(f"failed to write PodListeners {namespace}/{name}: create failed with "
                                 f"{error_chain(errors[0])}, merge patch failed") from error

    # -- NodeUnpublishVolume ------------------------------------------------------------------------------------

    @csi_rpc
    async def NodeUnpublishVolume(self, request: csi_pb2.NodeUnpublishVolumeRequest, context: _Context
                                  ) -> csi_pb2.NodeUnpublishVolumeResponse:
        if not request.volume_id:
            raise MissingArgument("volume_id is required")
        if not request.target_path:
            raise MissingArgument("target_path is required")
        target = self._resolve_target(request.target_path)
        if not is_dns1123_subdomain(request.volume_id):
            # never published: a publish needs the PersistentVolume of that name
            raise VolumeNotFound(f"volume {brief(request.volume_id)} does not exist: volume ids of this driver are "
                                 "PersistentVolume names")
        async with self._mounted.lock(target):
            try:
                await asyncio.to_thread(remove_tree, target.path)
            except OSError as error:
                raise VolumeWriteFailed(f"failed to remove {target.path}") from error
            self._mounted.forget(target)
        try:
            await self._forget_pod_listener(request.volume_id, target.pod_uid)
        except KubeError as error:
            # Best effort: the entry disappears with the Pod anyway; failing would only delay Pod teardown.
            log.warning("could not remove the PodListeners entry of volume %s (Pod uid %s): %s",
                        request.volume_id, target.pod_uid, error_chain(error))
        return csi_pb2.NodeUnpublishVolumeResponse()

    async def _forget_pod_listener(self, volume_id: str, pod_uid: str) -> None:
        """Drop the PodListeners entry of this volume if the Pod still exists (behaviour.md "Unpublish cleans up")."""
        try:
            pv = await self._api.get(PV, volume_id)
        except NotFound:
            return
        claim_ref = mapping(pv, "spec", "claimRef")
        namespace, claim_name = claim_ref.get("namespace"), claim_ref.get("name")
        if not namespace or not claim_name:
            return
        name = f"pod-{pod_uid}"
        try:
            pod_listeners = await self._api.get(POD_LISTENERS, name, str(namespace))
            owner = next((o for o in meta(pod_listeners).owner_references if o.kind == "Pod" and o.uid == pod_uid),
                         None)
            if owner is None:
                return
            pod = await self._api.get(POD, owner.name, str(namespace))
        except NotFound:
            return
        if meta(pod).uid != pod_uid:
            return
        volume_name = pod_volume_for_claim(pod, str(claim_name))
        listeners = mapping(pod_listeners, "spec", "listeners")
        if volume_name is None or volume_name not in listeners:
            return
        await self._api.merge_patch(POD_LISTENERS, {"spec": {"listeners": {volume_name: None}}},
                                    name=name, namespace=str(namespace))
