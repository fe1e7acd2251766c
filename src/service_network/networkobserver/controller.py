"""The NetworkObserver controller (I/O): for each ``observability.skupper.io/v2alpha1`` NetworkObserver, the objects
:mod:`.compose` makes from its values (:mod:`.values`), written only where they differ from the caches, and the
status a Helm operator would keep (``Initialized``, ``Deployed``, ``ReleaseFailed``, ``deployedRelease``).

- Values that cannot be used (``spec.auth.strategy: openshift``, a bad port, a hostile name) write nothing: the
  objects of the last good spec stay, ``ReleaseFailed`` says which field and why, with a Warning Event.
- An object of the same name that is not this NetworkObserver's (a user's Service, another release's Deployment)
  is never taken over: ``ReleaseFailed`` names it, as Helm refuses a resource it does not own.
- The basic-auth Secret and ``skupper-local-ca`` are created when missing (POST: one that appears meanwhile is
  kept) and never rewritten; the password is made here, from the system's random source. Deleted, they are made
  again (the Secret's owner and the CA's namespace are reconciled).
- Failures a retry can fix (5xx, 429, conflicts, an unreachable API) are retried with backoff.

Caches: NetworkObservers (spec and status), and what it writes, selected by ``app.kubernetes.io/part-of=
skupper-network-observer`` (Secrets without their values). A change of an owned object reconciles its owner.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.applied import SERVICE_ATOMIC_MAPS, apply_is_noop, owned_fields_cache
from operator_runtime.controller import Action, Controller
from operator_runtime.errors import AlreadyExists, KubeError, NotFound, retryable
from operator_runtime.events import EventRecorder
from operator_runtime.kinds import (
    CONFIG_MAP,
    DEPLOYMENT,
    POD,
    ROLE,
    ROLE_BINDING,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    ResourceInfo,
)
from operator_runtime.objects import JsonDict, mapping, meta
from operator_runtime.reflector import ApiSource, Reflector
from operator_runtime.workqueue import ExponentialBackoff, WorkQueue
from operator_runtime.written import Written

from ..constants import FIELD_MANAGER, FIELD_MANAGER_STATUS, OBSERVABILITY_GROUP_VERSION
from ..kinds import CERTIFICATE, NETWORK_OBSERVER
from ..observer.routers import ROUTER_POD_VIEW, ROUTER_SELECTOR, router_urls
from ..site.caches import BINDING_CACHE, SECRET_CACHE, relevant_pod_change
from .compose import (
    LOCAL_CA,
    PART_OF,
    ObserverOptions,
    auth_secret,
    conditions,
    local_ca,
    manifest,
    observer_objects,
)
from .values import ObserverValues, ValuesError, parse_values

__all__ = ["NetworkObserverController"]

log = logging.getLogger(__name__)
PART_OF_SELECTOR = f"app.kubernetes.io/part-of={PART_OF}"
OWNED_KINDS = (SERVICE_ACCOUNT, ROLE, ROLE_BINDING, CONFIG_MAP, SERVICE, DEPLOYMENT, CERTIFICATE)


class RetryLater(Exception):
    """A write failed in a way a retry may fix; the status already says what failed."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner_keys(obj: JsonDict) -> list[str]:
    namespace = meta(obj).namespace
    return [f"{namespace}/{ref.get('name')}" for ref in mapping(obj, "metadata").get("ownerReferences") or []
            if isinstance(ref, Mapping) and ref.get("kind") == "NetworkObserver"
            and ref.get("apiVersion") == OBSERVABILITY_GROUP_VERSION]


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(isinstance(ref, Mapping) and ref.get("uid") == uid
               for ref in mapping(obj, "metadata").get("ownerReferences") or [])


class NetworkObserverController:
    def __init__(self, api: KubeApi, *, recorder: EventRecorder, options: ObserverOptions,
                 watch_namespace: str | None = None, workers: int = 2, resync_seconds: float | None = 600.0,
                 error_backoff: ExponentialBackoff | None = None) -> None:
        self.api = api
        self.recorder = recorder
        self.options = options
        ns = watch_namespace
        self.observers = Reflector("networkobservers", ApiSource(api, NETWORK_OBSERVER, namespace=ns),
                                   transform=BINDING_CACHE)
        owned_cache = owned_fields_cache(FIELD_MANAGER)
        self.caches: dict[ResourceInfo, Reflector] = {
            info: Reflector(f"observer-{info.plural}", ApiSource(api, info, namespace=ns,
                                                                 label_selector=PART_OF_SELECTOR),
                            transform=owned_cache) for info in OWNED_KINDS}
        self.secrets = Reflector("observer-secrets", ApiSource(api, SECRET, namespace=ns,
                                                               label_selector=PART_OF_SELECTOR),
                                 transform=SECRET_CACHE)
        self.observers.add_index("namespace", lambda o: [meta(o).namespace])
        # the site's router Pods: where the observers read the network (their ConfigMap <fullname>-routers)
        self.router_pods = Reflector("observer-router-pods", ApiSource(api, POD, namespace=ns,
                                                                       label_selector=ROUTER_SELECTOR),
                                     transform=ROUTER_POD_VIEW)
        self.router_pods.add_index("namespace", lambda o: [meta(o).namespace])
        self._written = {info: Written(r) for info, r in self.caches.items()}
        self._status = Written(self.observers)
        self._warned: set[tuple[str, int, str]] = set()
        queue = WorkQueue(backoff=error_backoff or ExponentialBackoff(base=0.5, cap=60.0))
        self.controller: Controller[None] = Controller(
            "networkobserver", self.observers, self._reconcile, lambda o, e, c: Action.retry(), context=None,
            workers=workers, queue=queue, resync_seconds=resync_seconds)
        for reflector in (*self.caches.values(), self.secrets):
            self.controller.watches(reflector, _owner_keys)
        self.controller.watches(self.router_pods, self._observers_of_namespace, predicate=relevant_pod_change)
        # skupper-local-ca is nobody's: its namespace's NetworkObservers make it again
        self.controller.watches(self.caches[CERTIFICATE], lambda c: self._observers_of_namespace(c)
                                if meta(c).name == LOCAL_CA else [])

    def _observers_of_namespace(self, obj: JsonDict) -> list[str]:
        return [f"{meta(o).namespace}/{meta(o).name}" for o in self.observers.by_index("namespace", meta(obj).namespace)]

    @property
    def synced(self) -> bool:
        return self.controller.synced

    async def run(self) -> None:
        await self.controller.run()

    # ---- reconcile -----------------------------------------------------------------------------------------------
    async def _reconcile(self, obj: JsonDict, _: None) -> Action:
        m = meta(obj)
        if m.deletion_timestamp:
            return Action.await_change()
        first = (mapping(obj, "status").get("deployedRelease") or None) is None
        failure_reason = "InstallError" if first else "UpgradeError"
        try:
            values = parse_values(m.name, obj.get("spec"))
        except ValuesError as problem:
            await self._finish(obj, None, str(problem), failure_reason)
            return Action.await_change()
        await self._warn_unsupported(obj, values)
        routers = router_urls(self.router_pods.by_index("namespace", m.namespace))
        objects = observer_objects(obj, values, self.options, routers)
        failure, retry = await self._write_objects(obj, values, objects)
        await self._finish(obj, None if failure else manifest(objects), failure, failure_reason)
        if retry:
            raise RetryLater(failure)
        # a name held by another owner: nothing of ours triggers when it goes, so look again in a while
        return Action.requeue(60.0) if failure else Action.await_change()

    async def _write_objects(self, obj: JsonDict, values: ObserverValues,
                             objects: list[tuple[ResourceInfo, JsonDict]]) -> tuple[str | None, bool]:
        namespace, uid = meta(obj).namespace, meta(obj).uid
        for info, body in objects:
            problem, retry = await self._foreign(info, body, uid)
            if problem:
                return problem, retry
        if values.skupper_issued:
            failure = await self._create_once(CERTIFICATE, local_ca(obj, values))
            if failure:
                return failure
        if values.auth_strategy == "basic" and values.create_auth_secret:
            info, body = auth_secret(obj, values, secrets.token_urlsafe(18))
            failure = await self._create_once(info, body)
            if failure:
                return failure
        for info, body in objects:
            if apply_is_noop(body, self._written[info].get(f"{namespace}/{meta(body).name}"), FIELD_MANAGER,
                             atomic_maps=SERVICE_ATOMIC_MAPS if info is SERVICE else ()):
                continue
            try:
                result = await self.api.apply(info, body, name=meta(body).name, namespace=namespace,
                                              field_manager=FIELD_MANAGER, force=True)
            except KubeError as e:
                return f"could not write {info.kind} {meta(body).name}: {e}", retryable(e)
            self._written[info].remember(result)
        return None, False

    async def _foreign(self, info: ResourceInfo, body: JsonDict, uid: str) -> tuple[str | None, bool]:
        """Why ``body`` must not be applied: an object of its name that another owner holds (None: ours or none),
        and whether to retry (the API could not say)."""
        key = f"{meta(body).namespace}/{meta(body).name}"
        live: Mapping[str, Any] | None = self._written[info].get(key)
        if live is None:
            try:
                live = await self.api.get(info, meta(body).name, meta(body).namespace)
            except NotFound:
                return None, False
            except KubeError as e:
                return f"could not read {info.kind} {meta(body).name}: {e}", retryable(e)
        if _owned_by(live, uid):
            return None, False
        return (f"{info.kind} {meta(body).name} exists and does not belong to this NetworkObserver; delete it or "
                f"set spec.fullnameOverride"), False

    async def _create_once(self, info: ResourceInfo, body: JsonDict) -> tuple[str, bool] | None:
        """Create ``body`` unless the cache holds it; never replaces one (one that is not ours, so not cached,
        answers AlreadyExists and is kept)."""
        key = f"{meta(body).namespace}/{meta(body).name}"
        cache = self.secrets if info is SECRET else self.caches[info]
        if cache.get(key) is not None:
            return None
        try:
            await self.api.create(info, body, namespace=meta(body).namespace)
        except AlreadyExists:
            pass
        except KubeError as e:
            return f"could not create {info.kind} {meta(body).name}: {e}", retryable(e)
        return None

    async def _warn_unsupported(self, obj: JsonDict, values: ObserverValues) -> None:
        if not values.unsupported:
            return
        marker = (meta(obj).uid, meta(obj).generation or 0, ",".join(values.unsupported))
        if marker in self._warned:
            return
        if len(self._warned) > 4096:
            self._warned.clear()
        self._warned.add(marker)
        await self.recorder.publish(obj, type="Warning", reason="Unsupported", action="Reconcile",
                                    note=f"{', '.join(values.unsupported)}: not provided by this operator (the rest "
                                         "of the release is deployed)")

    async def _finish(self, obj: JsonDict, deployed_manifest: str | None, failure: str | None,
                      failure_reason: str) -> None:
        """Write the status (if it changed) and, for a new failure, a Warning Event."""
        m = meta(obj)
        current = dict(mapping(self._status.get(m.key) or obj, "status"))
        status: JsonDict = {**current, "conditions": conditions({**obj, "status": current}, failure,
                                                                failure_reason, _now()),
                            "observedGeneration": m.generation}
        if deployed_manifest is not None:
            status["deployedRelease"] = {"name": m.name, "manifest": deployed_manifest}
        if status == current:
            return
        body = {"apiVersion": OBSERVABILITY_GROUP_VERSION, "kind": "NetworkObserver",
                "metadata": {"name": m.name, "namespace": m.namespace}, "status": status}
        try:
            result = await self.api.apply(NETWORK_OBSERVER, body, name=m.name, namespace=m.namespace,
                                          field_manager=FIELD_MANAGER_STATUS, force=True, subresource="status")
        except NotFound:
            return
        except KubeError as e:
            log.warning("could not write the status of NetworkObserver %s: %s", m.key, e)
            raise RetryLater(str(e)) from None
        self._status.remember(result)
        before = {c.get("type"): c for c in current.get("conditions") or [] if isinstance(c, Mapping)}
        was = before.get("ReleaseFailed") or {}
        if failure is not None and (was.get("status") != "True" or was.get("message") != failure):
            await self.recorder.publish(obj, type="Warning", reason="ReleaseFailed", note=failure,
                                        action="Reconcile")
        log.info("NetworkObserver %s: %s", m.key, failure or "deployed")
