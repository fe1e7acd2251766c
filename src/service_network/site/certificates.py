"""Certificate resources (pure): what each needs — nothing, a new certificate in its Secret, or a wait — and its
status.

A Certificate keeps a certificate and key in the ``kubernetes.io/tls`` Secret of the same name (``ca.crt`` is the
signing CA's certificate, or the certificate itself when self-signed), owned by the Certificate:

- ``ca``: the Secret of the CA that signs it (empty: self-signed); ``signing``: the certificate is a CA;
  ``client``/``server``: its extended key usages; ``hosts``: DNS names and IP addresses; ``subject``: its common
  name.
- It is issued when the Secret is missing, when what it must say changes (recorded in an annotation, as the
  controller's cache holds no Secret values: subject, hosts, usages, the CA Secret's uid), and when two thirds of its
  lifetime have passed (renewal, recorded in the ``not-before``/``not-after`` annotations). ``status.expiration``
  says when it expires.
- A Secret of that name that the controller did not write (no annotation) is the owner's: used as it is, never
  overwritten (upstream: "if a secret that the Skupper controller requires already exists ... Skupper will stop
  trying to manage that secret").
- A Secret the controller writes carries upstream's annotations of such a Secret (``controlled``, ``certificate``,
  ``hosts``) and what label templates give a ``Secret`` of its name (:mod:`.templates`); one written before, or
  whose templates changed, gets them by a patch of its metadata (never a new certificate).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from operator_runtime.objects import JsonDict, mapping, meta

from ..constants import ANNOTATION_CONTROLLED
from ..crd.models import CertificateSpec
from .access import ANNOTATION_CERT_NAMES, LABEL_CERTIFICATE, endpoint_hosts
from .bindings import BindingError, parse_spec
from .status import ConditionState, error, pending, ready
from .templates import Template, metadata_patch, with_extra
from .validation import host_problem, quoted

__all__ = ["ANNOTATION_HOSTS", "ANNOTATION_NOT_AFTER", "ANNOTATION_NOT_BEFORE", "CertificatePlan", "IssueRequest",
           "plan_certificate", "renewal_time", "secret_metadata", "timestamp"]

ANNOTATION_NOT_BEFORE = "internal.skupper.io/not-before"
ANNOTATION_NOT_AFTER = "internal.skupper.io/not-after"
#: Upstream's annotation of a certificate's Secret: the hosts it was issued for.
ANNOTATION_HOSTS = "internal.skupper.io/hosts"
MAX_HOSTS = 100


@dataclass(frozen=True)
class IssueRequest:
    """A certificate to write into ``secret``."""

    secret: str
    ca: str | None                    # the CA Secret; None: self-signed
    subject: str
    dns: tuple[str, ...]
    ips: tuple[str, ...]
    client: bool
    server: bool
    signing: bool
    marker: str                       # what it says (the annotation)
    owner: Mapping[str, Any]          # the Certificate
    replace: bool = True              # False: the Secret does not exist (created, never taken over)
    keep_key: bool = False            # a CA renewed: the same key (what it signed, and its trusters, stay valid)
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)        # the Secret's metadata besides the
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)   # certificate's own annotations


@dataclass(frozen=True)
class CertificatePlan:
    obj: Mapping[str, Any]
    state: ConditionState
    issue: IssueRequest | None = None
    expiration: str | None = None
    renew_at: datetime.datetime | None = None     # when to look at it again
    reason: str | None = None                     # for a Warning Event
    relabel: JsonDict | None = None               # a merge patch of the Secret's labels and annotations


def timestamp(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    return parsed.replace(tzinfo=datetime.UTC)


def renewal_time(not_before: datetime.datetime, not_after: datetime.datetime) -> datetime.datetime:
    """Two thirds into the lifetime, and at least a second after it began (a certificate cut short by its CA's
    expiry is not renewed in a loop)."""
    return max(not_before + (not_after - not_before) * 2 / 3, not_before + datetime.timedelta(seconds=1))


def _has_pair(secret: Mapping[str, Any]) -> bool:
    return all(k in mapping(secret, "data") for k in ("tls.crt", "tls.key"))


def secret_metadata(name: str, hosts: list[str], templates: tuple[Template, ...] = ()) -> JsonDict:
    """The labels and annotations of the Secret ``name`` of a Certificate for ``hosts``, besides what says what
    the certificate is (upstream's annotations, and what ``templates`` give a Secret of that name)."""
    body: JsonDict = {"kind": "Secret", "metadata": {
        "name": name, "annotations": {ANNOTATION_CONTROLLED: "true", LABEL_CERTIFICATE: "true",
                                      ANNOTATION_HOSTS: ",".join(hosts)}}}
    metadata = with_extra(body, templates)["metadata"]
    return {"labels": dict(metadata.get("labels") or {}), "annotations": dict(metadata["annotations"])}


def plan_certificate(obj: Mapping[str, Any], secrets: Mapping[str, Mapping[str, Any]], now: datetime.datetime,
                     default_ca: str | None = None, templates: tuple[Template, ...] = ()) -> CertificatePlan:
    """What one Certificate needs, given the namespace's Secret views (type, key names, metadata) and the label
    templates of the namespace. A certificate that is not a CA and names no ``ca`` is signed by ``default_ca``
    (the namespace's Site's default issuer, what upstream's ``skupper link generate`` would have written there);
    without one it is an error."""
    name = meta(obj).name
    try:
        spec = parse_spec(CertificateSpec, obj)
    except BindingError as e:
        return CertificatePlan(obj, error(str(e)), reason=e.reason)
    owners = secrets.get(name)
    if owners is not None and ANNOTATION_CERT_NAMES not in meta(owners).annotations:
        # the owner's Secret: used as it is
        return CertificatePlan(obj, ready())
    if spec.ca == name:
        return CertificatePlan(obj, error(f"Certificate {name} cannot be signed by its own Secret"),
                               reason="InvalidSpec")
    hosts = sorted(set(spec.hosts or []))
    if len(hosts) > MAX_HOSTS:
        return CertificatePlan(obj, error(f"{len(hosts)} hosts: at most {MAX_HOSTS}"), reason="InvalidSpec")
    for host in hosts:
        # a wildcard covers one label: "*.example.com"
        if host_problem(host[2:] if host.startswith("*.") else host):
            return CertificatePlan(obj, error(f"host {quoted(host)} is neither an IP address nor a DNS name"),
                                   reason="InvalidSpec")
    if not spec.subject or len(spec.subject) > 64:
        return CertificatePlan(obj, error("subject must be 1 to 64 characters (a certificate's common name)"),
                               reason="InvalidSpec")
    if not spec.ca and not spec.signing:
        if not default_ca:
            return CertificatePlan(obj, error("spec.ca is empty and no Site in the namespace has a default issuer: "
                                              "name the CA Secret that signs this certificate"),
                                   reason="InvalidSpec")
        spec = spec.model_copy(update={"ca": default_ca})
    ca_uid = ""
    if spec.ca:
        ca = secrets.get(spec.ca)
        if ca is None:
            return CertificatePlan(obj, pending(f"waiting for the CA Secret {quoted(spec.ca)}"))
        if not _has_pair(ca):
            return CertificatePlan(obj, error(f"the CA Secret {quoted(spec.ca)} has no tls.crt and tls.key"),
                                   reason="InvalidIssuer")
        # a new CA Secret, or the CA renewed or replaced in place: reissued
        ca_uid = f"{meta(ca).uid}:{mapping(ca, 'metadata').get('resourceVersion') or ''}"
    marker = (f"subject={spec.subject}|hosts={','.join(hosts)}|client={bool(spec.client)}|"
              f"server={bool(spec.server)}|signing={bool(spec.signing)}|ca={spec.ca}:{ca_uid}")
    dns, ips = endpoint_hosts(hosts)
    if ips:
        # an IP also as a DNS name, as upstream's certificates have it: upstream's router (Qpid Proton) checks the
        # host it dials, an IP included, against the DNS names only; the marker reissues a certificate made before
        dns = (*dns, *ips)
        marker += "|ip-as-dns"
    metadata = secret_metadata(name, hosts, templates)
    request = IssueRequest(name, spec.ca or None, spec.subject, dns, ips, bool(spec.client), bool(spec.server),
                           bool(spec.signing), marker, obj, labels=metadata["labels"],
                           annotations=metadata["annotations"])
    secret = secrets.get(name)
    if secret is None:
        return CertificatePlan(obj, pending(f"issuing the certificate into Secret {name}"),
                               issue=dataclasses.replace(request, replace=False))
    annotations = meta(secret).annotations
    not_before = _parse_time(annotations.get(ANNOTATION_NOT_BEFORE))
    not_after = _parse_time(annotations.get(ANNOTATION_NOT_AFTER))
    if annotations.get(ANNOTATION_CERT_NAMES) != marker or not_before is None or not_after is None:
        return CertificatePlan(obj, pending(f"issuing the certificate into Secret {name}"), issue=request)
    renew_at = renewal_time(not_before, not_after)
    if not _has_pair(secret):
        return CertificatePlan(obj, pending(f"issuing the certificate into Secret {name}"), issue=request)
    if now >= renew_at:
        return CertificatePlan(obj, pending(f"renewing the certificate in Secret {name}"),
                               issue=dataclasses.replace(request, keep_key=request.signing))
    return CertificatePlan(obj, ready(), expiration=timestamp(not_after), renew_at=renew_at,
                           relabel=metadata_patch({"metadata": metadata}, secret))
