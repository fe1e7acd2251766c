"""The granting side of access grants (I/O): what the controller remembers of each AccessGrant (when it first
processed it, the code it generated: :meth:`GrantKeeper.recall`, read into the namespace's snapshot, from which
:mod:`.plan` makes the grants' statuses) and the redemption of a token at this site, called by the grant server.

A redemption, in this order so that a refusal leaves nothing behind:

1. the grant is read from the API server (not the cache: the count must be exact) and checked (code, expiry,
   redemptions left), and the site (active, its router access resolved);
2. the identity the redeemer asks for (``subject``, the client certificate's common name: the router binds the
   router ids that site may speak as to it) is checked (:mod:`.identities`): not this site; an identity issued or
   bound here before, or a site or router its routers know in the network, only to a redeemer that proves it
   holds the site key bound to that identity (:mod:`.site_keys`: the key of its record here, or a key a trusted
   site vouches for); a site that links again replaces its record (its old certificate no longer speaks for it);
3. the client certificate for the redeeming site is issued by the grant's issuer (default the site CA), and its
   identity recorded with the certificate's fingerprint (a ConfigMap per identity: its creation is the claim, so
   two redemptions for one identity cannot both record it);
4. the redemption is counted: ``status.redemptions`` + 1 with the resourceVersion read in 1 as a precondition, so
   two redemptions racing for the last one cannot both win (the loser starts again at 1; a redemption that
   finally fails takes its identity record back);
5. the answer carries the credentials and this site's access endpoints, and, when the redeemer proved a site
   key, this site's voucher for it. Nothing else is created here: the redeeming site's one link carries
   connections both ways.

If the answer is lost after step 4 (the redeeming site went away), the redemption stays counted, as upstream, and
its identity stays issued.
"""

from __future__ import annotations

import datetime
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.errors import AlreadyExists, Conflict, KubeError, NotFound
from operator_runtime.kinds import CONFIG_MAP, SECRET
from operator_runtime.objects import JsonDict, mapping, meta
from operator_runtime.reflector import Reflector

from ..kinds import ACCESS_GRANT
from . import pki
from .access import default_issuer
from .access_io import decode
from .bounded import BoundedCache
from .grant_server import GrantServer
from .grants import (
    LinkEndpoint,
    Redeemed,
    RedeemRequest,
    Refusal,
    check_redemption,
    format_time,
    grant_of,
    no_such_claim,
    wrong_code,
)
from .identities import (
    Decision,
    IdentityRecord,
    fingerprint,
    identity_config_map,
    identity_decision,
    identity_object_name,
    identity_problem,
    network_trust,
    parse_identity,
)
from .site_key_io import SiteKeys, held_vouchers
from .site_keys import ProofProblem, ProvenSite, make_voucher, public_key, verify_proof, voucher_text
from .snapshot import GrantInput

__all__ = ["GrantKeeper", "NetworkLinks", "SiteAccess"]

log = logging.getLogger(__name__)
ATTEMPTS = 5


@dataclass(frozen=True)
class NetworkLinks:
    """What a site's routers report for trust decisions: site id -> the sites its routers advertise links to, and
    this site's own links up now (name -> the remote site the router authenticated)."""

    dials: Mapping[str, frozenset[str]]
    up_links: Mapping[str, str]


@dataclass(frozen=True)
class SiteAccess:
    """What a namespace's last reconcile found: the active Site and its router access endpoints."""

    site: Mapping[str, Any] | None
    endpoints: tuple[JsonDict, ...] = ()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _stamp() -> str:
    return format_time(_now())


class GrantKeeper:
    """Grant statuses and redemptions for one controller."""

    def __init__(self, api: KubeApi, grants: Reflector, links: Reflector,
                 site_access: Callable[[str], SiteAccess],
                 network_ids: Callable[[str], frozenset[str]] = lambda namespace: frozenset(),
                 identity_count: Callable[[str], int] = lambda namespace: 0,
                 records: Callable[[str], Mapping[str, IdentityRecord]] = lambda namespace: {},
                 network_links: Callable[[str], NetworkLinks] = lambda namespace: NetworkLinks({}, {}),
                 credential_namespace: Callable[[str], str | None] = lambda certificate: None) -> None:
        self.api = api
        self.grants = grants
        self.links = links
        self.site_access = site_access
        #: namespace -> the site and router identities its routers know in the network
        self.network_ids = network_ids
        #: namespace -> how many identity records its site keeps (from the cache)
        self.identity_count = identity_count
        #: namespace -> its site's identity records (from the cache), and its routers' links
        self.records = records
        self.network_links = network_links
        #: a credential's key fingerprint -> the namespace whose Certificate issued it (``skupper link generate``)
        self.credential_namespace = credential_namespace
        self.keys = SiteKeys(api)
        self.server: GrantServer | None = None
        self._codes: dict[str, str] = {}
        # uid -> first processed, until the status shows it
        self._first_seen: BoundedCache[str, datetime.datetime] = BoundedCache()
        grants.add_index("uid", lambda o: [meta(o).uid])

    # ---- what the controller remembers of grants -----------------------------------------------------------------
    def recall(self, namespace: str, now: datetime.datetime) -> tuple[GrantInput, ...]:
        """The namespace's grants with when each was first processed and its generated code (each kept until the
        watch shows it in the status), and the grant server's URL for it."""
        found = []
        for obj in self.grants.by_index("namespace", namespace):
            if meta(obj).deletion_timestamp:
                continue
            previous = mapping(obj, "status")
            uid = meta(obj).uid
            first_seen = None
            if previous.get("expirationTime"):
                self._first_seen.pop(uid)
            else:
                # bounded: a grant dropped from it (least recently seen) starts its window a little later
                first_seen = self._first_seen.get(uid) or now
                self._first_seen.put(uid, first_seen)
            code = None
            if not grant_of(obj, first_seen).code:   # generated once: kept here until the watch shows it written
                code = self._codes.setdefault(uid, secrets.token_urlsafe(18))
            else:
                self._codes.pop(uid, None)
            found.append(GrantInput(obj, first_seen, code, self.server.url(uid) if self.server is not None else None))
        return tuple(found)

    # ---- redemption -----------------------------------------------------------------------------------------------
    async def redeem(self, uid: str, request: RedeemRequest) -> Redeemed | Refusal:
        """Redeem ``request`` at the grant ``uid`` (see the module docstring)."""
        cached = self.grants.by_index("uid", uid)
        if not cached:
            return no_such_claim("no AccessGrant for this URL (deleted, or another site's)")
        namespace, name = meta(cached[0]).namespace, meta(cached[0]).name
        # a wrong code is refused from the watch cache: guessing costs the API server nothing
        known = grant_of(cached[0])
        if not known.problem and not known.code_matches(request.code):
            log.info("redemption of AccessGrant %s/%s refused: WrongCode", namespace, name)
            return wrong_code(namespace, name)
        for _ in range(ATTEMPTS):
            try:
                obj = await self.api.get(ACCESS_GRANT, name, namespace)
            except NotFound:
                return no_such_claim(f"AccessGrant {namespace}/{name} no longer exists")
            except KubeError as failure:
                return Refusal(503, "Unavailable", f"could not read AccessGrant {namespace}/{name}: {failure}")
            if meta(obj).uid != uid:
                return Refusal(404, "NotFound", f"AccessGrant {namespace}/{name} was replaced")
            outcome = await self._redeem_once(obj, request)
            if outcome is not None:
                return outcome
        return Refusal(503, "Busy", f"AccessGrant {namespace}/{name} changed {ATTEMPTS} times during the "
                                    f"redemption; try again")

    async def _redeem_once(self, obj: JsonDict, request: RedeemRequest) -> Redeemed | Refusal | None:
        """One attempt; None when the count lost a race (try again)."""
        grant = grant_of(obj)
        namespace = grant.namespace
        refusal = check_redemption(grant, request.code, _now())
        if refusal is not None:
            log.info("redemption of AccessGrant %s/%s refused: %s", namespace, grant.name, refusal.reason)
            return refusal
        access = self.site_access(namespace)
        if access.site is None:
            return Refusal(503, "SiteNotReady", f"no active site in namespace {namespace}")
        if not access.endpoints:
            return Refusal(503, "SiteNotReady", f"site {meta(access.site).name} has no resolved link access yet")
        proven: ProvenSite | None = None
        if request.proof is not None:
            try:
                url = (self.server.url(grant.uid) if self.server is not None else None) or ""
                proven = verify_proof(request.proof, subject=request.subject, url=url, now=_now().timestamp())
            except ProofProblem as e:
                return Refusal(400, "BadProof", f"the site proof is unusable: {e}")
        try:
            key_secret = await self.keys.secret(access.site)
            own_key = SiteKeys.key_of(key_secret)
        except (KubeError, ProofProblem) as e:
            return Refusal(503, "SiteNotReady", f"the site key of site {meta(access.site).name} is not usable: {e}")
        decided = await self._identity_decision(access.site, request.subject, proven, own_key, key_secret)
        if isinstance(decided, Refusal):
            return decided
        decision, previous = decided
        issuer = grant.issuer or default_issuer(access.site)
        try:
            ca_secret = await self.api.get(SECRET, issuer, namespace)
            ca = pki.KeyPair(decode(ca_secret, "tls.crt"), decode(ca_secret, "tls.key"))
            issued = pki.issue(ca, request.subject, client=True)
        except NotFound:
            return Refusal(503, "SiteNotReady", f"the issuer Secret {issuer} does not exist in namespace {namespace}")
        except (KubeError, pki.CertificateError) as e:
            return Refusal(503, "SiteNotReady", f"the issuer Secret {issuer} cannot issue certificates: {e}")

        certificate = fingerprint(issued.cert)
        record = IdentityRecord(request.subject, certificate, f"AccessGrant {grant.name}", _stamp(), decision.site_key)
        claimed = await (self._rebind(access.site, previous, record) if previous is not None
                         else self._claim(access.site, record))
        if claimed is not None:
            return claimed
        try:
            counted = await self._count(obj, +1)
        except BaseException:
            await self._release(access.site, record, previous)
            raise
        if not counted:
            await self._release(access.site, record, previous)
            return None
        log.info("AccessGrant %s/%s redeemed for token %s of site %s", namespace, grant.name, request.name,
                 request.subject[:64])
        voucher = (voucher_text(make_voucher(meta(access.site).uid, own_key, request.subject, decision.site_key))
                   if decision.site_key else None)
        return Redeemed(endpoints=[LinkEndpoint.of(e) for e in access.endpoints],
                        ca=ca.cert.decode(), cert=issued.cert.decode(), key=issued.key.decode(), voucher=voucher)

    # ---- bindings of generated credentials ------------------------------------------------------------------------
    async def bind(self, fingerprint_hex: str, subject: str, proof: str, url: str) -> str | Refusal:
        """Bind the credential ``fingerprint_hex`` (a client certificate of this site's Certificates, made by
        ``skupper link generate``) to the site ``subject``, which proves its site key: the same rules as a
        redemption (:func:`.identities.identity_decision`); the credential already bound to that site gains the
        proven key. The voucher for the key, or why not."""
        certificate = "sha256:" + fingerprint_hex
        namespace = self.credential_namespace(certificate)
        access = self.site_access(namespace) if namespace is not None else None
        if namespace is None or access is None or access.site is None:
            return Refusal(404, "NotFound", "no link credential of an active site has this fingerprint")
        try:
            proven = verify_proof(proof, subject=subject, url=url, now=_now().timestamp())
        except ProofProblem as e:
            return Refusal(400, "BadProof", f"the site proof is unusable: {e}")
        site = access.site
        holder = next((r for r in self.records(namespace).values() if r.certificate == certificate), None)
        if holder is not None and holder.identity != subject:
            return Refusal(409, "IdentityTaken", f"this credential is bound to {holder.identity} already")
        try:
            key_secret = await self.keys.secret(site)
            own_key = SiteKeys.key_of(key_secret)
        except (KubeError, ProofProblem) as e:
            return Refusal(503, "SiteNotReady", f"the site key of site {meta(site).name} is not usable: {e}")
        try:
            current, record = await self._record(namespace, subject)
        except KubeError as failure:
            return Refusal(503, "Unavailable", f"could not read the site's link identities: {failure}")
        if record is not None and record.certificate == certificate and record.site_key in ("", proven.key):
            decided: tuple[Decision, JsonDict | None] | Refusal = (Decision(None, proven.key, rebind=True), current)
        else:
            decided = await self._identity_decision(site, subject, proven, own_key, key_secret)
        if isinstance(decided, Refusal):
            return decided
        decision, previous = decided
        bound = IdentityRecord(subject, certificate, "skupper link generate", _stamp(), decision.site_key)
        refused = await (self._rebind(site, previous, bound) if previous is not None else self._claim(site, bound))
        if refused is not None:
            return refused
        log.info("link credential %s of namespace %s bound to site %s", certificate[:23], namespace, subject[:64])
        return voucher_text(make_voucher(meta(site).uid, own_key, subject, decision.site_key))

    # ---- identities -----------------------------------------------------------------------------------------------
    async def _record(self, namespace: str, identity: str) -> tuple[JsonDict | None, IdentityRecord | None]:
        """The identity's record as stored now (not the cache: a claim must see every other claim)."""
        try:
            current = await self.api.get(CONFIG_MAP, identity_object_name(identity), namespace)
        except NotFound:
            return None, None
        record = parse_identity(current)
        # a ConfigMap of that name that is not a readable record still keeps the identity taken
        return current, record or IdentityRecord(identity, "", "an unreadable record", "")

    async def _identity_decision(self, site: Mapping[str, Any], subject: str, proven: ProvenSite | None,
                                 own_key: bytes, key_secret: Mapping[str, Any]
                                 ) -> tuple[Decision, JsonDict | None] | Refusal:
        """Whether ``subject`` may be issued here, and the record it replaces (a site linking again)."""
        namespace, own_id = meta(site).namespace, meta(site).uid
        try:
            current, record = await self._record(namespace, subject)
        except KubeError as failure:
            return Refusal(503, "Unavailable", f"could not read the site's link identities: {failure}")
        records = self.records(namespace)
        links = self.network_links(namespace)
        trust = network_trust(known=self.network_ids(namespace), dials=links.dials, up_links=links.up_links,
                              records=records.values(), own=(own_id, public_key(own_key)),
                              held=held_vouchers(key_secret))
        decision = identity_decision(subject, own_site_id=own_id, trust=trust, record=record,
                                     records=max(len(records), self.identity_count(namespace)), proven=proven)
        if decision.problem is None:
            return decision, current if decision.rebind else None
        log.warning("redemption in namespace %s refused: identity %s: %s", namespace, subject[:64], decision.problem)
        return Refusal(400 if subject == own_id else 409, "SameSite" if subject == own_id else "IdentityTaken",
                       decision.problem)

    async def _claim(self, site: Mapping[str, Any], record: IdentityRecord) -> Refusal | None:
        """Record ``record``, unless another redemption recorded its identity first."""
        namespace, subject = meta(site).namespace, record.identity
        try:
            await self.api.create(CONFIG_MAP, identity_config_map(site, record), namespace)
        except AlreadyExists:
            _, taken = await self._record(namespace, subject)
            problem = identity_problem(subject, own_site_id=meta(site).uid, known=frozenset(), record=taken,
                                       records=0) or f"a link certificate for {subject} was just issued"
            return Refusal(409, "IdentityTaken", problem)
        except KubeError as failure:
            return Refusal(503, "Unavailable", f"could not record the link identity: {failure}")
        return None

    async def _rebind(self, site: Mapping[str, Any], previous: JsonDict, record: IdentityRecord) -> Refusal | None:
        """Replace the record ``previous`` (as read) with ``record``: a site linking again, proven. Only if no
        other redemption changed it meanwhile (its resourceVersion)."""
        namespace = meta(site).namespace
        body = identity_config_map(site, record)
        body["metadata"]["resourceVersion"] = meta(previous).resource_version
        try:
            await self.api.replace(CONFIG_MAP, body, name=meta(previous).name, namespace=namespace)
        except (Conflict, NotFound):
            return Refusal(409, "IdentityTaken", f"the link identity {record.identity} changed during the "
                                                 f"redemption; redeem again")
        except KubeError as failure:
            return Refusal(503, "Unavailable", f"could not record the link identity: {failure}")
        return None

    async def _release(self, site: Mapping[str, Any], record: IdentityRecord, previous: JsonDict | None) -> None:
        """Take back a claim whose redemption failed (only while it is still this certificate's): delete it, or
        put back the record it replaced."""
        namespace, subject = meta(site).namespace, record.identity
        try:
            current, now = await self._record(namespace, subject)
            if current is None or now is None or now.certificate != record.certificate:
                return
            if previous is None:
                await self.api.delete(CONFIG_MAP, meta(current).name, namespace, uid=meta(current).uid or None)
                return
            restored = {**previous, "metadata": {**previous["metadata"],
                                                 "resourceVersion": meta(current).resource_version}}
            await self.api.replace(CONFIG_MAP, restored, name=meta(current).name, namespace=namespace)
        except (NotFound, Conflict):
            return
        except KubeError as failure:
            log.warning("could not take back the link identity %s in namespace %s: %s", subject[:64], namespace,
                        failure)

    async def _count(self, obj: JsonDict, delta: int) -> bool:
        """Add ``delta`` to ``status.redemptions`` if the grant is still at ``obj``'s resourceVersion."""
        grant_meta = meta(obj)
        current = mapping(obj, "status").get("redemptions")
        count = current if isinstance(current, int) and not isinstance(current, bool) else 0
        patch = {"metadata": {"resourceVersion": grant_meta.resource_version},
                 "status": {"redemptions": max(0, count + delta)}}
        try:
            await self.api.merge_patch(ACCESS_GRANT, patch, name=grant_meta.name, namespace=grant_meta.namespace,
                                       subresource="status")
        except Conflict:
            return False
        return True
