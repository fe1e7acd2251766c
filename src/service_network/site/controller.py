"""The site controller: one namespace's reconcile as read -> plan -> write -> statuses.

Every change that can matter to a namespace's site queues that namespace (:mod:`.triggers`, over the caches of
:mod:`.reflectors`). A worker then:

1. reads the namespace's inputs once, before writing anything (:mod:`.read` -> :class:`~.snapshot.NamespaceSnapshot`);
2. plans the namespace from that snapshot alone (:func:`.plan.plan_namespace`, pure): SecuredAccesses, Certificates,
   the Site path (router objects and ConfigMap, Services, router access, binding, Link and Site states, Events) and
   AccessGrants;
3. writes what differs from the caches (:class:`~.writer.PlanWriter`), one typed result per item
   (:class:`~.outcomes.Ok` / :class:`~.outcomes.Failed`);
4. writes the statuses and Events the plan and the results call for (:class:`~.status_writer.StatusWriter`);
5. publishes the site's network record, and runs what talks to other sites (HTTPS) in its own I/O modules: the
   link credential binder (:mod:`.binder`) and the token redeemer (:mod:`.redeem`, whose outcomes the status
   writer writes).

Failures a retry can fix (unreachable API, 5xx, 429, conflicts) raise :class:`~.outcomes.RetryLater` after the
statuses say what failed, and the runtime's error policy (``backoff_on_error``) turns it into ``Action.retry()``
(the namespace again after its next exponential backoff delay; any unexpected exception the same). A namespace
whose certificates are due for renewal or whose grants expire is queued again at that time.

The network view is read from the ``skupper-network-status`` ConfigMap the router Pods write (cached with the router
ConfigMaps; :mod:`.netstatus`): a change of a router's status reconciles its namespace, which updates Listener and
Connector ``Matched``, Link ``Operational`` and the Site's ``network``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from operator_runtime.api import KubeApi
from operator_runtime.controller import Action, Controller, backoff_on_error
from operator_runtime.events import EventRecorder
from operator_runtime.objects import JsonDict, mapping, meta
from operator_runtime.workqueue import ExponentialBackoff, WorkQueue

from .binder import CredentialBinder
from .bounded import BoundedCache
from .certificate_io import CertificateWriter
from .control import NAMESPACE_CONFIG
from .grant_io import GrantKeeper, SiteAccess
from .grant_server import GrantServer, load_grant_ca
from .metrics import ControllerMetrics
from .netstatus import RouterStatusView
from .network import NetworkView
from .outcomes import Failed, Ok, Result, RetryLater, retryable_failures
from .pki import LEAF_VALIDITY
from .plan import NamespacePlan, plan_namespace
from .read import SnapshotReader
from .redeem import TokenRedeemer
from .reflectors import SiteCaches
from .resources import RouterOptions
from .site_keys import binding_annotation
from .status_writer import StatusWriter
from .triggers import Triggers
from .writer import PlanWriter

__all__ = ["SiteController", "SiteControllerOptions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SiteControllerOptions:
    router: RouterOptions = field(default_factory=RouterOptions)
    workers: int = 4
    resync_seconds: float | None = 600.0
    watch_namespace: str | None = None       # None: every namespace
    controller_namespace: str = ""           # reported in Site status.controller; holds the grant server's CA
    grant_server_address: tuple[str, int] | None = None     # where the redemption server listens (None: off)
    grant_server_url: str | None = None      # what grants publish (default https://<address>:<port>)
    certificate_validity: timedelta = LEAF_VALIDITY   # of the certificates Certificate resources get
    version: str = ""


def _soonest(*seconds: float | None) -> float | None:
    known = [s for s in seconds if s is not None]
    return min(known) if known else None


class SiteController:
    def __init__(self, api: KubeApi, *, recorder: EventRecorder, options: SiteControllerOptions | None = None,
                 metrics: ControllerMetrics | None = None, view: NetworkView | None = None,
                 error_backoff: ExponentialBackoff | None = None) -> None:
        self.api = api
        self.recorder = recorder
        self.options = options = options or SiteControllerOptions()
        self.metrics = metrics or ControllerMetrics()
        self.caches = caches = SiteCaches(api, watch_namespace=options.watch_namespace,
                                          controller_namespace=options.controller_namespace)
        self.view: NetworkView = view or RouterStatusView(caches.router_statuses)
        self._site_access: dict[str, SiteAccess] = {}
        self.grants = GrantKeeper(api, caches.access_grants, caches.links, self.site_access, caches.network_ids,
                                  lambda namespace: len(caches.identity_records(namespace)), caches.identity_records,
                                  caches.network_links, caches.credential_namespace)
        self.tokens = TokenRedeemer(api, caches.access_tokens, caches.links, caches.secrets, self.site_access)
        self.binder = CredentialBinder(api, caches.links, caches.secrets, self.site_access)
        self.reader = SnapshotReader(api, caches, view=self.view, router=options.router, version=options.version,
                                     controller_namespace=options.controller_namespace,
                                     site_access=self.site_access, binding_annotation=self._binding_annotation,
                                     metrics=self.metrics, grants=self.grants.recall,
                                     grant_server_ca=self._grant_server_ca)
        self.writer = PlanWriter(api, caches, self.metrics,
                                 certificates=CertificateWriter(api, options.certificate_validity))
        self.statuses = StatusWriter(api, caches, self.metrics, recorder, self.writer.failed)
        #: namespace -> the controller its ConfigMap ``skupper`` names (logged once per change)
        self._not_ours: BoundedCache[str, str] = BoundedCache()

        queue = WorkQueue(backoff=error_backoff or ExponentialBackoff(base=0.5, cap=60.0))
        self.controller: Controller[None] = Controller(
            "site", caches.namespaces, self._reconcile_measured, backoff_on_error, context=None,
            workers=options.workers, queue=queue, resync_seconds=options.resync_seconds)
        Triggers(caches).watch(self.controller)

    # ---- running -------------------------------------------------------------------------------------------------
    @property
    def synced(self) -> bool:
        return self.controller.synced

    def site_access(self, namespace: str) -> SiteAccess:
        """The active Site of ``namespace`` and its router access endpoints, as its last reconcile found them."""
        return self._site_access.get(namespace) or SiteAccess(None)

    def _binding_annotation(self) -> str | None:
        """What client credentials carry to say where their site key is proven, while the grant server serves."""
        server = self.grants.server
        if server is None or server.bound is None:
            return None
        return binding_annotation(server.bound.url, server.ca_pem)

    def _grant_server_ca(self) -> str | None:
        """The CA certificate grants publish, while the grant server runs."""
        return self.grants.server.ca_pem if self.grants.server is not None else None

    async def run(self) -> None:
        """The controller, and the grant server while it runs (only a leader serves redemptions)."""
        address = self.options.grant_server_address
        if address is None:
            await self.controller.run()
            return
        ca = await load_grant_ca(self.api, self.options.controller_namespace or None)
        server = GrantServer(self.grants.redeem, ca, address[0], address[1], self.options.grant_server_url,
                             bind=self.grants.bind)
        await server.start()
        self.grants.server = server
        try:
            await self.controller.run()
        finally:
            self.grants.server = None
            await server.stop()

    def observe(self) -> None:
        """Refresh the gauges mirroring live state (on each /metrics scrape)."""
        m = self.metrics
        m.queue_depth.set(len(self.controller.queue))
        for r in self.controller.reflectors:
            m.cache_objects.labels(r.name).set(len(r))
        for kind, r in (("Listener", self.caches.listeners), ("Connector", self.caches.connectors)):
            counts: dict[str, int] = {"Ready": 0, "Pending": 0, "Error": 0}
            for obj in r.items():
                value = str(mapping(obj, "status").get("status") or "Pending")
                counts[value] = counts.get(value, 0) + 1
            for value, count in counts.items():
                m.bindings.labels(kind, value).set(count)
        m.sites.set(len({meta(cm).namespace for cm in self.caches.config_maps.items()}))

    def keys(self) -> Sequence[str]:
        return self.caches.namespaces.keys()

    def enqueue(self, namespaces: Iterable[str]) -> None:
        for namespace in namespaces:
            self.controller.enqueue(namespace)

    async def _reconcile_measured(self, namespace: JsonDict, context: None) -> Action:
        start = time.perf_counter()
        outcome = "success"
        try:
            return await self.reconcile(meta(namespace).name)
        except Exception:
            outcome = "error"
            raise
        finally:
            self.metrics.reconciles.labels(outcome).inc()
            self.metrics.reconcile_duration.observe(time.perf_counter() - start)

    # ---- reconcile -----------------------------------------------------------------------------------------------
    async def reconcile(self, namespace: str) -> Action:
        """read -> plan -> write -> statuses; the typed failures a retry may fix raise :class:`RetryLater`."""
        snapshot = await self.reader.read(namespace)
        plan = plan_namespace(snapshot)
        if plan.other_controller is not None:
            self._leave(namespace, plan.other_controller)
            return Action.await_change()
        self._remember_site(plan)
        written = await self.writer.write(plan, snapshot.site.identities)
        statuses = await self.statuses.write_plan(plan, written, snapshot.now)
        results: list[Result | None] = [*snapshot.read_failures, *written.all(), *statuses.results]
        next_look = statuses.next_renewal
        if plan.bind_links:
            results += await self._bind_links(namespace)
        self.view.publish(namespace, plan.site.record if plan.site is not None else None)
        next_look = _soonest(next_look, *(grant.expires_in for grant in plan.grants))
        if plan.grants_or_tokens:
            results += await self._redeem_tokens(namespace)
        if failures := retryable_failures(results):
            raise RetryLater(namespace, failures)
        return Action.requeue(next_look + 0.5) if next_look is not None else Action.await_change()

    def _leave(self, namespace: str, other: str) -> None:
        """A namespace another controller acts on: said once, its network record withdrawn."""
        if self._not_ours.get(namespace) != other:
            self._not_ours.put(namespace, other)
            log.info("namespace %s is controlled by %s (its ConfigMap %s): not acting on it", namespace,
                     other[:200], NAMESPACE_CONFIG)
        self.view.publish(namespace, None)

    def _remember_site(self, plan: NamespacePlan) -> None:
        """The active Site and its router access endpoints, for the grant, token and binding paths."""
        if plan.site is None:
            self.caches.forget_statuses(plan.namespace)
            self._site_access.pop(plan.namespace, None)
            return
        access = plan.site.access
        self._site_access[plan.namespace] = SiteAccess(plan.site.active,
                                                       tuple(access.endpoints) if access is not None else ())

    async def _bind_links(self, namespace: str) -> list[Result]:
        """Generated link credentials announced to the sites that issued them (a refusal: a Warning Event)."""
        results: list[Result] = []
        for bound in await self.binder.reconcile(namespace):
            results.append(Failed(bound.message or "binding failed", True) if bound.retry else Ok())
            if bound.message is not None:
                await self.recorder.publish(bound.link, type="Warning", reason="BindingRefused", note=bound.message,
                                            action="Bind")
        return results

    async def _redeem_tokens(self, namespace: str) -> list[Result]:
        """Token redemptions (HTTPS to the granting sites: :mod:`.redeem`) and their statuses."""
        outcomes = await self.tokens.reconcile(namespace)
        results: list[Result] = [Failed(f"AccessToken {meta(o.obj).name}: {o.state.message}", True)
                                 for o in outcomes if o.retry]
        return results + await self.statuses.tokens(outcomes)
