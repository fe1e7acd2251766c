"""The site controller: caches, triggers, and the reconcile of one namespace (I/O).

Every change that can matter to a namespace's site queues that namespace; a worker composes the namespace from the
caches (:func:`.compose.compose_site`, pure) and writes what differs from them, nothing else: router objects and
ConfigMap (server-side apply), listener Services (created with POST, so a Service that appears meanwhile is never
taken over; changed with a merge patch guarded by the resourceVersion seen), stale Services (deleted with a uid
precondition), and statuses (server-side apply of the status subresource). A reconcile that changes nothing writes nothing: each
desired object is compared with the cache, overlaid with what this process wrote and the watch has not delivered
yet (:class:`~operator_runtime.written.Written`).

Write failures become statuses with the API server's reason (a Service that cannot be written makes its Listeners
Error, skupper#2571; a router ConfigMap that cannot be written makes every binding Error); failures a retry can fix
(unreachable API, 5xx, 429, conflicts) also retry the namespace with backoff.

The network view is read from the ``skupper-network-status`` ConfigMap the router Pods write (cached with the router
ConfigMaps; :mod:`.netstatus`): a change of a router's status reconciles its namespace, which updates Listener and
Connector ``Matched``, Link ``Operational`` and the Site's ``network``.

Triggers (all mapped to the namespace): Sites, Listeners, Connectors, Links; Pods a Connector selects or that are router
Pods (only changes of phase, readiness, IP, labels or deletion); Services that are ours or named as a Listener's
host; Secrets a Listener or Connector names; the router ConfigMap, the network status ConfigMap, Deployment, ServiceAccount, Role, RoleBinding.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.applied import SERVICE_ATOMIC_MAPS, apply_is_noop
from operator_runtime.controller import Action, Controller
from operator_runtime.errors import (
    AlreadyExists,
    ApiFailure,
    Conflict,
    KubeError,
    NotFound,
    retryable,
)
from operator_runtime.events import EventRecorder
from operator_runtime.kinds import (
    CONFIG_MAP,
    DEPLOYMENT,
    SECRET,
    SERVICE,
    ResourceInfo,
)
from operator_runtime.objects import JsonDict, mapping, meta, object_key
from operator_runtime.workqueue import ExponentialBackoff, WorkQueue

from ..constants import (
    FIELD_MANAGER,
    FIELD_MANAGER_STATUS,
    GROUP_VERSION,
    ROUTER_NAME,
    ROUTER_POD_LABELS,
)
from ..kinds import (
    ACCESS_TOKEN,
    ATTACHED_CONNECTOR,
    ATTACHED_CONNECTOR_BINDING,
    CERTIFICATE,
    CONNECTOR,
    LINK,
    LISTENER,
    MULTI_KEY_LISTENER,
    ROUTER_ACCESS,
    SECURED_ACCESS,
    SITE,
)
from .access import ANNOTATION_ACCESS, ANNOTATION_CERT_NAMES, AccessState, default_issuer
from .access_io import AccessWriter, access_status, decode
from .binder import CredentialBinder
from .bindings import secret_info
from .bounded import BoundedCache
from .certificate_io import CertificateWriter, certificate_status
from .certificates import plan_certificate, renewal_time, timestamp
from .compose import Binding, SiteInputs, SitePlan, SiteState, compose_site
from .control import NAMESPACE_CONFIG, other_controller, our_controller
from .grant_io import GrantKeeper, SiteAccess
from .grant_server import GrantServer, load_grant_ca
from .grants import token_status
from .ha import HA_ROUTER_NAME, unused_access_service, unused_router_objects
from .identities import (
    ANNOTATION_KEY_FINGERPRINT,
    IdentityRecord,
    first_link_records,
    identity_config_map,
)
from .links import LinkState, link_status
from .metrics import ControllerMetrics
from .multikey import reachable_status
from .netstatus import RouterStatusView
from .network import NetworkView
from .pki import LEAF_VALIDITY
from .redeem import TokenRedeemer
from .reflectors import KIND_INFO, SiteCaches
from .resources import RouterOptions
from .secured import compose_secured_access
from .selector import LabelSelector, Requirement
from .services import is_controlled, is_listener_service, service_patch
from .site_keys import ANNOTATION_SITE_BINDING, binding_annotation
from .status import ConditionState, binding_status, error, pending, ready, site_status
from .templates import up_to_date
from .triggers import Triggers, labels_match, string_map

__all__ = ["SiteController", "SiteControllerOptions"]

log = logging.getLogger(__name__)
_KIND_INFO = {"Listener": LISTENER, "Connector": CONNECTOR, "Site": SITE, "RouterAccess": ROUTER_ACCESS,
              "AccessToken": ACCESS_TOKEN, "Link": LINK, "AttachedConnector": ATTACHED_CONNECTOR,
              "AttachedConnectorBinding": ATTACHED_CONNECTOR_BINDING, "MultiKeyListener": MULTI_KEY_LISTENER,
              "Certificate": CERTIFICATE, "SecuredAccess": SECURED_ACCESS}


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


class RetryLater(Exception):
    """A write failed in a way a retry may fix; the statuses already say what failed."""


def error_policy(namespace: JsonDict, failure: Exception, context: object) -> Action:
    return Action.retry()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unnoted_credential(certificate: Mapping[str, Any], secret: Mapping[str, Any] | None) -> bool:
    """A client Certificate whose Secret this controller issued before key fingerprints were noted on it."""
    spec = mapping(certificate, "spec")
    if secret is None or spec.get("client") is not True or spec.get("signing") is True:
        return False
    annotations = meta(secret).annotations
    return ANNOTATION_CERT_NAMES in annotations and ANNOTATION_KEY_FINGERPRINT not in annotations


class SiteController:
    def __init__(self, api: KubeApi, *, recorder: EventRecorder, options: SiteControllerOptions | None = None,
                 metrics: ControllerMetrics | None = None, view: NetworkView | None = None,
                 error_backoff: ExponentialBackoff | None = None) -> None:
        self.api = api
        self.recorder = recorder
        self.options = options or SiteControllerOptions()
        self.metrics = metrics or ControllerMetrics()
        self.caches = caches = SiteCaches(api, watch_namespace=self.options.watch_namespace,
                                          controller_namespace=self.options.controller_namespace)
        self.view: NetworkView = view or RouterStatusView(caches.router_statuses)
        self.access = AccessWriter(api)
        self.certificate_writer = CertificateWriter(api, self.options.certificate_validity)
        self._secured_ca: BoundedCache[str, tuple[str, str]] = BoundedCache()  # issuer Secret -> (uid:rv, PEM)
        self._site_access: dict[str, SiteAccess] = {}
        self.grants = GrantKeeper(api, caches.access_grants, caches.links, self.site_access, caches.network_ids,
                                  lambda namespace: len(caches.identity_records(namespace)), caches.identity_records,
                                  caches.network_links, caches.credential_namespace)
        self.tokens = TokenRedeemer(api, caches.access_tokens, caches.links, caches.secrets, self.site_access)
        self.binder = CredentialBinder(api, caches.links, caches.secrets, self.site_access)
        self._noted: BoundedCache[tuple[str, str], bool] = BoundedCache()
        self._not_ours: dict[str, str] = {}  # namespace -> the controller its ConfigMap skupper names (logged once)

        queue = WorkQueue(backoff=error_backoff or ExponentialBackoff(base=0.5, cap=60.0))
        self.controller: Controller[None] = Controller(
            "site", caches.namespaces, self._reconcile_measured, error_policy, context=None,
            workers=self.options.workers, queue=queue, resync_seconds=self.options.resync_seconds)
        Triggers(caches).watch(self.controller)

    # ---- running -------------------------------------------------------------------------------------------------
    @property
    def synced(self) -> bool:
        return self.controller.synced

    def site_access(self, namespace: str) -> SiteAccess:
        """The active Site of ``namespace`` and its router access endpoints, as its last reconcile found them."""
        return self._site_access.get(namespace) or SiteAccess(None)

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

    async def _bind_first_links(self, site: Mapping[str, Any], records: Mapping[str, IdentityRecord]) -> bool:
        """Records for links the site's routers accepted from certificates it has no record of (issued elsewhere;
        ``records``: the site's records, as this reconcile read them), so the binding survives the routers; whether
        a failed write should be retried."""
        namespace = meta(site).namespace
        incoming = [(link.identity, link.certificate) for status in self.caches.router_statuses(namespace)
                    for link in status.incoming if link.identity and link.certificate]
        retry = False
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for record in first_link_records(incoming, records, stamp):
            try:
                await self.api.create(CONFIG_MAP, identity_config_map(site, record), namespace)
            except AlreadyExists:
                continue       # recorded meanwhile (a redemption, or another pass): that record holds
            except KubeError as failure:
                retry |= self._failed("ConfigMap", f"could not record the link identity {record.identity}",
                                      failure)[1]
                continue
            log.info("link identity %s bound to certificate %s at its first link (namespace %s)",
                     record.identity[:64], record.certificate[:23], namespace)
        return retry

    async def _warn_refused_links(self, site: Mapping[str, Any]) -> None:
        """A Warning Event on the Site for each link its routers refused for its identity (once per refusal)."""
        namespace = meta(site).namespace
        for status in self.caches.router_statuses(namespace):
            for refusal in status.refused:
                key = (namespace, f"{status.router}|{refusal.identity}|{refusal.certificate}|{refusal.at}")
                if not self._noted.add(key, True):
                    continue
                await self.recorder.publish(site, type="Warning", reason="LinkRefused", action="Link",
                                            note=f"router {status.router[:100]} refused a link as "
                                                 f"{refusal.identity[:100]}: {refusal.reason}")

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
    def inputs(self, namespace: str) -> SiteInputs:
        """What the caches hold for ``namespace``."""
        return SiteInputs(
            namespace=namespace,
            sites=self.caches.sites.by_index("namespace", namespace),
            listeners=self.caches.listeners.by_index("namespace", namespace),
            connectors=self.caches.connectors.by_index("namespace", namespace),
            links=self.caches.links.by_index("namespace", namespace),
            services={meta(s).name: s for s in self.caches.services.by_index("namespace", namespace)},
            secrets={meta(s).name: secret_info(s) for s in self.caches.secrets.by_index("namespace", namespace)},
            secret_objects={meta(s).name: s for s in self.caches.secrets.by_index("namespace", namespace)},
            attached_bindings=self.caches.attached_bindings.by_index("namespace", namespace),
            attached_connectors=self.caches.attached_connectors.by_index("siteNamespace", namespace),
            multi_key_listeners=self.caches.multi_key_listeners.by_index("namespace", namespace),
            listening=self.caches.listening(namespace),
            unreachable=self.caches.unreachable(namespace),
            identities=self.caches.identity_records(namespace),
            credentials=self.caches.credentials(namespace),
            router_selectors={name: mapping(live, "spec", "selector") for name in (ROUTER_NAME, HA_ROUTER_NAME)
                              if (live := self.caches.written[DEPLOYMENT].get(f"{namespace}/{name}")) is not None
                              and mapping(live, "spec", "selector")},
            templates=self.caches.templates(namespace),
            ready_ports=self.caches.ready_ports(namespace),
            router_accesses=self.caches.router_accesses.by_index("namespace", namespace),
            router_config_map=self.caches.written[CONFIG_MAP].get(f"{namespace}/{ROUTER_NAME}"),
            router_pods=[p for p in self.caches.pods.by_index("label", f"{namespace}/application=skupper-router")
                         if labels_match(meta(p).labels, ROUTER_POD_LABELS)],
            select_pods=self.caches.select_pods,
            view=self.view,
            router=self.options.router,
            version=self.options.version,
            controller={k: v for k, v in (("name", "service-network-controller"),
                                          ("namespace", self.options.controller_namespace),
                                          ("version", self.options.version)) if v},
        )

    async def reconcile(self, namespace: str) -> Action:
        other = other_controller(self.caches.namespace_configs.get(f"{namespace}/{NAMESPACE_CONFIG}"),
                                 our_controller(self.options.controller_namespace))
        if other is not None:
            if self._not_ours.get(namespace) != other:
                self._not_ours[namespace] = other
                log.info("namespace %s is controlled by %s (its ConfigMap %s): not acting on it", namespace,
                         other[:200], NAMESPACE_CONFIG)
            self.view.publish(namespace, None)
            return Action.await_change()
        retry = await self._execute_secured_accesses(namespace)
        next_look, certificate_retry = await self._execute_certificates(namespace)
        retry |= certificate_retry
        inputs = self.inputs(namespace)
        grants_or_tokens = bool(self.caches.access_grants.by_index("namespace", namespace)
                                or self.caches.access_tokens.by_index("namespace", namespace))
        if not (inputs.sites or inputs.listeners or inputs.connectors or inputs.links or grants_or_tokens
                or inputs.attached_bindings or inputs.attached_connectors or inputs.multi_key_listeners
                or any(is_listener_service(s) for s in inputs.services.values())):
            self.view.publish(namespace, None)
            self.caches.forget_statuses(namespace)
            self._site_access.pop(namespace, None)
        else:
            plan = compose_site(inputs)
            self._site_access[namespace] = SiteAccess(plan.active,
                                                      tuple(plan.access.endpoints) if plan.access else ())
            retry |= await self._execute(plan)
            if plan.active is not None:
                retry |= await self._bind_first_links(plan.active, inputs.identities)
                await self._warn_refused_links(plan.active)
                if inputs.links:
                    retry |= await self._execute_bindings(namespace)
            self.view.publish(namespace, plan.record)
            if grants_or_tokens:
                next_expiry, grant_retry = await self._execute_grants(namespace)
                retry |= grant_retry
                if next_expiry is not None:
                    next_look = next_expiry if next_look is None else min(next_look, next_expiry)
        if retry:
            raise RetryLater(f"some writes in namespace {namespace} failed; retrying")
        return Action.requeue(next_look + 0.5) if next_look is not None else Action.await_change()

    async def _execute_secured_accesses(self, namespace: str) -> bool:
        """SecuredAccesses of ``namespace``: their Services, Certificates and statuses; whether to retry."""
        retry = False
        services = {meta(s).name: s for s in self.caches.services.by_index("namespace", namespace)}
        for obj in self.caches.secured_accesses.by_index("namespace", namespace):
            if meta(obj).deletion_timestamp:
                continue
            selector = LabelSelector(tuple(Requirement(k, "=", (v,)) for k, v in sorted(
                string_map(mapping(obj, "spec").get("selector")).items())))
            plan = compose_secured_access(obj, services, self.caches.select_pods(namespace, selector),
                                          self.caches.templates(namespace))
            configured = plan.configured
            if plan.service is not None and (problem := await self.access.write_service(
                    plan.service, services.get(meta(obj).name))):
                configured, retry = error(problem), True
            ca_pem: str | None = None
            if plan.certificate is not None and configured.status == "True":
                configured, again = await self._apply_certificate(plan.certificate, meta(obj).uid)
                retry |= again
                ca_pem, again = await self._issuer_ca(namespace, plan.issuer)
                retry |= again
            state = AccessState(obj, configured, plan.resolved, plan.endpoints)
            current = self.caches.current_status("SecuredAccess", obj)
            status = access_status(current, state, meta(obj).generation, _now())
            if ca_pem:
                status["ca"] = ca_pem
            written, again = await self._write_status("SecuredAccess", obj, current, status)
            retry |= again
            reason = plan.reason or ("WriteFailed" if configured.reason == "Error" else None)
            if written and reason is not None:
                await self.recorder.publish(obj, type="Warning", reason=reason, note=configured.message,
                                            action="Reconcile")
        return retry

    async def _apply_certificate(self, body: JsonDict, owner_uid: str) -> tuple[ConditionState, bool]:
        """Apply a Certificate the controller wants (for a SecuredAccess, the site CA, a router access) unless it is
        current; (its state for the owner's status: Ready once issued, Error for a Certificate of that name owned by
        another object or one in Error, else Pending; retry)."""
        name = meta(body).name
        live = self.caches.written_status["Certificate"].get(f"{meta(body).namespace}/{name}")
        if live is not None and not any(ref.uid == owner_uid for ref in meta(live).owner_references):
            return error(f"Certificate {name} already exists in namespace"), False
        if live is None or mapping(live, "spec") != body["spec"] or not up_to_date(body, live):
            try:
                result = await self.api.apply(CERTIFICATE, body, name=name, namespace=meta(body).namespace,
                                              field_manager=FIELD_MANAGER, force=True)
                self.metrics.writes.labels("Certificate", "apply").inc()
                self.caches.written_status["Certificate"].remember(result)
            except KubeError as failure:
                message, again = self._failed("Certificate", f"could not write Certificate {name}", failure)
                return error(message), again
            return pending(f"waiting for Certificate {name}"), False
        live_status = mapping(live, "status")
        if live_status.get("status") == "Error":
            return error(f"Certificate {name}: {live_status.get('message')}"), False
        if live_status.get("status") != "Ready":
            return pending(f"waiting for Certificate {name}: {live_status.get('message') or 'not issued yet'}"), False
        return ready(), False

    async def _issuer_ca(self, namespace: str, issuer: str | None) -> tuple[str | None, bool]:
        """The CA certificate (PEM) of the issuer Secret, read when it changed; (PEM or None, retry)."""
        if not issuer:
            return None, False
        key = f"{namespace}/{issuer}"
        view = self.caches.secrets.get(key)
        if view is None:
            return None, False
        version = f"{meta(view).uid}:{mapping(view, 'metadata').get('resourceVersion') or ''}"
        known = self._secured_ca.get(key)
        if known is not None and known[0] == version:
            return known[1], False
        try:
            secret = await self.api.get(SECRET, issuer, namespace)
        except NotFound:
            return None, False
        except KubeError as failure:
            return None, self._failed("Secret", f"could not read the issuer Secret {issuer}", failure)[1]
        pem = decode(secret, "tls.crt").decode("utf-8", "replace")
        self._secured_ca.put(key, (version, pem))
        return pem, False

    async def _note_binding(self, namespace: str, certificate: Mapping[str, Any],
                            secret: Mapping[str, Any] | None) -> bool:
        """Writes onto a client credential's Secret where the site that links with it proves its site key (the
        grant server's binding URL and CA: ``skupper link generate`` passes them on); whether to retry."""
        server = self.grants.server
        spec = mapping(certificate, "spec")
        if (server is None or server.bound is None or secret is None or spec.get("client") is not True
                or spec.get("signing") is True or ANNOTATION_KEY_FINGERPRINT not in meta(secret).annotations):
            return False
        wanted = binding_annotation(server.bound.url, server.ca_pem)
        if meta(secret).annotations.get(ANNOTATION_SITE_BINDING) == wanted:
            return False
        try:
            await self.api.merge_patch(SECRET, {"metadata": {"annotations": {ANNOTATION_SITE_BINDING: wanted}}},
                                       name=meta(secret).name, namespace=namespace)
        except NotFound:
            return False
        except KubeError as failure:
            log.warning("could not note the binding URL on Secret %s/%s: %s", namespace, meta(secret).name, failure)
            return True
        return False

    async def _execute_certificates(self, namespace: str) -> tuple[float | None, bool]:
        """Certificates of ``namespace``: issue or renew into their Secrets, statuses; (seconds to the next renewal,
        retry)."""
        certificates = self.caches.certificates.by_index("namespace", namespace)
        if not certificates:
            return None, False
        secrets = {meta(s).name: s for s in self.caches.secrets.by_index("namespace", namespace)}
        now = datetime.now(UTC)
        next_look: float | None = None
        retry = False
        # the namespace's active Site (its one live Site, else the one its last reconcile chose) signs what names no CA
        live = [s for s in self.caches.sites.by_index("namespace", namespace) if not meta(s).deletion_timestamp]
        active = live[0] if len(live) == 1 else self.site_access(namespace).site
        default_ca = default_issuer(active) if active is not None else None
        templates = self.caches.templates(namespace)
        for obj in certificates:
            if meta(obj).deletion_timestamp:
                continue
            plan = plan_certificate(obj, secrets, now, default_ca, templates)
            if plan.relabel is not None:
                retry |= await self._relabel(SECRET, meta(obj).name, namespace, plan.relabel)
            if plan.issue is None and _unnoted_credential(obj, secrets.get(meta(obj).name)):
                failure = await self.certificate_writer.note_fingerprint(namespace, meta(obj).name)
                if failure is not None:
                    log.warning("%s", failure)
                    retry = True
            if plan.issue is None:
                retry |= await self._note_binding(namespace, obj, secrets.get(meta(obj).name))
            state, expiration, reason = plan.state, plan.expiration, plan.reason
            renew_at = plan.renew_at
            if plan.issue is not None:
                issue = plan.issue
                server = self.grants.server
                if issue.client and not issue.signing and server is not None and server.bound is not None:
                    issue = dataclasses.replace(issue, annotations={
                        **issue.annotations,
                        ANNOTATION_SITE_BINDING: binding_annotation(server.bound.url, server.ca_pem)})
                not_after, failure = await self.certificate_writer.issue(namespace, issue)
                if failure is not None:
                    state, reason = error(failure), "IssueFailed"
                    retry = True
                elif not_after is not None:
                    self.metrics.writes.labels("Secret", "apply").inc()
                    state, expiration = ready(), timestamp(not_after)
                    renew_at = renewal_time(now, not_after)
            if renew_at is not None:
                left = max((renew_at - now).total_seconds(), 0.0)
                next_look = left if next_look is None else min(next_look, left)
            current = self.caches.current_status("Certificate", obj)
            status = certificate_status(current, state, expiration, meta(obj).generation, _now())
            written, again = await self._write_status("Certificate", obj, current, status)
            retry |= again
            if written and reason is not None:
                await self.recorder.publish(obj, type="Warning", reason=reason, note=state.message,
                                            action="Reconcile")
        return next_look, retry

    async def _execute_grants(self, namespace: str) -> tuple[float | None, bool]:
        """Grant statuses, token redemptions and their statuses; (seconds to the next grant expiry, retry)."""
        next_expiry, retry = await self.grants.reconcile(namespace)
        for outcome in await self.tokens.reconcile(namespace):
            retry |= outcome.retry
            current = self.caches.current_status("AccessToken", outcome.obj)
            status = token_status(current, outcome.state, redeemed=outcome.redeemed,
                                  generation=meta(outcome.obj).generation, now=_now())
            written, again = await self._write_status("AccessToken", outcome.obj, current, status)
            retry |= again
            if written and outcome.reason is not None:
                await self.recorder.publish(outcome.obj, type="Warning", reason=outcome.reason,
                                            note=outcome.state.message, action="Redeem")
        return next_expiry, retry

    async def _execute_bindings(self, namespace: str) -> bool:
        """Generated link credentials announced to the sites that issued them; whether to retry."""
        retry = False
        for bound in await self.binder.reconcile(namespace):
            retry |= bound.retry
            if bound.message is not None:
                await self.recorder.publish(bound.link, type="Warning", reason="BindingRefused", note=bound.message,
                                            action="Bind")
        return retry

    async def _execute(self, plan: SitePlan) -> bool:
        """Write what differs; returns whether a failed write should be retried."""
        retry = False
        site_failures: list[str] = []
        config_failure: str | None = None
        if plan.access is not None and plan.active is not None:
            access_failures, access_retry = await self._execute_access(plan)
            site_failures += access_failures
            retry |= access_retry
        for info, body in plan.router_objects:
            failure = await self._apply(info, body)
            if failure is not None:
                site_failures.append(failure[0])
                retry |= failure[1]
        if plan.active is not None:
            retry |= await self._remove_unused_router(plan.namespace, plan.active)
        if plan.config_map is not None:
            failure = await self._apply(*plan.config_map)
            if failure is not None:
                config_failure = failure[0]
                site_failures.append(failure[0])
                retry |= failure[1]
        host_failures: dict[str, str] = {}
        for name, body in plan.services.items():
            failure = await self._write_service(plan.namespace, name, body)
            if failure is not None:
                host_failures[name] = failure[0]
                retry |= failure[1]
        for service in plan.stale_services:
            retry |= await self._delete_service(service)

        for binding in plan.bindings:
            if config_failure is not None and binding.reason is None:
                binding.fail("RouterConfigFailed", config_failure)
            elif binding.host in host_failures and binding.reason is None:
                binding.fail("ServiceWriteFailed", host_failures[binding.host or ""])
            retry |= await self._write_binding_status(binding)
        for link in plan.links:
            if config_failure is not None and link.reason is None:
                link.fail("RouterConfigFailed", config_failure)
            retry |= await self._write_link_status(link)
        for state in plan.sites:
            if state.obj is plan.active and site_failures:
                state.configured = error("; ".join(site_failures))
            retry |= await self._write_site_status(state)
        for obj, reason, note in plan.notes:
            key = (meta(obj).uid, note)
            if self._noted.add(key, True):        # bounded; a note said again after it is dropped is harmless
                await self.recorder.publish(obj, type="Warning", reason=reason, note=note, action="Reconcile")
        return retry

    async def _execute_access(self, plan: SitePlan) -> tuple[list[str], bool]:
        """The router access part of the plan: CA, RouterAccess, Services, certificates, RouterAccess statuses."""
        access, site = plan.access, plan.active
        assert access is not None and site is not None
        failures: list[str] = []
        retry = False
        for body in access.certificates:
            owner_uid = str(body["metadata"]["ownerReferences"][0]["uid"])
            certificate_state, again = await self._apply_certificate(body, owner_uid)
            retry |= again
            if certificate_state.reason == "Error":
                failures.append(certificate_state.message)
        stale = access.stale_router_access
        if stale is not None:
            try:
                await self.api.delete(ROUTER_ACCESS, meta(stale).name, plan.namespace, uid=meta(stale).uid or None)
                self.metrics.writes.labels("RouterAccess", "delete").inc()
            except (NotFound, Conflict):
                pass
            except KubeError as failure:
                message, again = self._failed("RouterAccess", f"could not delete RouterAccess {meta(stale).name}",
                                              failure)
                failures.append(message)
                retry |= again
        desired = access.router_access
        live = self.caches.router_accesses.get(object_key(desired)) if desired is not None else None
        if desired is not None and (live is None or mapping(live, "spec") != desired["spec"]
                                    or not up_to_date(desired, live)):
            try:
                await self.api.apply(ROUTER_ACCESS, desired, name=meta(desired).name, namespace=plan.namespace,
                                     field_manager=FIELD_MANAGER, force=True)
                self.metrics.writes.labels("RouterAccess", "apply").inc()
            except KubeError as failure:
                message, again = self._failed("RouterAccess", f"could not write RouterAccess {meta(desired).name}",
                                              failure)
                failures.append(message)
                retry |= again
        services = {meta(s).name: s for s in self.caches.services.by_index("namespace", plan.namespace)}
        for body in access.services:
            if problem := await self.access.write_service(body, services.get(meta(body).name)):
                failures.append(problem)
                retry = True
        for state in access.states:
            current = self.caches.current_status("RouterAccess", state.obj)
            status = access_status(current, state, meta(state.obj).generation, _now())
            retry |= (await self._write_status("RouterAccess", state.obj, current, status))[1]
        return failures, retry

    async def _relabel(self, info: ResourceInfo, name: str, namespace: str, patch: JsonDict) -> bool:
        """A merge patch of an object's labels and annotations (guarded by the resourceVersion it carries); whether
        to retry (a conflict: the watch brings the newer object and the namespace is looked at again)."""
        try:
            await self.api.merge_patch(info, patch, name=name, namespace=namespace)
        except (NotFound, Conflict):
            return False
        except KubeError as failure:
            return self._failed(info.kind, f"could not label {info.kind} {name}", failure)[1]
        self.metrics.writes.labels(info.kind, "patch").inc()
        return False

    def _failed(self, kind: str, what: str, failure: KubeError) -> tuple[str, bool]:
        self.metrics.write_failures.labels(kind).inc()
        message = failure.message if isinstance(failure, ApiFailure) else str(failure)
        log.warning("%s: %s", what, message)
        return f"{what}: {message}", retryable(failure)

    async def _apply(self, info: ResourceInfo, body: JsonDict) -> tuple[str, bool] | None:
        """Server-side apply ``body`` unless that would change nothing; the failure (message, retry) or None."""
        body_meta = meta(body)
        written = self.caches.written[info]
        if apply_is_noop(body, written.get(body_meta.key), FIELD_MANAGER):
            return None
        try:
            result = await self.api.apply(info, body, name=body_meta.name, namespace=body_meta.namespace,
                                          field_manager=FIELD_MANAGER, force=True)
        except KubeError as failure:
            return self._failed(info.kind, f"could not write {info.kind} {body_meta.name}", failure)
        self.metrics.writes.labels(info.kind, "apply").inc()
        written.remember(result)
        return None

    async def _write_service(self, namespace: str, name: str, body: JsonDict) -> tuple[str, bool] | None:
        written = self.caches.written[SERVICE]
        current = written.get(f"{namespace}/{name}")
        what = f"Service {name} could not be written"
        try:
            if current is None:
                result = await self.api.create(SERVICE, body, namespace)
                verb = "create"
            elif not is_controlled(current):
                return f"Service {name} already exists in namespace", False
            elif (apply_is_noop(body, current, FIELD_MANAGER, atomic_maps=SERVICE_ATOMIC_MAPS)
                  and up_to_date(body, current)):
                return None
            else:
                result = await self.api.merge_patch(SERVICE, service_patch(body, current), name=name,
                                                    namespace=namespace)
                verb = "patch"
        except AlreadyExists:
            # Someone else created it since our cache saw none: never taken over (skupper#2180).
            return f"Service {name} already exists in namespace", False
        except KubeError as failure:
            return self._failed("Service", what, failure)
        self.metrics.writes.labels("Service", verb).inc()
        written.remember(result)
        log.info("%s Service %s/%s", "created" if verb == "create" else "updated", namespace, name)
        return None

    async def _remove_unused_router(self, namespace: str, site: Mapping[str, Any]) -> bool:
        """The second router of a Site that is no longer HA: its Deployment and ConfigMap (when this Site owns
        them) and the access Service exposing it; returns whether a failed delete should be retried."""
        retry = False
        for info, name in unused_router_objects(site):
            current = self.caches.written[info].get(f"{namespace}/{name}")
            if current is None or not any(ref.uid == meta(site).uid for ref in meta(current).owner_references):
                continue
            try:
                await self.api.delete(info, name, namespace, uid=meta(current).uid or None)
            except (NotFound, Conflict):
                pass
            except KubeError as failure:
                retry |= self._failed(info.kind, f"could not delete {info.kind} {name}", failure)[1]
                continue
            self.metrics.writes.labels(info.kind, "delete").inc()
            self.caches.written[info].forget(meta(current).key)
        for service in self.caches.services.by_index("namespace", namespace):
            if unused_access_service(site, service, meta(service).annotations.get(ANNOTATION_ACCESS)):
                retry |= await self._delete_service(service)
        return retry

    async def _delete_service(self, service: Mapping[str, Any]) -> bool:
        service_meta = meta(service)
        try:
            await self.api.delete(SERVICE, service_meta.name, service_meta.namespace, uid=service_meta.uid or None)
        except (NotFound, Conflict):
            return False         # gone already, or replaced by another object of that name
        except KubeError as failure:
            return self._failed("Service", f"could not delete stale Service {service_meta.name}", failure)[1]
        self.metrics.writes.labels("Service", "delete").inc()
        self.caches.written[SERVICE].forget(service_meta.key)
        log.info("deleted stale listener Service %s", service_meta.key)
        return False

    async def _write_binding_status(self, binding: Binding) -> bool:
        current = self.caches.current_status(binding.kind, binding.obj)
        strategy = (reachable_status(binding.obj, binding.reachable) if binding.reachable is not None else None)
        status = binding_status(current, kind=binding.kind, configured=binding.configured, matched=binding.matched,
                                generation=meta(binding.obj).generation, now=_now(),
                                selected_pods=binding.selected_pods, strategy=strategy)
        written, retry = await self._write_status(binding.kind, binding.obj, current, status)
        if written and binding.reason is not None:
            await self.recorder.publish(binding.obj, type="Warning", reason=binding.reason,
                                        note=binding.configured.message, action="Reconcile")
        return retry

    async def _write_link_status(self, state: LinkState) -> bool:
        current = self.caches.current_status("Link", state.obj)
        status = link_status(current, state, generation=meta(state.obj).generation, now=_now())
        written, retry = await self._write_status("Link", state.obj, current, status)
        if written and state.reason is not None:
            await self.recorder.publish(state.obj, type="Warning", reason=state.reason,
                                        note=state.configured.message, action="Reconcile")
        return retry

    async def _write_site_status(self, state: SiteState) -> bool:
        current = self.caches.current_status("Site", state.obj)
        status = site_status(current, configured=state.configured, running=state.running, resolved=state.resolved,
                             generation=meta(state.obj).generation, now=_now(), extra=state.extra)
        return (await self._write_status("Site", state.obj, current, status))[1]

    async def _write_status(self, kind: str, obj: Mapping[str, Any], current: Mapping[str, Any],
                            status: JsonDict) -> tuple[bool, bool]:
        """Apply ``status`` unless the object has it already; (written, retry)."""
        if dict(current) == status:
            return False, False
        obj_meta = meta(obj)
        info = KIND_INFO[kind]
        body = {"apiVersion": GROUP_VERSION, "kind": kind,
                "metadata": {"name": obj_meta.name, "namespace": obj_meta.namespace}, "status": status}
        try:
            result = await self.api.apply(info, body, name=obj_meta.name, namespace=obj_meta.namespace,
                                          field_manager=FIELD_MANAGER_STATUS, force=True, subresource="status")
        except NotFound:
            return False, False
        except KubeError as failure:
            return False, self._failed(kind, f"could not write the status of {kind} {obj_meta.key}", failure)[1]
        self.metrics.writes.labels(kind, "status").inc()
        self.caches.written_status[kind].remember(result)
        return True, False

    def keys(self) -> Sequence[str]:
        return self.caches.namespaces.keys()

    def enqueue(self, namespaces: Iterable[str]) -> None:
        for namespace in namespaces:
            self.controller.enqueue(namespace)
