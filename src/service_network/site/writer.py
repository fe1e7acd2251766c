"""The write step of the site controller: applies a :class:`~.plan.NamespacePlan`, returns typed results.

Each item is written only when it differs from what the caches hold, overlaid with what this process wrote and the
watch has not delivered yet (:class:`~operator_runtime.written.Written`): router objects and ConfigMap (server-side
apply), listener Services (created with POST, so a Service that appears meanwhile is never taken over; changed with
a merge patch guarded by the resourceVersion seen), stale Services and the second router of a Site no longer HA
(deleted with a uid precondition), RouterAccesses, access and SecuredAccess Services, Certificates (applied for their
owners; one owned by another object is left alone), certificates issued into Secrets, Secret notes, link identity
records, upstream's default ``redemptionsAllowed`` of AccessGrants. Writes count in the metrics as they did before
this module; every failure becomes :class:`~.outcomes.Failed` with the API server's message and whether a retry may
fix it. The plan is never changed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.applied import SERVICE_ATOMIC_MAPS, apply_is_noop
from operator_runtime.errors import AlreadyExists, ApiFailure, Conflict, KubeError, NotFound, retryable
from operator_runtime.kinds import CONFIG_MAP, SECRET, SERVICE, ResourceInfo
from operator_runtime.objects import JsonDict, mapping, meta

from ..constants import FIELD_MANAGER
from ..kinds import ACCESS_GRANT, CERTIFICATE, ROUTER_ACCESS
from .access import ANNOTATION_ACCESS
from .access_io import AccessWriter
from .certificate_io import CertificateWriter
from .compose import SitePlan
from .grants import DEFAULT_REDEMPTIONS
from .ha import unused_access_service, unused_router_objects
from .identities import IdentityRecord, first_link_records, identity_config_map
from .metrics import ControllerMetrics
from .outcomes import UNCHANGED, Failed, Ok, Result
from .plan import CertificateItem, NamespacePlan, SecuredItem
from .reflectors import SiteCaches
from .services import is_controlled, service_patch
from .templates import up_to_date

__all__ = ["CertificateWritten", "PlanResults", "PlanWriter", "SecuredWritten", "SiteWritten", "uncounted"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SecuredWritten:
    service: Result = UNCHANGED
    certificate: Result | None = None       # Ok(value=the Certificate as it is) when current; None: not wanted


@dataclass(frozen=True)
class CertificateWritten:
    relabel: Result | None = None
    fingerprint: Result | None = None
    binding: Result | None = None
    issue: Result | None = None             # Ok(value=the new certificate's not-after)


@dataclass(frozen=True)
class SiteWritten:
    access_certificates: tuple[Result, ...] = ()
    stale_router_access: Result | None = None
    router_access: Result | None = None
    access_services: tuple[Result, ...] = ()
    router_objects: tuple[Result, ...] = ()
    unused_router: tuple[Result, ...] = ()
    config_map: Result | None = None
    services: Mapping[str, Result] = field(default_factory=dict)      # listener Services by name
    stale_services: tuple[Result, ...] = ()
    identities: tuple[Result, ...] = ()

    def all(self) -> list[Result | None]:
        return [*self.access_certificates, self.stale_router_access, self.router_access, *self.access_services,
                *self.router_objects, *self.unused_router, self.config_map, *self.services.values(),
                *self.stale_services, *self.identities]


@dataclass(frozen=True)
class PlanResults:
    secured: tuple[SecuredWritten, ...] = ()
    certificates: tuple[CertificateWritten, ...] = ()
    site: SiteWritten | None = None
    grants: tuple[Result | None, ...] = ()      # upstream's default redemptionsAllowed written (None: not wanted)

    def all(self) -> list[Result | None]:
        return [*(r for s in self.secured for r in (s.service, s.certificate)),
                *(r for c in self.certificates for r in (c.relabel, c.fingerprint, c.binding, c.issue)),
                *(self.site.all() if self.site is not None else ()), *self.grants]



async def uncounted(write: Awaitable[object], what: str) -> Result:
    """A write outside the write metrics (as these always were): gone is no failure, any other failure is logged and
    may be retried."""
    try:
        await write
    except NotFound:
        return UNCHANGED
    except KubeError as failure:
        log.warning("%s: %s", what, failure)
        return Failed(f"{what}: {failure}", True)
    return Ok()


class PlanWriter:
    """The one writer of the site controller (its no-op detection and write metrics)."""

    def __init__(self, api: KubeApi, caches: SiteCaches, metrics: ControllerMetrics, *,
                 certificates: CertificateWriter) -> None:
        self.api = api
        self.caches = caches
        self.metrics = metrics
        self.access = AccessWriter(api)
        self.certificate_writer = certificates

    async def write(self, plan: NamespacePlan, identities: Mapping[str, IdentityRecord]) -> PlanResults:
        """Every item of ``plan`` in order; ``identities``: the site's link identity records as read."""
        secured = tuple([await self._write_secured(plan.namespace, item) for item in plan.secured])
        certificates = tuple([await self._write_certificate(plan.namespace, item) for item in plan.certificates])
        site = await self._write_site(plan.site, identities) if plan.site is not None else None
        grants = tuple([await self._default_redemptions(plan.namespace, item.obj) if item.default_redemptions
                        else None for item in plan.grants])
        return PlanResults(secured, certificates, site, grants)

    # ---- the paths -----------------------------------------------------------------------------------------------
    async def _write_secured(self, namespace: str, item: SecuredItem) -> SecuredWritten:
        service: Result = UNCHANGED
        if item.composed.service is not None:
            live = self.caches.services.get(f"{namespace}/{meta(item.obj).name}")
            service = await self.access_service(item.composed.service, live)
        if item.certificate is None or isinstance(service, Failed):
            return SecuredWritten(service)
        return SecuredWritten(service, await self.apply_certificate(item.certificate, meta(item.obj).uid))

    async def _write_certificate(self, namespace: str, item: CertificateItem) -> CertificateWritten:
        planned, name = item.planned, meta(item.obj).name
        relabel = (await self.relabel(SECRET, name, namespace, planned.relabel)
                   if planned.relabel is not None else None)
        fingerprint: Result | None = None
        binding: Result | None = None
        issue: Result | None = None
        if item.note_fingerprint:
            problem = await self.certificate_writer.note_fingerprint(namespace, name)
            fingerprint = Failed(problem, True) if problem is not None else Ok()
            if problem is not None:
                log.warning("%s", problem)
        if item.binding_patch is not None:
            binding = await self._note_binding(namespace, name, item.binding_patch)
        if item.issue is not None:
            not_after, problem = await self.certificate_writer.issue(namespace, item.issue)
            if problem is not None:
                issue = Failed(problem, True)
            else:
                if not_after is not None:
                    self.metrics.writes.labels("Secret", "apply").inc()
                issue = Ok(written=not_after is not None, value=not_after)
        return CertificateWritten(relabel, fingerprint, binding, issue)

    async def _write_site(self, plan: SitePlan, identities: Mapping[str, IdentityRecord]) -> SiteWritten:
        access_certificates: tuple[Result, ...] = ()
        stale_router_access = router_access = None
        access_services: tuple[Result, ...] = ()
        if plan.access is not None and plan.active is not None:
            access = plan.access
            access_certificates = tuple([await self.apply_certificate(
                body, str(body["metadata"]["ownerReferences"][0]["uid"])) for body in access.certificates])
            if access.stale_router_access is not None:
                stale_router_access = await self._delete_router_access(plan.namespace, access.stale_router_access)
            if access.router_access is not None:
                router_access = await self._apply_router_access(plan.namespace, access.router_access)
            access_services = tuple([await self.access_service(body, self.caches.services.get(
                f"{plan.namespace}/{meta(body).name}")) for body in access.services])
        router_objects = tuple([await self.apply(info, body) for info, body in plan.router_objects])
        unused = await self._remove_unused_router(plan.namespace, plan.active) if plan.active is not None else ()
        config_map = await self.apply(*plan.config_map) if plan.config_map is not None else None
        services = {name: await self.write_service(plan.namespace, name, body) for name, body in plan.services.items()}
        stale = tuple([await self.delete_service(service) for service in plan.stale_services])
        recorded = await self._record_first_links(plan.active, identities) if plan.active is not None else ()
        return SiteWritten(access_certificates, stale_router_access, router_access, access_services, router_objects,
                           unused, config_map, services, stale, recorded)

    # ---- primitives ----------------------------------------------------------------------------------------------
    def failed(self, kind: str, what: str, failure: KubeError) -> Failed:
        self.metrics.write_failures.labels(kind).inc()
        message = failure.message if isinstance(failure, ApiFailure) else str(failure)
        log.warning("%s: %s", what, message)
        return Failed(f"{what}: {message}", retryable(failure))

    async def apply(self, info: ResourceInfo, body: JsonDict) -> Result:
        """Server-side apply ``body`` unless that would change nothing."""
        body_meta = meta(body)
        written = self.caches.written[info]
        if apply_is_noop(body, written.get(body_meta.key), FIELD_MANAGER):
            return UNCHANGED
        try:
            result = await self.api.apply(info, body, name=body_meta.name, namespace=body_meta.namespace,
                                          field_manager=FIELD_MANAGER, force=True)
        except KubeError as failure:
            return self.failed(info.kind, f"could not write {info.kind} {body_meta.name}", failure)
        self.metrics.writes.labels(info.kind, "apply").inc()
        written.remember(result)
        return Ok()

    async def write_service(self, namespace: str, name: str, body: JsonDict) -> Result:
        """A listener Service: created, or patched when ours and different; never taken over."""
        written = self.caches.written[SERVICE]
        current = written.get(f"{namespace}/{name}")
        try:
            if current is None:
                result = await self.api.create(SERVICE, body, namespace)
                verb = "create"
            elif not is_controlled(current):
                return Failed(f"Service {name} already exists in namespace", False)
            elif (apply_is_noop(body, current, FIELD_MANAGER, atomic_maps=SERVICE_ATOMIC_MAPS)
                  and up_to_date(body, current)):
                return UNCHANGED
            else:
                result = await self.api.merge_patch(SERVICE, service_patch(body, current), name=name,
                                                    namespace=namespace)
                verb = "patch"
        except AlreadyExists:
            # Someone else created it since our cache saw none: never taken over (skupper#2180).
            return Failed(f"Service {name} already exists in namespace", False)
        except KubeError as failure:
            return self.failed("Service", f"Service {name} could not be written", failure)
        self.metrics.writes.labels("Service", verb).inc()
        written.remember(result)
        log.info("%s Service %s/%s", "created" if verb == "create" else "updated", namespace, name)
        return Ok()

    async def delete_service(self, service: Mapping[str, Any]) -> Result:
        service_meta = meta(service)
        try:
            await self.api.delete(SERVICE, service_meta.name, service_meta.namespace, uid=service_meta.uid or None)
        except (NotFound, Conflict):
            return UNCHANGED         # gone already, or replaced by another object of that name
        except KubeError as failure:
            return self.failed("Service", f"could not delete stale Service {service_meta.name}", failure)
        self.metrics.writes.labels("Service", "delete").inc()
        self.caches.written[SERVICE].forget(service_meta.key)
        log.info("deleted stale listener Service %s", service_meta.key)
        return Ok()

    async def access_service(self, body: JsonDict, live: Mapping[str, Any] | None) -> Result:
        """A router access or SecuredAccess Service, applied unless the live one matches."""
        problem = await self.access.write_service(body, live)
        return Failed(problem, True) if problem else Ok()

    async def relabel(self, info: ResourceInfo, name: str, namespace: str, patch: JsonDict) -> Result:
        """A merge patch of an object's labels and annotations (guarded by the resourceVersion it carries); a
        conflict is no failure: the watch brings the newer object and the namespace is looked at again."""
        try:
            await self.api.merge_patch(info, patch, name=name, namespace=namespace)
        except (NotFound, Conflict):
            return UNCHANGED
        except KubeError as failure:
            return self.failed(info.kind, f"could not label {info.kind} {name}", failure)
        self.metrics.writes.labels(info.kind, "patch").inc()
        return Ok()

    async def apply_certificate(self, body: JsonDict, owner_uid: str) -> Result:
        """Apply a Certificate an owner wants unless it is current or owned by another object;
        ``Ok(value=the Certificate as it is)`` when nothing was written."""
        name = meta(body).name
        certificates = self.caches.written_status["Certificate"]
        live = certificates.get(f"{meta(body).namespace}/{name}")
        if live is not None and not any(ref.uid == owner_uid for ref in meta(live).owner_references):
            return Ok(written=False, value=live)
        if live is not None and mapping(live, "spec") == body["spec"] and up_to_date(body, live):
            return Ok(written=False, value=live)
        try:
            result = await self.api.apply(CERTIFICATE, body, name=name, namespace=meta(body).namespace,
                                          field_manager=FIELD_MANAGER, force=True)
        except KubeError as failure:
            return self.failed("Certificate", f"could not write Certificate {name}", failure)
        self.metrics.writes.labels("Certificate", "apply").inc()
        certificates.remember(result)
        return Ok(value=body)

    async def _note_binding(self, namespace: str, name: str, patch: JsonDict) -> Result:
        return await uncounted(self.api.merge_patch(SECRET, patch, name=name, namespace=namespace),
                               f"could not note the binding URL on Secret {namespace}/{name}")

    async def _default_redemptions(self, namespace: str, grant: Mapping[str, Any]) -> Result:
        """Upstream writes the default ``redemptionsAllowed`` (1) into a grant's spec."""
        name = meta(grant).name
        return await uncounted(self.api.merge_patch(ACCESS_GRANT, {"spec": {"redemptionsAllowed": DEFAULT_REDEMPTIONS}},
                                                    name=name, namespace=namespace),
                               f"could not write the default redemptionsAllowed of AccessGrant {namespace}/{name}")

    async def _delete_router_access(self, namespace: str, stale: Mapping[str, Any]) -> Result:
        try:
            await self.api.delete(ROUTER_ACCESS, meta(stale).name, namespace, uid=meta(stale).uid or None)
            self.metrics.writes.labels("RouterAccess", "delete").inc()
        except (NotFound, Conflict):
            return UNCHANGED
        except KubeError as failure:
            return self.failed("RouterAccess", f"could not delete RouterAccess {meta(stale).name}", failure)
        return Ok()

    async def _apply_router_access(self, namespace: str, desired: JsonDict) -> Result:
        live = self.caches.router_accesses.get(f"{namespace}/{meta(desired).name}")
        if live is not None and mapping(live, "spec") == desired["spec"] and up_to_date(desired, live):
            return UNCHANGED
        try:
            await self.api.apply(ROUTER_ACCESS, desired, name=meta(desired).name, namespace=namespace,
                                 field_manager=FIELD_MANAGER, force=True)
            self.metrics.writes.labels("RouterAccess", "apply").inc()
        except KubeError as failure:
            return self.failed("RouterAccess", f"could not write RouterAccess {meta(desired).name}", failure)
        return Ok()

    async def _remove_unused_router(self, namespace: str, site: Mapping[str, Any]) -> tuple[Result, ...]:
        """The second router of a Site that is no longer HA: its Deployment and ConfigMap (when this Site owns
        them) and the access Service exposing it."""
        results: list[Result] = []
        for info, name in unused_router_objects(site):
            current = self.caches.written[info].get(f"{namespace}/{name}")
            if current is None or not any(ref.uid == meta(site).uid for ref in meta(current).owner_references):
                continue
            try:
                await self.api.delete(info, name, namespace, uid=meta(current).uid or None)
            except (NotFound, Conflict):
                pass
            except KubeError as failure:
                results.append(self.failed(info.kind, f"could not delete {info.kind} {name}", failure))
                continue
            self.metrics.writes.labels(info.kind, "delete").inc()
            self.caches.written[info].forget(meta(current).key)
            results.append(Ok())
        for service in self.caches.services.by_index("namespace", namespace):
            if unused_access_service(site, service, meta(service).annotations.get(ANNOTATION_ACCESS)):
                results.append(await self.delete_service(service))
        return tuple(results)

    async def _record_first_links(self, site: Mapping[str, Any],
                                  records: Mapping[str, IdentityRecord]) -> tuple[Result, ...]:
        """Records for links the site's routers accepted from certificates it has no record of (issued elsewhere;
        ``records``: the site's records, as this reconcile read them), so the binding survives the routers."""
        namespace = meta(site).namespace
        incoming = [(link.identity, link.certificate) for status in self.caches.router_statuses(namespace)
                    for link in status.incoming if link.identity and link.certificate]
        results: list[Result] = []
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for record in first_link_records(incoming, records, stamp):
            try:
                await self.api.create(CONFIG_MAP, identity_config_map(site, record), namespace)
            except AlreadyExists:
                continue       # recorded meanwhile (a redemption, or another pass): that record holds
            except KubeError as failure:
                results.append(self.failed("ConfigMap", f"could not record the link identity {record.identity}",
                                           failure))
                continue
            results.append(Ok())
            log.info("link identity %s bound to certificate %s at its first link (namespace %s)",
                     record.identity[:64], record.certificate[:23], namespace)
        return tuple(results)
