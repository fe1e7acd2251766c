"""The redeeming side of access tokens (I/O): an AccessToken in a namespace with an active Site is redeemed once,
with upstream's request (HTTPS POST of the code, headers ``name`` = the token's name and ``subject`` = this Site's
uid; aiohttp, TLS 1.3, the server verified with the token's CA and its name checked), plus the header
``skupper-site-proof``: this site's proof of its site key with the vouchers it holds (:mod:`.site_keys`; upstream's
grant server ignores it), and gives the client
certificate Secret named after the token and one Link per endpoint group of the answer (the token's name, then
``-2``, ...), annotated with the token's uid and owned by the Site. It redeems upstream's grant servers and ours
alike.

As upstream, redeeming makes one link, dialed by this site; it carries connections both ways (the router
multiplexes streams in either direction over the links one side dialed), so the granting site needs no way back
to this one: a site without any link access can link to a network and serve it.

Outcomes are the token's status (:func:`.grants.token_status`):

- redeemed: Ready, ``redeemed: true``; the Link and Secret exist; the granting site's voucher for this site's key,
  if the answer carries one that verifies, is kept in the site key Secret (it outlives the Link);
- refused by the grant (wrong code, expired, used up): Error with the granting site's status and text, not
  retried (a changed token is tried again);
- the granting site unreachable, or not ready: Error saying so, retried with backoff (so a token applied while the
  other site is down is redeemed once it is up);
- the server not trusted by the token's CA: Error, not retried.

Nothing is created unless the redemption succeeded; a Link or Secret of the token's name that is not ours stops the
redemption before it is sent. If creating the Link fails after its Secret was created, the Secret is deleted.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from pydantic import ValidationError

from operator_runtime.api import KubeApi
from operator_runtime.errors import KubeError, NotFound
from operator_runtime.kinds import SECRET
from operator_runtime.objects import mapping, meta
from operator_runtime.reflector import Reflector

from ..crd.models import AccessTokenSpec
from ..http_body import BodyTooLarge, read_body
from ..kinds import LINK
from .bounded import BoundedCache
from .grant_io import SiteAccess
from .grants import ANNOTATION_TOKEN, AnswerProblem, link_name_problem, link_names, link_objects, parse_answer
from .resources import owner_references
from .site_key_io import SiteKeys, held_vouchers
from .site_keys import PROOF_HEADER, ProofProblem, Voucher, make_proof, parse_voucher, public_key
from .status import ConditionState, error, pending, ready
from .validation import quoted

__all__ = ["REDEEM_TIMEOUT", "TokenOutcome", "TokenRedeemer", "checked_voucher", "post_redemption"]

log = logging.getLogger(__name__)
REDEEM_TIMEOUT = 10.0
MAX_ANSWER = 256 * 1024


@dataclass
class TokenOutcome:
    obj: Mapping[str, Any]
    state: ConditionState
    redeemed: bool = False
    retry: bool = False
    reason: str | None = None            # for the Warning Event
    sent: bool = False                   # the outcome of a request to the granting site
    created: list[str] = field(default_factory=list)


class _Refused(Exception):
    def __init__(self, message: str, *, retry: bool, reason: str) -> None:
        super().__init__(message)
        self.retry = retry
        self.reason = reason


def client_context(ca_pem: str) -> ssl.SSLContext:
    """TLS 1.3, the server verified with ``ca_pem`` alone, its name checked."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca_pem)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.check_hostname = True
    return context


#: why a grant server refused, by its status (upstream's answers carry only a line of text)
_REASONS = {400: "BadRequest", 403: "Refused", 404: "NotFound", 405: "Refused", 409: "GrantInvalid",
            429: "Throttled"}


async def post_redemption(url: str, ca_pem: str, code: str, name: str, subject: str,
                          limit: float = REDEEM_TIMEOUT, proof: str | None = None) -> str:
    """POST ``code`` to the grant ``url`` as upstream's redeemer does, with this site's ``proof`` of its site key
    (:mod:`.site_keys`) as one more header; the answer's text (a YAML stream), or ``_Refused`` with what went
    wrong."""
    headers = {"name": name, "subject": subject, "Content-Type": "text/plain"}
    if proof is not None:
        headers[PROOF_HEADER] = proof
    where = quoted(url)
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise _Refused(f"the token's url {where} is not an https URL", retry=False, reason="InvalidToken")
    try:
        context = client_context(ca_pem)
    except (ssl.SSLError, ValueError) as e:
        raise _Refused(f"the token's ca is not a PEM certificate: {str(e)[:200]}", retry=False,
                       reason="InvalidToken") from None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=limit)) as session, \
                session.post(url, data=code.encode(), ssl=context, headers=headers) as response:
            status = response.status
            raw = await read_body(response.content, MAX_ANSWER)
    except BodyTooLarge as e:
        raise _Refused(f"the redemption server at {where} answered with more than it may: {e}", retry=False,
                       reason="InvalidAnswer") from None
    except aiohttp.ClientConnectorCertificateError as e:
        raise _Refused(f"the redemption server at {where} is not trusted by the token's CA: "
                       f"{str(e.certificate_error)[:200]}", retry=False, reason="UntrustedServer") from None
    except aiohttp.ClientSSLError as e:
        raise _Refused(f"TLS with the redemption server at {where} failed: {str(e)[:200]}", retry=False,
                       reason="UntrustedServer") from None
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        detail = str(e) or type(e).__name__
        raise _Refused(f"could not reach the redemption server at {where}: {detail[:200]}", retry=True,
                       reason="Unreachable") from None
    text = raw.decode(errors="replace")
    if status != 200:
        message = " ".join(text.split())[:300] or f"HTTP {status}"
        raise _Refused(f"redemption refused by {parts.hostname}: {message}", retry=status >= 500 or status == 429,
                       reason=_REASONS.get(status, "SiteNotReady" if status >= 500 else "Refused"))
    return text


def checked_voucher(text: str | None, site_id: str, key: bytes) -> Voucher | None:
    """The voucher of an answer if it verifies and vouches for this site's own key (else None, logged)."""
    if text is None:
        return None
    try:
        voucher = parse_voucher(text)
    except ProofProblem as e:
        log.warning("the voucher of a redemption answer is unusable: %s", e)
        return None
    if voucher.identity != site_id or voucher.key != public_key(key):
        log.warning("the voucher of a redemption answer is for another site or key; not kept")
        return None
    return voucher


class TokenRedeemer:
    """Redeems the AccessTokens of a namespace (one controller)."""

    def __init__(self, api: KubeApi, tokens: Reflector, links: Reflector, secrets: Reflector,
                 site_access: Callable[[str], SiteAccess]) -> None:
        self.api = api
        self.tokens = tokens
        self.links = links
        self.secrets = secrets
        self.site_access = site_access
        self.keys = SiteKeys(api)
        # token uid -> (generation, remote site)
        self._redeemed: BoundedCache[str, tuple[int | None, str]] = BoundedCache()
        #: token uid -> (generation, outcome, not before): a refusal is not sent again for the same generation;
        #: a retryable failure is tried again after a delay that doubles (1 s to 60 s), whatever triggers.
        self._last: BoundedCache[str, tuple[int | None, TokenOutcome, float, float]] = BoundedCache()

    async def reconcile(self, namespace: str) -> list[TokenOutcome]:
        outcomes = []
        for obj in self.tokens.by_index("namespace", namespace):
            if meta(obj).deletion_timestamp:
                continue
            outcomes.append(await self._one(obj))
        return outcomes

    def _ours(self, namespace: str, name: str, uid: str) -> bool:
        link = self.links.get(f"{namespace}/{name}")
        return link is not None and meta(link).annotations.get(ANNOTATION_TOKEN) == uid

    async def _one(self, obj: Mapping[str, Any]) -> TokenOutcome:
        token_meta = meta(obj)
        namespace, name, uid = token_meta.namespace, token_meta.name, token_meta.uid
        status = mapping(obj, "status")
        if status.get("redeemed") is True or uid in self._redeemed or self._ours(namespace, name, uid):
            return TokenOutcome(obj, ready(), redeemed=True)
        last = self._last.get(uid)
        if last is not None and last[0] == token_meta.generation and (not last[1].retry or time.monotonic() < last[2]):
            return TokenOutcome(obj, last[1].state, retry=last[1].retry, reason=None)
        outcome = await self._attempt(obj)
        delay = min(60.0, (last[3] * 2) if last is not None and last[0] == token_meta.generation else 1.0)
        if not outcome.sent:
            self._last.pop(uid)
        else:
            self._last.put(uid, (token_meta.generation, outcome, time.monotonic() + delay, delay))
        return outcome

    async def _attempt(self, obj: Mapping[str, Any]) -> TokenOutcome:
        token_meta = meta(obj)
        namespace, name = token_meta.namespace, token_meta.name
        try:
            spec = AccessTokenSpec.model_validate(dict(mapping(obj, "spec")))
        except ValidationError as e:
            first = e.errors(include_input=False)[0]
            return TokenOutcome(obj, error(f"spec.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"),
                                reason="InvalidToken")
        if problem := link_name_problem(name):
            return TokenOutcome(obj, error(f"the token's name is unusable: {problem}"), reason="InvalidToken")
        for kind, cache in (("Link", self.links), ("Secret", self.secrets)):
            if cache.get(f"{namespace}/{name}") is not None:
                return TokenOutcome(obj, error(f"a {kind} named {name} already exists in namespace {namespace}: "
                                               f"the token's Link and Secret take its name"), reason="NameTaken")
        access = self.site_access(namespace)
        if access.site is None:
            return TokenOutcome(obj, pending("No active site in namespace"))
        site = access.site
        try:
            key_secret = await self.keys.secret(site)
            key = SiteKeys.key_of(key_secret)
        except (KubeError, ProofProblem) as e:
            return TokenOutcome(obj, error(f"the site key is not usable: {e}"), retry=True, reason="SiteKey")
        proof = make_proof(key, meta(site).uid, spec.url, int(time.time()), list(held_vouchers(key_secret).values()))
        try:
            text = await post_redemption(spec.url, spec.ca, spec.code, name, meta(site).uid, proof=proof)
            return await self._create(obj, spec, text, site, key)
        except _Refused as refused:
            log.info("AccessToken %s/%s: %s", namespace, name, refused)
            return TokenOutcome(obj, error(str(refused)), retry=refused.retry, reason=refused.reason, sent=True)

    async def _keep_voucher(self, site: Mapping[str, Any], token: str, text: str | None, key: bytes) -> None:
        voucher = checked_voucher(text, meta(site).uid, key)
        if voucher is None:
            return
        try:
            await self.keys.keep_voucher(site, token, voucher)
        except KubeError as failure:      # the link works without it; a later redemption just carries one less
            log.warning("could not keep the voucher of token %s: %s", token, failure)

    async def _create(self, obj: Mapping[str, Any], spec: AccessTokenSpec, text: str,
                      site: Mapping[str, Any], key: bytes) -> TokenOutcome:
        token_meta = meta(obj)
        namespace, name = token_meta.namespace, token_meta.name
        try:
            answer = parse_answer(text)
        except AnswerProblem as e:
            raise _Refused(f"the redemption answer is unusable: {e}", retry=False, reason="BadAnswer") from None
        if problem := answer.problem():
            raise _Refused(f"the redemption answer is unusable: {problem}", retry=False, reason="BadAnswer")
        for link_name in link_names(name, len(answer.links))[1:]:
            if self.links.get(f"{namespace}/{link_name}") is not None:
                return TokenOutcome(obj, error(f"a Link named {link_name} already exists in namespace {namespace}: "
                                               f"the token's Links take its name"), reason="NameTaken", sent=True)
        secret_body, *link_bodies = link_objects(namespace, name, answer, cost=spec.link_cost or 1,
                                                 annotations={ANNOTATION_TOKEN: token_meta.uid},
                                                 owners=owner_references(site))
        try:
            secret = await self.api.create(SECRET, secret_body, namespace)
        except KubeError as failure:
            return TokenOutcome(obj, error(f"redeemed, but the Secret {name} could not be created: {failure}"),
                                reason="CreateFailed")
        created: list[str] = []
        try:
            for link_body in link_bodies:
                await self.api.create(LINK, link_body, namespace)
                created.append(link_body["metadata"]["name"])
        except KubeError as failure:     # nothing half made: the Links made so far and the Secret go
            for link_name in created:
                try:
                    await self.api.delete(LINK, link_name, namespace)
                except (NotFound, KubeError):
                    pass
            try:
                await self.api.delete(SECRET, name, namespace, uid=meta(secret).uid)
            except (NotFound, KubeError):
                pass
            return TokenOutcome(obj, error(f"redeemed, but the Link {name} could not be created: {failure}"),
                                reason="CreateFailed")
        await self._keep_voucher(site, name, answer.voucher, key)
        host = urlsplit(spec.url).hostname or "?"
        self._redeemed.put(token_meta.uid, (token_meta.generation, host))
        log.info("AccessToken %s/%s redeemed at %s: Links %s created", namespace, name, host[:64],
                 ", ".join(created))
        return TokenOutcome(obj, ready(), redeemed=True,
                            created=[f"Secret {name}", *(f"Link {n}" for n in created)])
