"""The Listener controller: triggers, reconcile, status writes and Warning Events (behaviour.md "Reconcile").

Reads only caches (no LIST or GET inside a reconcile). Writes, all server-side apply with force and the upstream
field managers (behaviour.md "Field managers"): the Service, orphan deletions, the Listener status, and Events. A
reconcile that would change nothing writes nothing: the desired Service and status are compared with what the caches
hold (plus what this process wrote itself and the watch has not delivered yet, see
:class:`~operator_runtime.written.Written`). What to
write is composed by pure functions: the Service in :mod:`.service`, the addresses in
:mod:`listener_operator.addresses`, the status in :mod:`.status`.

Triggers: the Listener; Services (same name, or controlled by a Listener); ListenerClasses (by ``className``);
EndpointSlices (by Service name *and* namespace); PVs (by the listener-namespace/listener-name labels); Nodes whose
addresses change or that appear/disappear (to every Listener that uses the node: from PV reservations and
endpoints; upstream does not watch Nodes at all, behaviour.md "Triggers").
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from listener_operator.addresses import (
    ENDPOINT_SLICE_CACHE,
    NODE_CACHE,
    PV_CACHE,
    ListenerAddresses,
    compute_addresses,
    endpoint_slice_service_keys,
    nodeport_node_names,
    pv_listener_keys,
    unready_endpoint_count,
)
from listener_operator.constants import (
    FIELD_MANAGER_LISTENER_STATUS,
    FIELD_MANAGER_SERVICE,
    GROUP_VERSION,
    LABEL_APP_INSTANCE,
    LABEL_APP_MANAGED_BY,
    LABEL_APP_NAME,
    LABEL_ENDPOINTSLICE_SERVICE_NAME,
    MANAGED_BY_VALUE,
    PV_LABEL_LISTENER_NAME,
)
from listener_operator.crd.models import ServiceType
from listener_operator.kinds import LISTENER, LISTENER_CLASS
from listener_operator.listener_controller.ownership import check_not_foreign, listener_owner_references
from listener_operator.listener_controller.service import (
    ListenerClass,
    ListenerError,
    build_service,
    check_listener,
    listener_class_name,
    listener_identity,
    parse_listener_class,
    service_type_of,
)
from listener_operator.listener_controller.status import (
    compose_status,
    failure_status,
    is_ready,
    status_is_current,
)
from listener_operator.observability import Metrics
from operator_runtime.api import KubeApi
from operator_runtime.applied import SERVICE_ATOMIC_MAPS, apply_is_noop, owned_fields_cache
from operator_runtime.controller import Action, Controller
from operator_runtime.errors import ApiFailure, BadRequest, Conflict, Invalid, NotFound
from operator_runtime.events import EventRecorder
from operator_runtime.kinds import ENDPOINT_SLICE, NODE, PV, SERVICE
from operator_runtime.objects import (
    JsonDict,
    items,
    mapping,
    meta,
    object_key,
    object_reference,
)
from operator_runtime.projection import KEEP, intern_strings, project
from operator_runtime.reflector import ApiSource, Reflector
from operator_runtime.workqueue import ExponentialBackoff, WorkQueue
from operator_runtime.written import Written

log = logging.getLogger(__name__)


class ListenerClassNotFoundError(ListenerError):
    """The Listener's class does not exist (upstream's reason is the generic ``GetObject``; behaviour.md "Reasons
    that name the problem")."""

    reason = "ListenerClassNotFound"
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


#: How often a Listener whose Service found an allocation range full tries again; a Service releasing node ports or
#: its cluster IP wakes waiting Listeners earlier (one per freed allocation).
RANGE_FULL_RETRY_SECONDS = 300.0


class RangeFullError(ListenerError):
    """The API server could not allocate what the Service needs because the cluster's range is full. Retrying soon
    cannot help (and thousands of Listeners retrying would hammer the API server): the Listener waits for a freed
    allocation or :data:`RANGE_FULL_RETRY_SECONDS`."""

    related = "service"
    what: str = ""
    remedy: str = ""

    def __init__(self, key: str, failure: ApiFailure) -> None:
        super().__init__(
            f"no free {self.what} for Service {key}: the cluster's {self.what} range is full (the API server said: "
            f"{failure.message[:200]}); {self.remedy}. Retrying when a Service releases one, at the latest in "
            f"{RANGE_FULL_RETRY_SECONDS:.0f} s")


class NodePortRangeFullError(RangeFullError):
    reason = "NodePortRangeFull"
    what = "node port"
    remedy = ("delete NodePort Services that are not needed, or widen the range (kube-apiserver "
              "--service-node-port-range)")


class ClusterIPRangeFullError(RangeFullError):
    reason = "ClusterIPRangeFull"
    what = "cluster IP"
    remedy = "delete Services that are not needed, or widen the range (kube-apiserver --service-cluster-ip-range)"


def range_full_error(failure: ApiFailure) -> type[RangeFullError] | None:
    """Which range an apply failure says is full (the apiserver's "failed to allocate a nodePort: range is full"
    and "failed to allocate a serviceIP: range is full"), or None."""
    text = failure.message.lower()
    if failure.code != 500 or "range is full" not in text:
        return None
    if "nodeport" in text:
        return NodePortRangeFullError
    if "serviceip" in text or "clusterip" in text:
        return ClusterIPRangeFullError
    return None


def error_policy(listener: JsonDict, error: Exception, context: None) -> Action:
    """Retry (with backoff) what a retry can fix: API trouble. A problem in the spec, the class or ownership
    waits for the change that fixes it, which the watches bring; a full allocation range waits long (or for a freed
    allocation, see :class:`RangeFullError`)."""
    if isinstance(error, RangeFullError):
        return Action.requeue(RANGE_FULL_RETRY_SECONDS)
    if isinstance(error, ApiRejectedError):
        return Action.retry() if error.retry else Action.await_change()
    if isinstance(error, ListenerError):
        return Action.await_change()
    return Action.retry()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# What the caches keep (cache transforms, see operator_runtime.projection; EndpointSlices, PVs and Nodes are declared
# in listener_operator.addresses, which reads them). A field the reconcile reads must be kept here:
# tests/listener_operator/test_cache_transforms.py runs the reconciles on transformed caches and compares them with whole
# objects.
LISTENER_CACHE = project({
    # listener_identity, object_reference (Events), build_service (labels), compose_status (generation), reconcile
    "metadata": {"name": KEEP, "namespace": KEEP, "uid": KEEP, "resourceVersion": KEEP, "generation": KEEP,
                 "deletionTimestamp": KEEP, "labels": KEEP},
    "spec": KEEP,  # check_listener, build_service, the "class" index
    "status": KEEP,  # status_is_current, compose_status / failure_status (previous conditions), is_ready
})
LISTENER_CLASS_CACHE = project({
    "metadata": {"name": KEEP, "uid": KEEP, "resourceVersion": KEEP},
    "spec": KEEP,  # parse_listener_class
})
# A Service keeps every field: the no-write check compares the whole desired Service (overrides may set any field)
# with it. Of managedFields only our Apply entry stays, cut to what apply_is_noop reads (which fields we own).
SERVICE_CACHE = owned_fields_cache(FIELD_MANAGER_SERVICE, rest=intern_strings)


def _owner_listener_keys(service: Mapping[str, Any]) -> list[str]:
    namespace = meta(service).namespace
    return [f"{namespace}/{ref.name}" for ref in listener_owner_references(service) if ref.name]


def _controller_listener_uids(service: Mapping[str, Any]) -> list[str]:
    return [ref.uid for ref in listener_owner_references(service) if ref.controller and ref.uid]


def _allocations(service: Mapping[str, Any] | None) -> tuple[int, int]:
    """(node ports, cluster IPs) a Service holds."""
    if service is None:
        return 0, 0
    spec = mapping(service, "spec")
    ports = sum(1 for p in items(service, "spec", "ports") if isinstance(p, Mapping) and p.get("nodePort"))
    ports += 1 if spec.get("healthCheckNodePort") else 0
    ips = [ip for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip and ip != "None"]
    return ports, len(ips)


class _RangeWaiters:
    """Listeners whose Service found an allocation range full, oldest first; a Service releasing allocations wakes
    as many of them as it freed (the others keep waiting for their long requeue)."""

    def __init__(self, wake: Callable[[str], None]) -> None:
        self._wake = wake
        self._waiting: dict[type[RangeFullError], dict[str, None]] = {
            NodePortRangeFullError: {}, ClusterIPRangeFullError: {}}

    def add(self, kind: type[RangeFullError], key: str) -> None:
        self._waiting[kind][key] = None

    def discard(self, key: str) -> None:
        for waiting in self._waiting.values():
            waiting.pop(key, None)

    def on_service(self, old: JsonDict | None, new: JsonDict | None) -> None:
        (old_ports, old_ips), (new_ports, new_ips) = _allocations(old), _allocations(new)
        for kind, freed in ((NodePortRangeFullError, old_ports - new_ports),
                            (ClusterIPRangeFullError, old_ips - new_ips)):
            waiting = self._waiting[kind]
            for key in list(waiting)[:max(freed, 0)]:
                del waiting[key]
                self._wake(key)


def _node_addresses_changed(old: JsonDict | None, new: JsonDict | None) -> bool:
    if old is None or new is None:
        return True
    return mapping(old, "status").get("addresses") != mapping(new, "status").get("addresses")


class ListenerController:
    def __init__(self, api: KubeApi, *, recorder: EventRecorder, cluster_domain: str, workers: int = 8,
                 metrics: Metrics | None = None, error_backoff: ExponentialBackoff | None = None,
                 resync_seconds: float | None = None) -> None:
        self.api = api
        self.recorder = recorder
        self.cluster_domain = cluster_domain
        self.metrics = metrics or Metrics()
        self.listeners = Reflector("listeners", ApiSource(api, LISTENER), transform=LISTENER_CACHE)
        self.classes = Reflector("listenerclasses", ApiSource(api, LISTENER_CLASS), transform=LISTENER_CLASS_CACHE)
        self.services = Reflector("services", ApiSource(api, SERVICE), transform=SERVICE_CACHE)
        self.slices = Reflector("endpointslices", ApiSource(api, ENDPOINT_SLICE,
                                                             label_selector=LABEL_ENDPOINTSLICE_SERVICE_NAME),
                                transform=ENDPOINT_SLICE_CACHE)
        self.pvs = Reflector("persistentvolumes", ApiSource(api, PV, label_selector=PV_LABEL_LISTENER_NAME),
                             transform=PV_CACHE)
        self.nodes = Reflector("nodes", ApiSource(api, NODE), transform=NODE_CACHE)
        self._written_services = Written(self.services)
        self._written_listeners = Written(self.listeners)

        self.listeners.add_index("class", lambda o: [str(mapping(o, "spec").get("className") or "")])
        self.services.add_index("controller-uid", _controller_listener_uids)
        self.slices.add_index("service", endpoint_slice_service_keys)
        self.pvs.add_index("listener", pv_listener_keys)

        # node name -> Listener keys that use it (from their last reconcile), and the reverse
        self._node_users: dict[str, set[str]] = {}
        self._listener_nodes: dict[str, tuple[str, ...]] = {}  # (a tuple: smaller than a set per Listener)
        self.listeners.add_handler(self._forget_deleted)
        self._range_waiters = _RangeWaiters(self._wake)
        self._classes: dict[str, tuple[tuple[str, str], ListenerClass | ListenerError]] = {}  # name -> (version, parsed)
        self.classes.add_handler(self._forget_class)
        self.services.add_handler(self._range_waiters.on_service)

        queue = WorkQueue(backoff=error_backoff or ExponentialBackoff(base=0.5, cap=60.0))
        self.controller: Controller[None] = Controller(
            "listener", self.listeners, self._reconcile_measured, error_policy, context=None, workers=workers,
            queue=queue, resync_seconds=resync_seconds)
        self.controller.watches(self.services, lambda s: {object_key(s), *_owner_listener_keys(s)})
        self.controller.watches(self.classes, lambda c: [
            object_key(lst) for lst in self.listeners.by_index("class", meta(c).name)])
        self.controller.watches(self.slices, endpoint_slice_service_keys)
        self.controller.watches(self.pvs, pv_listener_keys)
        self.controller.watches(self.nodes, lambda n: set(self._node_users.get(meta(n).name, ())),
                                predicate=_node_addresses_changed)

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
        self.metrics.listeners_ready.set(sum(1 for lst in self.listeners.items() if is_ready(lst)))

    def _set_node_users(self, key: str, nodes: Iterable[str]) -> None:
        new = set(nodes)
        old = set(self._listener_nodes.get(key, ()))
        for node in old - new:
            users = self._node_users.get(node)
            if users is not None:
                users.discard(key)
                if not users:
                    del self._node_users[node]
        for node in new - old:
            self._node_users.setdefault(node, set()).add(sys.intern(key))
        if new:
            self._listener_nodes[sys.intern(key)] = tuple(sorted(new))
        else:
            self._listener_nodes.pop(key, None)

    def _forget_deleted(self, old: JsonDict | None, new: JsonDict | None) -> None:
        if new is None and old is not None:
            self._set_node_users(object_key(old), ())
            self._range_waiters.discard(object_key(old))

    def _wake(self, key: str) -> None:
        self.controller.enqueue(key)

    def _forget_class(self, old: JsonDict | None, new: JsonDict | None) -> None:
        if new is None and old is not None:
            self._classes.pop(meta(old).name, None)

    def _parsed_class(self, class_object: JsonDict) -> ListenerClass:
        """The class parsed once per version (thousands of Listeners share a few classes); a class that does not
        parse fails every reconcile that uses it alike."""
        version = (meta(class_object).uid, meta(class_object).resource_version)
        name = meta(class_object).name
        known = self._classes.get(name)
        if known is None or known[0] != version:
            try:
                known = (version, parse_listener_class(class_object))
            except ListenerError as error:
                known = (version, error)
            self._classes[name] = known
        if isinstance(known[1], ListenerError):
            raise type(known[1])(str(known[1]))
        return known[1]

    def _current_status(self, listener: JsonDict) -> Mapping[str, Any]:
        """The status the Listener has, counting the one we wrote last even if the cache has not seen it yet."""
        return mapping(self._written_listeners.get(object_key(listener)) or listener, "status")

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
        if meta(listener).deletion_timestamp:
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
        class_object = self.classes.get(class_name)
        if class_object is None:
            raise ListenerClassNotFoundError(f"ListenerClass {class_name!r} does not exist")
        spec = check_listener(listener)  # the Listener's own errors are reported before its class's
        listener_class = self._parsed_class(class_object)
        desired = build_service(listener, listener_class, spec)
        existing = self._written_services.get(key)
        check_not_foreign(existing, uid)

        service = existing
        if not apply_is_noop(desired, existing, FIELD_MANAGER_SERVICE, atomic_maps=SERVICE_ATOMIC_MAPS):
            try:
                service = await self.api.apply(SERVICE, desired, name=name, namespace=namespace,
                                               field_manager=FIELD_MANAGER_SERVICE, force=True)
            except ApiFailure as failure:
                full = range_full_error(failure)
                if full is not None:
                    self._range_waiters.add(full, key)
                    raise full(key, failure) from failure
                raise ApiRejectedError("ApplyService", f"the API server rejected Service {key}: "
                                                       f"{failure.message}", failure) from failure
            self._range_waiters.discard(key)
            self._written_services.remember(service)
        assert service is not None

        service_type = service_type_of(desired)  # the class's, unless the class lets Listeners override it
        addresses = self._addresses(key, listener_class, service_type, service)
        await self._delete_orphans(namespace, name, uid)

        status = compose_status(service_name=meta(service).name, service_type=service_type,
                                addresses=addresses, generation=meta(listener).generation,
                                selector=mapping(mapping(service, "spec"), "selector"),
                                previous=self._current_status(listener), now=_now())
        if await self._apply_status(listener, status) and addresses.missing_nodes:
            # Said once per change of the status (not on every no-op reconcile, which must write nothing).
            await self.recorder.publish(
                listener, type="Warning", reason="NodesMissing", action="Reconcile",
                note=("skipped node(s) that do not exist: " + ", ".join(addresses.missing_nodes)
                      + "; a pinned PersistentVolume or an endpoint still names them; the other addresses are "
                        "published"),
                related={"apiVersion": "v1", "kind": "Node", "name": addresses.missing_nodes[0]})

    def _addresses(self, key: str, listener_class: ListenerClass, service_type: ServiceType,
                   service: JsonDict) -> ListenerAddresses:
        node_names: list[str] = []
        unready = 0
        if service_type is ServiceType.NODE_PORT:
            slices = self.slices.by_index("service", key)
            node_names = nodeport_node_names(self.pvs.by_index("listener", key), slices)
            unready = unready_endpoint_count(slices)
        self._set_node_users(key, node_names)
        nodes = {n: node for n in node_names if (node := self.nodes.get(n)) is not None}
        addresses = compute_addresses(service_type, service, listener_class.address_type_for(service_type),
                                      cluster_domain=self.cluster_domain, node_names=node_names, nodes=nodes)
        addresses.unready_endpoints = unready
        return addresses

    async def _delete_orphans(self, namespace: str, name: str, uid: str) -> None:
        """Delete Services controlled by this Listener, carrying our labels, other than the one we apply
        (behaviour.md "Orphan cleanup")."""
        for service in self.services.by_index("controller-uid", uid):
            service_meta = meta(service)
            labels = service_meta.labels
            if service_meta.namespace != namespace or service_meta.name == name:
                continue
            if not (labels.get(LABEL_APP_NAME) and labels.get(LABEL_APP_INSTANCE)
                    and labels.get(LABEL_APP_MANAGED_BY) == MANAGED_BY_VALUE):
                continue
            log.info("Deleting orphaned services: %s/%s", namespace, service_meta.name)
            try:
                await self.api.delete(SERVICE, service_meta.name, namespace, uid=service_meta.uid or None)
            except (NotFound, Conflict):
                continue  # already gone, or replaced by another object of that name (uid precondition)
            except ApiFailure as failure:
                raise ApiRejectedError("DeleteOrphans", f"could not delete orphaned Service "
                                                        f"{namespace}/{service_meta.name}: {failure.message}",
                                       failure) from failure

    # ---- status --------------------------------------------------------------------------------------------------
    async def _apply_status(self, listener: JsonDict, status: JsonDict) -> bool:
        """Write ``status`` unless the Listener already has it; True when written."""
        status = {k: v for k, v in status.items() if v is not None}
        # Conditions are compared including lastTransitionTime, which ready_condition keeps when unchanged.
        if status_is_current(self._current_status(listener), status):
            return False
        listener_meta = meta(listener)
        key = object_key(listener)
        body = {"apiVersion": GROUP_VERSION, "kind": "Listener",
                "metadata": {"name": listener_meta.name, "namespace": listener_meta.namespace}, "status": status}
        try:
            written = await self.api.apply(LISTENER, body, name=listener_meta.name,
                                           namespace=listener_meta.namespace,
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
        key = object_key(listener)
        self.metrics.reconcile_errors.labels(reason).inc()
        log.warning("Failed to reconcile Listener %s: %s: %s", key, reason, error)
        await self.recorder.publish(listener, type="Warning", reason=reason, note=str(error), action="Reconcile",
                                    related=self._related(listener, error))
        if reason == "ApplyStatus":
            return
        status = failure_status(reason, str(error), generation=meta(listener).generation,
                                previous=self._current_status(listener), now=_now())
        try:
            await self._apply_status(listener, status)
        except ApiRejectedError as failure:
            log.warning("could not record the failure in the status of %s: %s", key, failure)

    def _related(self, listener: JsonDict, error: ListenerError) -> JsonDict | None:
        listener_meta = meta(listener)
        service_reference = {"apiVersion": "v1", "kind": "Service", "name": listener_meta.name,
                             "namespace": listener_meta.namespace}
        if error.related == "service":
            service = self.services.get(object_key(listener))
            return object_reference(service) if service else service_reference
        if error.related == "listenerclass":
            class_name = mapping(listener, "spec").get("className")
            listener_class = self.classes.get(str(class_name)) if class_name else None
            if listener_class is not None:
                return object_reference(listener_class)
            if class_name:
                return {"apiVersion": GROUP_VERSION, "kind": "ListenerClass", "name": str(class_name)}
        if isinstance(error, ApiRejectedError) and error.step_reason in ("ApplyService", "DeleteOrphans"):
            return service_reference
        return None
