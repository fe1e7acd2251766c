"""Link identities (pure): which certificate speaks for which router identity at a granting site.

A linked site's router id is bound to the common name of its link certificate (docs/service-network-router.md,
"Trust"). Upstream's redeemer names that common name itself (the ``subject`` header), so without a rule here a
token holder could ask for a certificate naming a site that already exists and link as it. The rule:

- **Never issued twice, never for a known identity.** A grant server issues a client certificate only for a
  subject that is not this site's own id, not a site or router id its routers know in the network (their
  link-state database, reported in ``skupper-network-status``), and not an identity it issued or bound before.
- **Recorded.** Each identity this site issued a certificate for, or first saw linking with a certificate issued
  elsewhere, is kept with that certificate's SHA-256 fingerprint in a ConfigMap of its own in the site's namespace
  (``skupper-link-identity-<hash of the identity>``, owned by the Site, so the records go with the site and its
  CA): creating it is the claim, so two redemptions for one identity cannot both win. Records survive controller
  and router restarts; the router document carries them (``peers``), and the router refuses a link whose
  certificate names a recorded identity but is not the recorded certificate, and a second link for an identity
  already linked through another certificate (the first keeps its traffic).

This module is the pure part: the record format, the decision on a subject, and the ConfigMap bodies.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from operator_runtime.objects import JsonDict, mapping, meta

from ..constants import LABEL_ROUTER_CONFIG
from .resources import owner_references

__all__ = ["ANNOTATION_KEY_FINGERPRINT", "IDENTITY_LABEL_VALUE", "MAX_IDENTITIES", "IdentityRecord", "fingerprint",
           "first_link_records", "identity_config_map", "identity_object_name", "identity_problem", "is_identity_record",
           "known_ids", "parse_identity", "peers"]

#: the ``internal.skupper.io/router-config`` label value that marks an identity record
IDENTITY_LABEL_VALUE = "link-identity"
_PREFIX = "skupper-link-identity-"
#: records one site keeps
MAX_IDENTITIES = 2000
_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")
#: on a Secret a Certificate issued: the fingerprint of its key, for ``peers``
ANNOTATION_KEY_FINGERPRINT = "internal.skupper.io/key-fingerprint"


@dataclass(frozen=True)
class IdentityRecord:
    """One identity: the fingerprint of the certificate that speaks for it, and how it was bound."""

    identity: str
    certificate: str            # "sha256:<hex>" of the certificate's public key ("" when the record is unreadable)
    source: str                 # "AccessGrant <name>" (issued here), or "first link" (issued elsewhere)
    since: str                  # when it was bound (RFC 3339)


def fingerprint(cert_pem: bytes) -> str:
    """``sha256:<hex>`` of a PEM certificate's public key (its DER SubjectPublicKeyInfo), as the router computes it
    from the TLS handshake: the key, so that a certificate renewed with its key keeps its identity."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    spki = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def identity_object_name(identity: str) -> str:
    """The record's ConfigMap name: identities may hold characters names cannot (``_``), so a hash of it."""
    return _PREFIX + hashlib.sha256(identity.encode()).hexdigest()[:32]


def is_identity_record(config_map: Mapping[str, Any]) -> bool:
    return meta(config_map).labels.get(LABEL_ROUTER_CONFIG) == IDENTITY_LABEL_VALUE


def parse_identity(config_map: Mapping[str, Any]) -> IdentityRecord | None:
    """The record a ConfigMap holds; None when it is not one. A record whose certificate does not read is kept
    with no certificate, so its identity stays taken (a damaged record never frees an identity)."""
    if not is_identity_record(config_map):
        return None
    data = mapping(config_map, "data")
    identity = data.get("identity")
    if not isinstance(identity, str) or identity_object_name(identity) != meta(config_map).name:
        return None
    certificate = data.get("certificate")
    return IdentityRecord(identity, certificate if isinstance(certificate, str) and
                          certificate.startswith("sha256:") else "",
                          str(data.get("source", ""))[:300], str(data.get("since", ""))[:64])


def known_ids(site_ids: Iterable[str], router_ids: Iterable[str]) -> frozenset[str]:
    """The identities a network already uses: its site ids, and the identity part of each router id (a router
    ``<site id>/<name>`` speaks with the certificate named ``<site id>``)."""
    return frozenset(site_ids) | frozenset(r.split("/", 1)[0] for r in router_ids)


def identity_problem(subject: str, *, own_site_id: str, known: frozenset[str],
                     record: IdentityRecord | None, records: int) -> str | None:
    """Why a certificate naming ``subject`` must not be issued here (``record``: its record if there is one;
    ``records``: how many this site keeps), or None."""
    if subject == own_site_id:
        return "a site cannot link to itself"
    if len(subject) > 253:
        return f"an identity is at most 253 characters (this one has {len(subject)})"
    if record is not None:
        return (f"a link certificate for {subject} was already issued ({record.source or 'recorded'}"
                f"{', ' + record.since if record.since else ''}); an identity is issued once: the site that holds "
                f"it keeps using it")
    if subject in known:
        return f"{subject} is already a site or router of this network; an identity cannot be issued twice"
    if records >= MAX_IDENTITIES:
        return f"this site already keeps {MAX_IDENTITIES} link identities (the limit)"
    return None


def identity_config_map(site: Mapping[str, Any], record: IdentityRecord) -> JsonDict:
    """The record's ConfigMap, owned by the Site (cached with the router ConfigMaps through its ``router-config``
    label)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": identity_object_name(record.identity), "namespace": meta(site).namespace,
                         "labels": {LABEL_ROUTER_CONFIG: IDENTITY_LABEL_VALUE},
                         "ownerReferences": owner_references(site)},
            "data": {"identity": record.identity, "certificate": record.certificate, "source": record.source,
                     "since": record.since}}


def peers(records: Iterable[IdentityRecord], credentials: Iterable[str] = ()) -> list[JsonDict]:
    """The router document's ``peers``: each recorded certificate and the identity it speaks as (a record whose
    certificate does not read lists nothing: its identity stays taken, and no certificate speaks as it), then the
    site's own client credentials not bound yet (``credentials``: key fingerprints of the client certificates its
    Certificates issued, e.g. for ``skupper link generate``): each binds to the first new identity that links with
    it."""
    bound = sorted(({"certificate": r.certificate, "identity": r.identity} for r in records if r.certificate),
                   key=lambda p: (p["identity"], p["certificate"]))
    taken = {p["certificate"] for p in bound}
    unbound = [{"certificate": c} for c in sorted(set(credentials) - taken) if _FINGERPRINT.fullmatch(c)]
    return bound + unbound


def first_link_records(incoming: Iterable[tuple[str, str]], records: Mapping[str, IdentityRecord],
                       since: str) -> list[IdentityRecord]:
    """Records to write for links the routers accepted from certificates this site has no record of (issued
    elsewhere: by upstream's controller, or before records were kept): (identity, certificate) pairs as the
    routers report them. An identity recorded already is never rebound (the router refused any other
    certificate for it)."""
    found: dict[str, IdentityRecord] = {}
    for identity, certificate in incoming:
        if identity in records or identity in found or not _FINGERPRINT.fullmatch(certificate):
            continue
        if len(records) + len(found) >= MAX_IDENTITIES:
            break
        found[identity] = IdentityRecord(identity, certificate, "first link", since)
    return [found[k] for k in sorted(found)]
