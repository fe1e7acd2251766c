"""The status step of the site controller: every status and Event a namespace's plan and its write results call for.

Statuses are composed from the plan's states and the writer's typed results (:mod:`.outcomes`), never by changing
the plan: a Service that could not be written makes its Listeners Error (``ServiceWriteFailed``, skupper#2571), a
router ConfigMap that could not be written makes every binding and Link Error (``RouterConfigFailed``), the failed
writes of the Site path make the active Site's ``Configured`` Error, a Certificate an owner wants gives its
``Configured`` (Pending while it is written, Error when it failed or is another object's). Each status is written
(server-side apply of the status subresource) only when it differs from what the object has; a Warning Event goes
with a status that changed to an error, and each of the plan's notes is said once.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.errors import KubeError, NotFound
from operator_runtime.events import EventRecorder
from operator_runtime.objects import JsonDict, mapping, meta

from ..constants import FIELD_MANAGER_STATUS, GROUP_VERSION
from ..kinds import ACCESS_GRANT
from .access import AccessState
from .access_io import access_status
from .bindings import Binding
from .bounded import BoundedCache
from .certificate_io import certificate_status
from .certificates import renewal_time, timestamp
from .compose import SitePlan, SiteState
from .grants import token_status
from .links import LinkState, link_status
from .metrics import ControllerMetrics
from .multikey import reachable_status
from .outcomes import UNCHANGED, Failed, Ok, Result
from .plan import CertificateItem, GrantItem, NamespacePlan, SecuredItem
from .redeem import TokenOutcome
from .reflectors import KIND_INFO, SiteCaches
from .status import ConditionState, binding_status, error, pending, ready, site_status
from .writer import CertificateWritten, PlanResults, SecuredWritten, SiteWritten, uncounted

__all__ = ["StatusResults", "StatusWriter", "certificate_state", "site_failures"]


def now_text() -> str:
    return datetime.datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def certificate_state(body: Mapping[str, Any], owner_uid: str, result: Result) -> ConditionState:
    """The state a Certificate an owner wants gives the owner's status: Error when it could not be written, is in
    Error or belongs to another object; Pending while it is (re)written or not issued; else Ready."""
    name = meta(body).name
    if isinstance(result, Failed):
        return error(result.message)
    if result.written:
        return pending(f"waiting for Certificate {name}")
    live = result.value if isinstance(result.value, Mapping) else {}
    if not any(ref.uid == owner_uid for ref in meta(live).owner_references):
        return error(f"Certificate {name} already exists in namespace")
    live_status = mapping(live, "status")
    if live_status.get("status") == "Error":
        return error(f"Certificate {name}: {live_status.get('message')}")
    if live_status.get("status") != "Ready":
        return pending(f"waiting for Certificate {name}: {live_status.get('message') or 'not issued yet'}")
    return ready()


def _owner_uid(body: Mapping[str, Any]) -> str:
    return str(body["metadata"]["ownerReferences"][0]["uid"])


def site_failures(plan: SitePlan, written: SiteWritten) -> list[str]:
    """What the active Site's ``Configured`` reports as failed, in the order it was written."""
    found: list[str] = []
    if plan.access is not None:
        for body, result in zip(plan.access.certificates, written.access_certificates, strict=False):
            state = certificate_state(body, _owner_uid(body), result)
            if state.reason == "Error":
                found.append(state.message)
    found += [r.message for r in (written.stale_router_access, written.router_access, *written.access_services,
                                  *written.router_objects, written.config_map) if isinstance(r, Failed)]
    return found


@dataclass(frozen=True)
class StatusResults:
    results: tuple[Result, ...] = ()
    #: seconds until the nearest certificate renewal (None: none due)
    next_renewal: float | None = None


class StatusWriter:
    """The one status writer: statuses only when they differ, their Events, notes said once."""

    def __init__(self, api: KubeApi, caches: SiteCaches, metrics: ControllerMetrics, recorder: EventRecorder,
                 failed: Callable[[str, str, KubeError], Failed]) -> None:
        self.api = api
        self.caches = caches
        self.metrics = metrics
        self.recorder = recorder
        self._failed = failed
        self._noted: BoundedCache[tuple[str, str], bool] = BoundedCache()

    async def write_plan(self, plan: NamespacePlan, written: PlanResults, now: datetime.datetime) -> StatusResults:
        results: list[Result] = []
        for secured, secured_written in zip(plan.secured, written.secured, strict=True):
            results.append(await self._secured(secured, secured_written))
        next_renewal: float | None = None
        for certificate, certificate_written in zip(plan.certificates, written.certificates, strict=True):
            result, renew_in = await self._certificate(certificate, certificate_written, now)
            results.append(result)
            if renew_in is not None:
                next_renewal = renew_in if next_renewal is None else min(next_renewal, renew_in)
        if plan.site is not None and written.site is not None:
            results += await self._site(plan.site, written.site)
        for grant in plan.grants:
            results.append(await self._grant(plan.namespace, grant))
        return StatusResults(tuple(results), next_renewal)

    # ---- the paths -----------------------------------------------------------------------------------------------
    async def _secured(self, item: SecuredItem, written: SecuredWritten) -> Result:
        composed, obj = item.composed, item.obj
        configured = composed.configured
        ca: str | None = None
        if isinstance(written.service, Failed):
            configured = error(written.service.message)
        elif item.certificate is not None and written.certificate is not None:
            configured = certificate_state(item.certificate, meta(obj).uid, written.certificate)
            ca = item.ca
        state = AccessState(obj, configured, composed.resolved, composed.endpoints)
        current = self.caches.current_status("SecuredAccess", obj)
        status = access_status(current, state, meta(obj).generation, now_text())
        if ca:
            status["ca"] = ca
        result = await self.write("SecuredAccess", obj, current, status)
        reason = composed.reason or ("WriteFailed" if configured.reason == "Error" else None)
        await self._warn_if_written(result, obj, reason, configured.message)
        return result

    async def _certificate(self, item: CertificateItem, written: CertificateWritten, now: datetime.datetime
                           ) -> tuple[Result, float | None]:
        planned, obj = item.planned, item.obj
        state, expiration, reason, renew_at = planned.state, planned.expiration, planned.reason, planned.renew_at
        if isinstance(written.issue, Failed):
            state, reason = error(written.issue.message), "IssueFailed"
        elif isinstance(written.issue, Ok) and isinstance(written.issue.value, datetime.datetime):
            not_after = written.issue.value
            state, expiration, renew_at = ready(), timestamp(not_after), renewal_time(now, not_after)
        renew_in = max((renew_at - now).total_seconds(), 0.0) if renew_at is not None else None
        current = self.caches.current_status("Certificate", obj)
        status = certificate_status(current, state, expiration, meta(obj).generation, now_text())
        result = await self.write("Certificate", obj, current, status)
        await self._warn_if_written(result, obj, reason, state.message)
        return result, renew_in

    async def _site(self, plan: SitePlan, written: SiteWritten) -> list[Result]:
        results: list[Result] = []
        if plan.access is not None and plan.active is not None:
            for access_state in plan.access.states:
                current = self.caches.current_status("RouterAccess", access_state.obj)
                status = access_status(current, access_state, meta(access_state.obj).generation, now_text())
                results.append(await self.write("RouterAccess", access_state.obj, current, status))
        config_failure = written.config_map.message if isinstance(written.config_map, Failed) else None
        host_failures = {name: r.message for name, r in written.services.items() if isinstance(r, Failed)}
        for binding in plan.bindings:
            if config_failure is not None and binding.reason is None:
                binding = dataclasses.replace(binding, configured=error(config_failure), reason="RouterConfigFailed")
            elif binding.host in host_failures and binding.reason is None:
                binding = dataclasses.replace(binding, configured=error(host_failures[binding.host or ""]),
                                              reason="ServiceWriteFailed")
            results.append(await self._binding(binding))
        for link in plan.links:
            if config_failure is not None and link.reason is None:
                link = dataclasses.replace(link, configured=error(config_failure), reason="RouterConfigFailed",
                                           operational=None)
            results.append(await self._link(link))
        failures = site_failures(plan, written)
        for state in plan.sites:
            if state.obj is plan.active and failures:
                state = dataclasses.replace(state, configured=error("; ".join(failures)))
            results.append(await self._site_state(state))
        for obj, reason, note in plan.notes:
            await self.note_once(obj, (meta(obj).uid, note), reason=reason, note=note, action="Reconcile")
        if plan.active is not None:
            await self._warn_refused_links(plan.active)
        return results

    async def _binding(self, binding: Binding) -> Result:
        current = self.caches.current_status(binding.kind, binding.obj)
        strategy = (reachable_status(binding.obj, binding.reachable) if binding.reachable is not None else None)
        status = binding_status(current, kind=binding.kind, configured=binding.configured, matched=binding.matched,
                                generation=meta(binding.obj).generation, now=now_text(),
                                selected_pods=binding.selected_pods, strategy=strategy)
        result = await self.write(binding.kind, binding.obj, current, status)
        await self._warn_if_written(result, binding.obj, binding.reason, binding.configured.message)
        return result

    async def _link(self, state: LinkState) -> Result:
        current = self.caches.current_status("Link", state.obj)
        status = link_status(current, state, generation=meta(state.obj).generation, now=now_text())
        result = await self.write("Link", state.obj, current, status)
        await self._warn_if_written(result, state.obj, state.reason, state.configured.message)
        return result

    async def _site_state(self, state: SiteState) -> Result:
        current = self.caches.current_status("Site", state.obj)
        status = site_status(current, configured=state.configured, running=state.running, resolved=state.resolved,
                             generation=meta(state.obj).generation, now=now_text(), extra=state.extra)
        return await self.write("Site", state.obj, current, status)

    async def _grant(self, namespace: str, item: GrantItem) -> Result:
        """An AccessGrant's status, unless it has it (the grant server counts ``redemptions``, never this)."""
        if item.status is None:
            return UNCHANGED
        name = meta(item.obj).name
        body = {"apiVersion": GROUP_VERSION, "kind": "AccessGrant", "metadata": {"name": name, "namespace": namespace},
                "status": item.status}
        return await uncounted(self.api.apply(ACCESS_GRANT, body, name=name, namespace=namespace,
                                              field_manager=FIELD_MANAGER_STATUS, force=True, subresource="status"),
                               f"could not write the status of AccessGrant {namespace}/{name}")

    async def tokens(self, outcomes: list[TokenOutcome]) -> list[Result]:
        """The statuses of the AccessTokens a redemption pass looked at (their Warning Events with them)."""
        results: list[Result] = []
        for outcome in outcomes:
            current = self.caches.current_status("AccessToken", outcome.obj)
            status = token_status(current, outcome.state, redeemed=outcome.redeemed,
                                  generation=meta(outcome.obj).generation, now=now_text())
            result = await self.write("AccessToken", outcome.obj, current, status)
            results.append(result)
            await self._warn_if_written(result, outcome.obj, outcome.reason, outcome.state.message, action="Redeem")
        return results

    # ---- primitives ----------------------------------------------------------------------------------------------
    async def write(self, kind: str, obj: Mapping[str, Any], current: Mapping[str, Any], status: JsonDict) -> Result:
        """Apply ``status`` unless the object has it already."""
        if dict(current) == status:
            return UNCHANGED
        obj_meta = meta(obj)
        body = {"apiVersion": GROUP_VERSION, "kind": kind,
                "metadata": {"name": obj_meta.name, "namespace": obj_meta.namespace}, "status": status}
        try:
            result = await self.api.apply(KIND_INFO[kind], body, name=obj_meta.name, namespace=obj_meta.namespace,
                                          field_manager=FIELD_MANAGER_STATUS, force=True, subresource="status")
        except NotFound:
            return UNCHANGED
        except KubeError as failure:
            return self._failed(kind, f"could not write the status of {kind} {obj_meta.key}", failure)
        self.metrics.writes.labels(kind, "status").inc()
        self.caches.written_status[kind].remember(result)
        return Ok()

    async def _warn_if_written(self, result: Result, obj: Mapping[str, Any], reason: str | None, note: str,
                               action: str = "Reconcile") -> None:
        if isinstance(result, Ok) and result.written and reason is not None:
            await self.recorder.publish(obj, type="Warning", reason=reason, note=note, action=action)

    async def note_once(self, obj: Mapping[str, Any], key: tuple[str, str], *, reason: str, note: str,
                        action: str) -> None:
        """A Warning Event said once per ``key`` (bounded: a note said again after it is dropped is harmless)."""
        if self._noted.add(key, True):
            await self.recorder.publish(obj, type="Warning", reason=reason, note=note, action=action)

    async def _warn_refused_links(self, site: Mapping[str, Any]) -> None:
        """A Warning Event on the Site for each link its routers refused for its identity (once per refusal)."""
        namespace = meta(site).namespace
        for status in self.caches.router_statuses(namespace):
            for refusal in status.refused:
                key = (namespace, f"{status.router}|{refusal.identity}|{refusal.certificate}|{refusal.at}")
                await self.note_once(site, key, reason="LinkRefused", action="Link",
                                     note=f"router {status.router[:100]} refused a link as "
                                          f"{refusal.identity[:100]}: {refusal.reason}")
