"""The plan of one namespace (pure): what the site controller writes, computed from a snapshot without I/O.

:func:`plan_namespace` turns a :class:`~.snapshot.NamespaceSnapshot` into a :class:`NamespacePlan`: each
SecuredAccess's Service, Certificate and status inputs (:func:`.secured.compose_secured_access`), each Certificate's
issue, renewal or relabel and the notes its Secret needs (:func:`.certificates.plan_certificate`), the Site path
(:func:`.compose.compose_site`: router objects, ConfigMap, Services, router access, binding, Link and Site states,
Events), and each AccessGrant's default ``redemptionsAllowed``, status and expiry.

Where one write feeds another (a Certificate applied for a SecuredAccess whose Service must be written first; a
Certificate's status from the certificate its issue produced) the plan names both and the writer applies them in
order; the statuses are composed from the plan and the writer's typed results (:mod:`.status_writer`), so neither
the writer nor the status writer changes the plan. The same snapshot gives the same plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from operator_runtime.objects import JsonDict, mapping, meta

from .access import ANNOTATION_CERT_NAMES
from .certificates import CertificatePlan, IssueRequest, plan_certificate
from .compose import SitePlan, compose_site
from .grants import format_time, grant_of, grant_state, grant_status
from .identities import ANNOTATION_KEY_FINGERPRINT
from .secured import SecuredPlan, compose_secured_access
from .services import is_listener_service
from .site_keys import ANNOTATION_SITE_BINDING
from .snapshot import NamespaceSnapshot

__all__ = ["CertificateItem", "GrantItem", "NamespacePlan", "SecuredItem", "plan_namespace"]


@dataclass(frozen=True)
class SecuredItem:
    """One SecuredAccess: its Service; then, when that is written and the SecuredAccess is configured, its
    Certificate (``certificate``) and the issuer's CA for its status (``ca``)."""

    composed: SecuredPlan
    certificate: JsonDict | None = None
    ca: str | None = None

    @property
    def obj(self) -> Mapping[str, Any]:
        return self.composed.obj


@dataclass(frozen=True)
class CertificateItem:
    """One Certificate: ``planned`` (its state and what it needs), the issue to run (with the grant server's binding
    noted on a client credential), whether its Secret needs its key fingerprint noted, and the merge patch of the
    binding annotation its Secret needs."""

    planned: CertificatePlan
    issue: IssueRequest | None = None
    note_fingerprint: bool = False
    binding_patch: JsonDict | None = None

    @property
    def obj(self) -> Mapping[str, Any]:
        return self.planned.obj


@dataclass(frozen=True)
class GrantItem:
    """One AccessGrant: upstream's default ``redemptionsAllowed`` to write into its spec, the status to apply
    (None: it has it; ``redemptions`` left out: only redemptions count it), the seconds until it expires."""

    obj: Mapping[str, Any]
    default_redemptions: bool = False
    status: JsonDict | None = None
    expires_in: float | None = None


@dataclass(frozen=True)
class NamespacePlan:
    namespace: str
    #: the controller the namespace belongs to, when not this one: nothing is written
    other_controller: str | None = None
    secured: tuple[SecuredItem, ...] = ()
    certificates: tuple[CertificateItem, ...] = ()
    #: the Site path; None when the namespace holds nothing of a site (its network record is withdrawn)
    site: SitePlan | None = None
    #: AccessGrants or AccessTokens to serve and redeem
    grants_or_tokens: bool = False
    grants: tuple[GrantItem, ...] = ()
    #: Links whose generated credentials may need binding
    bind_links: bool = False


def _unnoted_credential(certificate: Mapping[str, Any], secret: Mapping[str, Any] | None) -> bool:
    """A client Certificate whose Secret this controller issued before key fingerprints were noted on it."""
    spec = mapping(certificate, "spec")
    if secret is None or spec.get("client") is not True or spec.get("signing") is True:
        return False
    annotations = meta(secret).annotations
    return ANNOTATION_CERT_NAMES in annotations and ANNOTATION_KEY_FINGERPRINT not in annotations


def _binding_patch(certificate: Mapping[str, Any], secret: Mapping[str, Any] | None,
                   wanted: str | None) -> JsonDict | None:
    """The annotation a client credential's Secret carries to say where the site that links with it proves its
    site key (the grant server's binding URL and CA: ``skupper link generate`` passes them on), if it lacks it."""
    spec = mapping(certificate, "spec")
    if (wanted is None or secret is None or spec.get("client") is not True or spec.get("signing") is True
            or ANNOTATION_KEY_FINGERPRINT not in meta(secret).annotations
            or meta(secret).annotations.get(ANNOTATION_SITE_BINDING) == wanted):
        return None
    return {"metadata": {"annotations": {ANNOTATION_SITE_BINDING: wanted}}}


def plan_secured(snapshot: NamespaceSnapshot) -> tuple[SecuredItem, ...]:
    found = []
    for obj in snapshot.secured_accesses:
        composed = compose_secured_access(obj, snapshot.site.services, snapshot.secured_pods.get(meta(obj).name, ()),
                                          snapshot.site.templates)
        wants_certificate = composed.certificate is not None and composed.configured.status == "True"
        found.append(SecuredItem(composed, composed.certificate if wants_certificate else None,
                                 snapshot.issuer_cas.get(composed.issuer or "") if wants_certificate else None))
    return tuple(found)


def plan_certificates(snapshot: NamespaceSnapshot) -> tuple[CertificateItem, ...]:
    secrets = snapshot.site.secret_objects
    found = []
    for obj in snapshot.certificates:
        if meta(obj).deletion_timestamp:
            continue
        planned = plan_certificate(obj, secrets, snapshot.now, snapshot.default_ca, snapshot.site.templates)
        secret = secrets.get(meta(obj).name)
        issue = planned.issue
        if issue is None:
            found.append(CertificateItem(planned, note_fingerprint=_unnoted_credential(obj, secret),
                                         binding_patch=_binding_patch(obj, secret, snapshot.binding_annotation)))
            continue
        if issue.client and not issue.signing and snapshot.binding_annotation is not None:
            issue = dataclasses.replace(issue, annotations={**issue.annotations,
                                                            ANNOTATION_SITE_BINDING: snapshot.binding_annotation})
        found.append(CertificateItem(planned, issue=issue))
    return tuple(found)


def plan_grants(snapshot: NamespaceSnapshot, site: SitePlan) -> tuple[GrantItem, ...]:
    """The namespace's AccessGrants: their statuses (URL, code, CA, expiry, Ready) as this plan's Site and its
    router access make them."""
    endpoints = site.access.endpoints if site.access is not None else ()
    site_problem = ("No active site in namespace" if site.active is None else None if endpoints else
                    "waiting for the site's link access (Site linkAccess or a RouterAccess)")
    found = []
    for given in snapshot.grants:
        previous = mapping(given.obj, "status")
        source = {**given.obj, "status": {**previous, "code": given.code}} if given.code else given.obj
        grant = grant_of(source, given.first_seen)
        state = grant_state(grant, snapshot.now, site_problem=site_problem,
                            server=snapshot.grant_server_ca is not None)
        status = grant_status(previous, grant, state=state, url=given.url, ca=snapshot.grant_server_ca,
                              generation=meta(given.obj).generation, now=format_time(snapshot.now))
        expires_in = ((grant.expires - snapshot.now).total_seconds()
                      if grant.expires is not None and not grant.expired(snapshot.now) else None)
        found.append(GrantItem(
            given.obj,
            default_redemptions="redemptionsAllowed" not in mapping(given.obj, "spec") and not grant.problem,
            status=None if status == dict(previous) else {k: v for k, v in status.items() if k != "redemptions"},
            expires_in=expires_in))
    return tuple(found)


def holds_a_site(snapshot: NamespaceSnapshot) -> bool:
    """Whether the namespace holds anything of a site (else its network record is withdrawn)."""
    inputs = snapshot.site
    return bool(inputs.sites or inputs.listeners or inputs.connectors or inputs.links or snapshot.grants_or_tokens
                or inputs.attached_bindings or inputs.attached_connectors or inputs.multi_key_listeners
                or any(is_listener_service(s) for s in inputs.services.values()))


def plan_namespace(snapshot: NamespaceSnapshot) -> NamespacePlan:
    """The namespace's plan: everything to write, from the snapshot alone."""
    if snapshot.other_controller is not None:
        return NamespacePlan(snapshot.namespace, other_controller=snapshot.other_controller)
    site = compose_site(snapshot.site) if holds_a_site(snapshot) else None
    return NamespacePlan(
        namespace=snapshot.namespace,
        secured=plan_secured(snapshot),
        certificates=plan_certificates(snapshot),
        site=site,
        grants_or_tokens=site is not None and snapshot.grants_or_tokens,
        grants=plan_grants(snapshot, site) if site is not None else (),
        bind_links=site is not None and site.active is not None and bool(snapshot.site.links),
    )
