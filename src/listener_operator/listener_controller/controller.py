"""The Listener controller: triggers, reconcile (LO §5.4), status with conditions, Warning Events.

Reads only caches (no LIST or GET inside a reconcile). Writes, all server-side apply with force and the upstream
field managers (LO §5.1): the Service, orphan deletions, the Listener status, and Events. A reconcile that would
change nothing writes nothing: the desired Service and status are compared with what the caches hold (plus what this
process wrote itself and the watch has not delivered yet, see :class:`_Written`).

Triggers: the Listener; Services (same name, or controlled by a Listener); ListenerClasses (by ``className``);
EndpointSlices (by Service name *and* namespace); PVs (by the listener-namespace/listener-name labels); Nodes whose
addresses change or that appear/disappear (to every Listener that uses the node: from PV reservations and
endpoints; upstream does not watch Nodes at all, LO §13.1).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from listener_operator.constants import (
    API_GROUP,
    FIELD_MANAGER_LISTENER_STATUS,
    FIELD_MANAGER_SERVICE,
    GROUP_VERSION,
    LABEL_APP_INSTANCE,
    LABEL_APP_MANAGED_BY,
    LABEL_APP_NAME,
    LABEL_ENDPOINTSLICE_SERVICE_NAME,
    MANAGED_BY_VALUE,
    PV_LABEL_LISTENER_NAME,
    PV_LABEL_LISTENER_NAMESPACE,
)
from listener_operator.crd.models import AddressType, ServiceType
from listener_operator.kinds import LISTENER, LISTENER_CLASS
from listener_operator.listener_controller.addresses import (
    ListenerAddresses,
    class_address_type,
    compute_addresses,
    node_port_addresses,
    nodeport_node_names,
)
from listener_operator.listener_controller.ownership import check_not_foreign
from listener_operator.listener_controller.service import (
    ListenerError,
    build_service,
    listener_class_name,
    listener_identity,
    parse_listener_class_spec,
)
from listener_operator.observability import Metrics
from operator_runtime.api import KubeApi
from operator_runtime.applied import SERVICE_ATOMIC_MAPS, apply_is_noop
from operator_runtime.controller import Action, Controller
from operator_runtime.errors import ApiFailure, BadRequest, Conflict, Invalid, NotFound
from operator_runtime.events import EventRecorder
from operator_runtime.kinds import ENDPOINT_SLICE, NODE, PV, SERVICE
from operator_runtime.objects import JsonDict, object_key, object_reference
from operator_runtime.reflector import ApiSource, Reflector
from operator_runtime.workqueue import ExponentialBackoff, WorkQueue

log = logging.getLogger(__name__)

STATUS_FIELDS = ("serviceName", "ingressAddresses", "nodePorts", "conditions", "observedGeneration")
READY = "Ready"


class ListenerClassNotFoundError(ListenerError):
    reason = "GetObject"
    related = "listenerclass"


class ApiRejectedError(ListenerError):
    """The API server refused a write; ``step_reason`` names the step (ApplyService, DeleteOrphans, ApplyStatus).

    ``retry`` is False when the server judged the object itself invalid (400, 422): retrying the same object cannot
    help, and a change of the Listener or its class triggers a new reconcile anyway.
    """

    def __init__(self, reason: str, message: str, failure: ApiFailure) -> None:
        super().__init__(message)
        self.step_reason = reason
        self.retry = not isinstance(failure, BadRequest | Invalid)


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _rv(obj: Mapping[str, Any] | None) -> int:
    try:
        return int(_meta(obj).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Written:
    """Objects this process wrote whose watch event has not arrived yet.

    Without this, a reconcile that runs between our write and its watch event would see the old object and write
    again. An entry is dropped as soon as the cache holds the same or a newer resourceVersion (or a deletion).
    """

    def __init__(self, reflector: Reflector) -> None:
        self.reflector = reflector
        self._objects: dict[str, JsonDict] = {}
        reflector.add_handler(self._on_event)

    def remember(self, obj: JsonDict) -> None:
        key = object_key(obj)
        cached = self.reflector.get(key)
        if cached is None or _rv(obj) > _rv(cached):
            self._objects[key] = obj

    def get(self, key: str) -> JsonDict | None:
        written = self._objects.get(key)
        cached = self.reflector.get(key)
        if written is not None and (cached is None or _rv(written) > _rv(cached)):
            return written
        return cached

    def _on_event(self, old: JsonDict | None, new: JsonDict | None) -> None:
        key = object_key(new if new is not None else old or {})
        written = self._objects.get(key)
        if written is not None and (new is None or _rv(new) >= _rv(written)):
            del self._objects[key]


def _owner_listener_keys(service: Mapping[str, Any]) -> list[str]:
    namespace = _meta(service).get("namespace")
    return [f"{namespace}/{ref.get('name')}" for ref in _meta(service).get("ownerReferences") or []
            if ref.get("kind") == "Listener" and str(ref.get("apiVersion", "")).startswith(f"{API_GROUP}/")
            and ref.get("name")]


def _controller_listener_uids(service: Mapping[str, Any]) -> list[str]:
    return [str(ref["uid"]) for ref in _meta(service).get("ownerReferences") or []
            if ref.get("controller") is True and ref.get("kind") == "Listener" and ref.get("uid")
            and str(ref.get("apiVersion", "")).startswith(f"{API_GROUP}/")]


def _node_addresses_changed(old: JsonDict | None, new: JsonDict | None) -> bool:
    if old is None or new is None:
        return True
    return ((old.get("status") or {}).get("addresses") != (new.get("status") or {}).get("addresses"))


class ListenerController:
    def __init__(self, api: KubeApi, *, recorder: EventRecorder, cluster_domain: str, workers: int = 8,
                 metrics: Metrics | None = None, error_backoff: ExponentialBackoff | None = None,
                 resync_seconds: float | None = None) -> None:
        self.api = api
        self.recorder = recorder
        self.cluster_domain = cluster_domain
        self.metrics = metrics or Metrics()
        self.listeners = Reflector("listeners", ApiSource(api, LISTENER))
        self.classes = Reflector("listenerclasses", ApiSource(api, LISTENER_CLASS))
        self.services = Reflector("services", ApiSource(api, SERVICE))
        self.slices = Reflector("endpointslices", ApiSource(api, ENDPOINT_SLICE,
                                                             label_selector=LABEL_ENDPOINTSLICE_SERVICE_NAME))
        self.pvs = Reflector("persistentvolumes", ApiSource(api, PV, label_selector=PV_LABEL_LISTENER_NAME))
        self.nodes = Reflector("nodes", ApiSource(api, NODE))
        self._written_services = _Written(self.services)
        self._written_listeners = _Written(self.listeners)

        self.listeners.add_index("class", lambda o: [str((o.get("spec") or {}).get("className") or "")])
        self.services.add_index("controller-uid", _controller_listener_uids)
        self.slices.add_index("service", self._slice_service_keys)
        self.pvs.add_index("listener", self._pv_listener_keys)

        # node name -> Listener keys that use it (from their last reconcile), and the reverse
        self._node_users: dict[str, set[str]] = {}
        self._listener_nodes: dict[str, set[str]] = {}

        self.listeners.add_handler(self._forget_deleted)
        queue = WorkQueue(backoff=error_backoff or ExponentialBackoff(base=0.5, cap=60.0))
        self.controller: Controller[None] = Controller(
            "listener", self.listeners, self._reconcile_measured, error_policy, context=None, workers=workers,
            queue=queue, resync_seconds=resync_seconds)
        self.controller.watches(self.services, lambda s: {object_key(s), *_owner_listener_keys(s)})
        self.controller.watches(self.classes, lambda c: [
            object_key(lst) for lst in self.listeners.by_index("class", str(_meta(c).get("name")))])
        self.controller.watches(self.slices, self._slice_service_keys)
        self.controller.watches(self.pvs, self._pv_listener_keys)
        self.controller.watches(self.nodes, lambda n: set(self._node_users.get(str(_meta(n).get("name")), ())),
                                predicate=_node_addresses_changed)

    # ---- wiring helpers ------------------------------------------------------------------------------------------
    @staticmethod
    def _slice_service_keys(endpoint_slice: Mapping[str, Any]) -> list[str]:
        """``namespace/service`` of an EndpointSlice: the namespace counts too (upstream maps by name only)."""
        service = (_meta(endpoint_slice).get("labels") or {}).get(LABEL_ENDPOINTSLICE_SERVICE_NAME)
        return [f"{_meta(endpoint_slice).get('namespace')}/{service}"] if service else []

    @staticmethod
    def _pv_listener_keys(pv: Mapping[str, Any]) -> list[str]:
        labels = _meta(pv).get("labels") or {}
        namespace, name = labels.get(PV_LABEL_LISTENER_NAMESPACE), labels.get(PV_LABEL_LISTENER_NAME)
        return [f"{namespace}/{name}"] if namespace and name else []

    @property
    def synced(self) -> bool:
        return self.controller.synced

    async def run(self) -> None:
        await self.controller.run()

    def observe(self) -> None:
        """Refresh the gauges that mirror live state (called on each /metrics scrape)."""
        self.metrics.queue_depth.set(len(self.controller.queue))
        for reflector in self.controller.reflectors:
            self.metrics.cache_objects.labels(reflector.name).set(len(reflector))
        ready = sum(1 for lst in self.listeners.items() if any(
            c.get("type") == READY and c.get("status") == "True"
            for c in (lst.get("status") or {}).get("conditions") or []))
        self.metrics.listeners_ready.set(ready)

    def _set_node_users(self, key: str, nodes: Iterable[str]) -> None:
        new = set(nodes)
        old = self._listener_nodes.get(key, set())
        for node in old - new:
            users = self._node_users.get(node)
            if users is not None:
                users.discard(key)
                if not users:
                    del self._node_users[node]
        for node in new - old:
            self._node_users.setdefault(node, set()).add(key)
        if new:
            self._listener_nodes[key] = new
        else:
            self._listener_nodes.pop(key, None)

    def _forget_deleted(self, old: JsonDict | None, new: JsonDict | None) -> None:
        if new is None and old is not None:
            self._set_node_users(object_key(old), ())

    # ---- reconcile -----------------------------------------------------------------------------------------------
    async def _reconcile_measured(self, listener: JsonDict, context: None) -> Action:
        start = time.perf_counter()
        outcome = "success"
        try:
            return await self.reconcile(listener)
        except Exception:
            outcome = "error"
            raise
        finally:
            self.metrics.reconciles.labels(outcome).inc()
            self.metrics.reconcile_duration.observe(time.perf_counter() - start)

    async def reconcile(self, listener: JsonDict) -> Action:
        """Bring the Service and the status in line with ``listener``; a failure is reported (Event, status
        condition) and raised for :func:`error_policy`."""
        if _meta(listener).get("deletionTimestamp"):
            return Action.await_change()
        key = object_key(listener)
        log.debug("Starting reconcile of Listener %s", key)
        try:
            await self._reconcile(listener)
        except ListenerError as error:
            await self._report_failure(listener, error)
            raise
        log.debug("Reconciled Listener %s", key)
        return Action.await_change()

    async def _reconcile(self, listener: JsonDict) -> None:
        namespace, name, uid = listener_identity(listener)
        key = f"{namespace}/{name}"
        class_name = listener_class_name(listener)
        listener_class = self.classes.get(class_name)
        if listener_class is None:
            raise ListenerClassNotFoundError(f"ListenerClass {class_name!r} does not exist")
        desired = build_service(listener, listener_class)
        class_spec = parse_listener_class_spec(listener_class)
        existing = self._written_services.get(key)
        check_not_foreign(existing, uid)

        service = existing
        if not apply_is_noop(desired, existing, FIELD_MANAGER_SERVICE, atomic_maps=SERVICE_ATOMIC_MAPS):
            try:
                service = await self.api.apply(SERVICE, desired, name=name, namespace=namespace,
                                               field_manager=FIELD_MANAGER_SERVICE, force=True)
            except ApiFailure as failure:
                raise ApiRejectedError("ApplyService", f"the API server rejected Service {key}: "
                                                       f"{failure.message}", failure) from failure
            self._written_services.remember(service)
        assert service is not None

        addresses = self._addresses(key, class_spec.service_type, service, class_address_type(listener_class))
        await self._delete_orphans(namespace, name, uid)

        status = self._status(listener, service, class_spec.service_type, addresses)
        if await self._apply_status(listener, status) and addresses.missing_nodes:
            # Said once per change of the status (not on every no-op reconcile, which must write nothing).
            await self.recorder.publish(
                listener, type="Warning", reason="GetObject", action="Reconcile",
                note=("skipped node(s) that do not exist: " + ", ".join(addresses.missing_nodes)
                      + "; a pinned PersistentVolume or an endpoint still names them; the other addresses are "
                        "published"),
                related={"apiVersion": "v1", "kind": "Node", "name": addresses.missing_nodes[0]})

    def _addresses(self, key: str, service_type: ServiceType, service: JsonDict, preferred: AddressType
                   ) -> ListenerAddresses:
        if service_type is not ServiceType.NODE_PORT:
            self._set_node_users(key, ())
            return compute_addresses(service_type, service, preferred, cluster_domain=self.cluster_domain)
        node_names = nodeport_node_names(self.pvs.by_index("listener", key), self.slices.by_index("service", key))
        self._set_node_users(key, node_names)
        nodes = {n: node for n in node_names if (node := self.nodes.get(n)) is not None}
        return node_port_addresses(service, node_names, nodes, preferred)

    async def _delete_orphans(self, namespace: str, name: str, uid: str) -> None:
        """Delete Services controlled by this Listener, carrying our labels, other than the one we apply (LO §5.8)."""
        for service in self.services.by_index("controller-uid", uid):
            meta = _meta(service)
            labels = meta.get("labels") or {}
            if meta.get("namespace") != namespace or meta.get("name") == name:
                continue
            if not (labels.get(LABEL_APP_NAME) and labels.get(LABEL_APP_INSTANCE)
                    and labels.get(LABEL_APP_MANAGED_BY) == MANAGED_BY_VALUE):
                continue
            log.info("Deleting orphaned services: %s/%s", namespace, meta.get("name"))
            try:
                await self.api.delete(SERVICE, str(meta.get("name")), namespace, uid=meta.get("uid"))
            except (NotFound, Conflict):
                continue  # already gone, or replaced by another object of that name (uid precondition)
            except ApiFailure as failure:
                raise ApiRejectedError("DeleteOrphans", f"could not delete orphaned Service "
                                                        f"{namespace}/{meta.get('name')}: {failure.message}",
                                       failure) from failure

    # ---- status --------------------------------------------------------------------------------------------------
    def _status(self, listener: JsonDict, service: JsonDict, service_type: ServiceType,
                addresses: ListenerAddresses) -> JsonDict:
        status: JsonDict = {"serviceName": _meta(service).get("name"),
                            "ingressAddresses": addresses.ingress_addresses}
        if service_type is ServiceType.NODE_PORT:
            status["nodePorts"] = addresses.node_ports or {}
        skipped = addresses.missing_nodes + addresses.nodes_without_address
        if addresses.ingress_addresses:
            reason, message = "AddressesPublished", f"{len(addresses.ingress_addresses)} address(es) published"
            state = "True"
        elif service_type is ServiceType.LOAD_BALANCER:
            state, reason = "False", "AwaitingLoadBalancer"
            message = f"waiting for a load balancer to report an address for Service {_meta(service).get('name')}"
        elif service_type is ServiceType.CLUSTER_IP:
            state, reason = "False", "AwaitingClusterIP"
            message = f"Service {_meta(service).get('name')} has no cluster IP yet"
        else:
            state, reason = "False", "NoBackingNodes"
            message = "no Pod using this Listener runs on a node yet, and no volume is pinned to a node"
        if addresses.missing_nodes:
            reason = "NodesMissing"
            message += "; skipped missing node(s): " + ", ".join(addresses.missing_nodes)
        if addresses.nodes_without_address:
            message += "; skipped node(s) without an address: " + ", ".join(addresses.nodes_without_address)
        if skipped and not addresses.ingress_addresses:
            state = "False"
        status["conditions"] = [self._condition(listener, state, reason, message)]
        status["observedGeneration"] = _meta(listener).get("generation")
        return status

    def _condition(self, listener: JsonDict, state: str, reason: str, message: str) -> JsonDict:
        # The status we wrote last may not be in the cache yet: judge the transition against it.
        current = self._written_listeners.get(object_key(listener)) or listener
        previous = next((c for c in (current.get("status") or {}).get("conditions") or []
                         if c.get("type") == READY), None)
        transition = previous.get("lastTransitionTime") if previous and previous.get("status") == state else None
        condition: JsonDict = {"type": READY, "status": state, "reason": reason, "message": message[:32768],
                               "lastTransitionTime": transition or _now()}
        generation = _meta(listener).get("generation")
        if generation is not None:
            condition["observedGeneration"] = generation
        return condition

    async def _apply_status(self, listener: JsonDict, status: JsonDict) -> bool:
        """Write ``status`` unless the Listener already has it; True when written."""
        status = {k: v for k, v in status.items() if v is not None}
        key = object_key(listener)
        current = self._written_listeners.get(key) or listener
        live = current.get("status") or {}
        if all(live.get(k) == status.get(k) for k in STATUS_FIELDS):
            return False
        # Status conditions are compared including lastTransitionTime, which _condition keeps when unchanged.
        meta = _meta(listener)
        body = {"apiVersion": GROUP_VERSION, "kind": "Listener",
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")}, "status": status}
        try:
            written = await self.api.apply(LISTENER, body, name=str(meta.get("name")),
                                           namespace=str(meta.get("namespace")),
                                           field_manager=FIELD_MANAGER_LISTENER_STATUS, force=True,
                                           subresource="status")
        except NotFound:
            return False  # the Listener is gone
        except ApiFailure as failure:
            raise ApiRejectedError("ApplyStatus", f"could not write the status of Listener {key}: "
                                                  f"{failure.message}", failure) from failure
        self._written_listeners.remember(written)
        return True

    async def _report_failure(self, listener: JsonDict, error: ListenerError) -> None:
        reason = error.step_reason if isinstance(error, ApiRejectedError) else error.reason
        self.metrics.reconcile_errors.labels(reason).inc()
        log.warning("Failed to reconcile Listener %s: %s: %s", object_key(listener), reason, error)
        related = self._related(listener, error)
        await self.recorder.publish(listener, type="Warning", reason=reason, note=str(error), action="Reconcile",
                                    related=related)
        if reason == "ApplyStatus":
            return
        # Keep what the status says about addresses; only the condition and the observed generation change.
        key = object_key(listener)
        live = (self._written_listeners.get(key) or listener).get("status") or {}
        status = {k: live[k] for k in ("serviceName", "ingressAddresses", "nodePorts") if k in live}
        status["conditions"] = [self._condition(listener, "False", reason, str(error))]
        status["observedGeneration"] = _meta(listener).get("generation")
        try:
            await self._apply_status(listener, status)
        except ApiRejectedError as failure:
            log.warning("could not record the failure in the status of %s: %s", key, failure)

    def _related(self, listener: JsonDict, error: ListenerError) -> JsonDict | None:
        meta = _meta(listener)
        if error.related == "service":
            service = self.services.get(object_key(listener))
            return object_reference(service) if service else {
                "apiVersion": "v1", "kind": "Service", "name": meta.get("name"), "namespace": meta.get("namespace")}
        if error.related == "listenerclass":
            class_name = (listener.get("spec") or {}).get("className")
            listener_class = self.classes.get(str(class_name)) if class_name else None
            if listener_class is not None:
                return object_reference(listener_class)
            if class_name:
                return {"apiVersion": GROUP_VERSION, "kind": "ListenerClass", "name": str(class_name)}
        if isinstance(error, ApiRejectedError) and error.step_reason in ("ApplyService", "DeleteOrphans"):
            return {"apiVersion": "v1", "kind": "Service", "name": meta.get("name"),
                    "namespace": meta.get("namespace")}
        return None



def error_policy(listener: JsonDict, error: Exception, context: None) -> Action:
    """Retry (with backoff) what a retry can fix: API trouble. A problem in the spec, the class or ownership
    waits for the change that fixes it, which the watches bring."""
    if isinstance(error, ApiRejectedError):
        return Action.retry() if error.retry else Action.await_change()
    if isinstance(error, ListenerError):
        return Action.await_change()
    return Action.retry()
