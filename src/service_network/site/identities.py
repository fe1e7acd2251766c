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
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from operator_runtime.objects import JsonDict, mapping, meta

from ..constants import LABEL_ROUTER_CONFIG
from .resources import owner_references
from .site_keys import ProvenSite, Voucher, key_label

__all__ = ["ANNOTATION_KEY_FINGERPRINT", "IDENTITY_LABEL_VALUE", "MAX_IDENTITIES", "Decision", "IdentityRecord",
           "NetworkTrust", "fingerprint", "first_link_records", "identity_config_map", "identity_decision",
           "identity_object_name", "identity_problem", "is_identity_record", "known_ids", "network_trust", "parse_identity", "peers"]

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
    site_key: str = ""          # the site key the identity proved when it redeemed here ("" when none)


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
    site_key = data.get("siteKey")
    return IdentityRecord(identity, certificate if isinstance(certificate, str) and
                          certificate.startswith("sha256:") else "",
                          str(data.get("source", ""))[:300], str(data.get("since", ""))[:64],
                          site_key if isinstance(site_key, str) and 0 < len(site_key) <= 200 else "")


def known_ids(site_ids: Iterable[str], router_ids: Iterable[str]) -> frozenset[str]:
    """The identities a network already uses: its site ids, and the identity part of each router id (a router
    ``<site id>/<name>`` speaks with the certificate named ``<site id>``)."""
    return frozenset(site_ids) | frozenset(r.split("/", 1)[0] for r in router_ids)


@dataclass(frozen=True)
class NetworkTrust:
    """What a granting site knows to judge an identity its network may already know."""

    #: the site and router identities its routers know in the network (:func:`known_ids`)
    known: frozenset[str] = frozenset()
    #: site id -> the sites that site's own routers advertise links to
    dials: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: public site key -> the site id this site bound it to through an authenticated relation (its own key; the
    #: key a site proved redeeming here; the key of a site whose grant this site redeemed, while that link is up)
    signers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """Whether a certificate naming the subject may be issued: ``problem`` (None: yes), the site key to bind to
    the identity (``""``: none proven), and whether an existing record is replaced (a site linking again)."""

    problem: str | None
    site_key: str = ""
    rebind: bool = False


_HOW_TO_PROVE = ("a site that links again, or links to a second site of its network, proves it holds its site key: "
                 "redeem the token with this project's skupper (upstream's redeemer sends no proof)")


def _issued(subject: str, record: IdentityRecord) -> str:
    return (f"a link certificate for {subject} was already issued ({record.source or 'recorded'}"
            f"{', ' + record.since if record.since else ''})")


def _vouched(subject: str, proven: ProvenSite, trust: NetworkTrust, own_site_id: str) -> str | None:
    """The site that vouches, in a way this site can trust, that ``subject``'s site key is the proven one."""
    for voucher in proven.vouchers:
        if (voucher.identity == subject and voucher.key == proven.key
                and trust.signers.get(voucher.signer_key) == voucher.signer
                and (voucher.signer == own_site_id or voucher.signer in trust.dials.get(subject, frozenset()))):
            return voucher.signer
    return None


def identity_decision(subject: str, *, own_site_id: str, trust: NetworkTrust, record: IdentityRecord | None,
                      records: int, proven: ProvenSite | None = None) -> Decision:
    """Whether a certificate naming ``subject`` may be issued here (``record``: its record if there is one;
    ``records``: how many this site keeps; ``proven``: what the redeemer's proof established, verified).

    - never this site's own id;
    - an identity recorded here: only to a proof with the recorded site key (the site linking again; a record
      without a key: a voucher this site signed itself for the proven key);
    - an identity the network knows: only to a proof whose key a trusted site vouches for: a signer this site
      bound through an authenticated relation, which the subject's own routers advertise a link to;
    - any other identity: issued (first come), binding the proven key, if any."""
    if subject == own_site_id:
        return Decision("a site cannot link to itself")
    if len(subject) > 253:
        return Decision(f"an identity is at most 253 characters (this one has {len(subject)})")
    if record is not None:
        if proven is not None and record.site_key and proven.key == record.site_key:
            return Decision(None, record.site_key, rebind=True)
        if proven is not None and not record.site_key and _vouched(subject, proven, trust, own_site_id) == own_site_id:
            return Decision(None, proven.key, rebind=True)
        if proven is not None and record.site_key:
            return Decision(f"{_issued(subject, record)} to a site with another site key "
                            f"({key_label(record.site_key)}; this proof's: {key_label(proven.key)}): only that site "
                            f"can link as {subject}")
        if record.site_key:
            return Decision(f"{_issued(subject, record)}; an identity is issued once: the site that holds it keeps "
                            f"using it; {_HOW_TO_PROVE}")
        return Decision(f"{_issued(subject, record)}; an identity is issued once: the site that holds it keeps "
                        f"using it; it was bound without a site key, so no redemption can prove it: to link that site "
                        f"again, delete its record here (kubectl delete configmap {identity_object_name(subject)}) "
                        f"once its old link is gone")
    if subject in trust.known:
        if proven is None:
            return Decision(f"{subject} is already a site or router of this network; an identity cannot be issued "
                            f"twice; {_HOW_TO_PROVE}")
        if _vouched(subject, proven, trust, own_site_id) is None:
            return Decision(f"{subject} is already a site or router of this network, and none of the "
                            f"{len(proven.vouchers)} vouchers of its proof comes from a site this site is linked to "
                            f"and {subject} links to: link {subject} first to a site linked to this one, then redeem "
                            f"again")
        return Decision(None, proven.key)
    if records >= MAX_IDENTITIES:
        return Decision(f"this site already keeps {MAX_IDENTITIES} link identities (the limit)")
    return Decision(None, proven.key if proven is not None else "")


def identity_problem(subject: str, *, own_site_id: str, known: frozenset[str],
                     record: IdentityRecord | None, records: int) -> str | None:
    """Why a certificate naming ``subject`` must not be issued to a redeemer without proof, or None."""
    return identity_decision(subject, own_site_id=own_site_id, trust=NetworkTrust(known), record=record,
                             records=records).problem


def identity_config_map(site: Mapping[str, Any], record: IdentityRecord) -> JsonDict:
    """The record's ConfigMap, owned by the Site (cached with the router ConfigMaps through its ``router-config``
    label)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": identity_object_name(record.identity), "namespace": meta(site).namespace,
                         "labels": {LABEL_ROUTER_CONFIG: IDENTITY_LABEL_VALUE},
                         "ownerReferences": owner_references(site)},
            "data": {"identity": record.identity, "certificate": record.certificate, "source": record.source,
                     "since": record.since, **({"siteKey": record.site_key} if record.site_key else {})}}


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


def network_trust(*, known: frozenset[str], dials: Mapping[str, Iterable[str]], up_links: Mapping[str, str],
                  records: Iterable[IdentityRecord], own: tuple[str, str],
                  held: Mapping[str, Voucher]) -> NetworkTrust:
    """The trust a granting site has: ``known`` and ``dials`` from its routers' network status (site id -> the
    sites its routers advertise links to); ``up_links``: its own links up now (name -> the remote site, as the
    router authenticated it); ``records``: its identity records; ``own``: its id and public site key; ``held``:
    the vouchers it holds (token name -> voucher). The signers it trusts: itself; each site that proved its key
    redeeming here; each site whose grant it redeemed, while the Link of that token is up to that very site (the
    signer named in the voucher is the site the link reached)."""
    signers = {own[1]: own[0]}
    for record in records:
        if record.site_key:
            signers.setdefault(record.site_key, record.identity)
    for token, voucher in held.items():
        reached = {up_links.get(token), *(up_links.get(f"{token}-{n}") for n in range(2, 10))}
        if voucher.signer in reached:
            signers.setdefault(voucher.signer_key, voucher.signer)
    return NetworkTrust(known, {site: frozenset(remotes) for site, remotes in dials.items()}, signers)
