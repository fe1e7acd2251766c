"""The redeeming side of access tokens (I/O): an AccessToken in a namespace with an active Site is redeemed once,
over HTTPS (aiohttp, TLS 1.3, the server verified with the token's CA and its name checked), and gives a Link named
after the token and its client-certificate Secret (same name), annotated with the token's uid.

As upstream, redeeming makes one link, dialed by this site; it carries connections both ways (the router
multiplexes streams in either direction over the links one side dialed), so the granting site needs no way back
to this one: a site without any link access can link to a network and serve it.

Outcomes are the token's status (:func:`.grants.token_status`):

- redeemed: Ready, ``redeemed: true``; the Link and Secret exist;
- refused by the grant (wrong code, expired, used up, invalid link back): Error with the granting site's message,
  not retried (a changed token is tried again);
- the granting site unreachable, or not ready: Error saying so, retried with backoff (so a token applied while the
  other site is down is redeemed once it is up);
- the server not trusted by the token's CA: Error, not retried.

Nothing is created unless the redemption succeeded; a Link or Secret of the token's name that is not ours stops the
redemption before it is sent. If creating the Link fails after its Secret was created, the Secret is deleted.
"""

from __future__ import annotations

import json
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
from operator_runtime.objects import JsonDict, mapping, meta
from operator_runtime.reflector import Reflector

from ..crd.models import AccessTokenSpec
from ..kinds import LINK
from .grant_io import SiteAccess
from .grants import ANNOTATION_TOKEN, RedeemResponse, link_name_problem, link_objects
from .resources import owner_references
from .status import ConditionState, error, pending, ready
from .validation import quoted

__all__ = ["REDEEM_TIMEOUT", "TokenOutcome", "TokenRedeemer"]

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


async def post_redemption(url: str, ca_pem: str, body: JsonDict, limit: float = REDEEM_TIMEOUT) -> JsonDict:
    """POST ``body`` to the grant ``url``; the JSON answer, or ``_Refused`` with what went wrong."""
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
                session.post(url, json=body, ssl=context) as response:
            raw = await response.content.read(MAX_ANSWER)
            status = response.status
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
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if status != 200:
        message = (str(answer.get("message")) if isinstance(answer, dict) and answer.get("message")
                   else raw[:200].decode(errors="replace") or f"HTTP {status}")
        raise _Refused(f"redemption refused by {parts.hostname}: {message[:500]}", retry=status >= 500,
                       reason=str(answer.get("reason")) if isinstance(answer, dict) and answer.get("reason")
                       else "Refused")
    if not isinstance(answer, dict):
        raise _Refused(f"the redemption server at {where} did not answer with JSON", retry=False,
                       reason="BadAnswer")
    return answer


class TokenRedeemer:
    """Redeems the AccessTokens of a namespace (one controller)."""

    def __init__(self, api: KubeApi, tokens: Reflector, links: Reflector, secrets: Reflector,
                 site_access: Callable[[str], SiteAccess]) -> None:
        self.api = api
        self.tokens = tokens
        self.links = links
        self.secrets = secrets
        self.site_access = site_access
        self._redeemed: dict[str, tuple[int | None, str]] = {}   # token uid -> (generation, remote site)
        #: token uid -> (generation, outcome, not before): a refusal is not sent again for the same generation;
        #: a retryable failure is tried again after a delay that doubles (1 s to 60 s), whatever triggers.
        self._last: dict[str, tuple[int | None, TokenOutcome, float, float]] = {}

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
            self._last.pop(uid, None)
        else:
            if len(self._last) > 4096:
                self._last.clear()
            self._last[uid] = (token_meta.generation, outcome, time.monotonic() + delay, delay)
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
            request = self._request(obj, spec, site)
            answer = await post_redemption(spec.url, spec.ca, request)
            return await self._create(obj, spec, answer, site)
        except _Refused as refused:
            log.info("AccessToken %s/%s: %s", namespace, name, refused)
            return TokenOutcome(obj, error(str(refused)), retry=refused.retry, reason=refused.reason, sent=True)

    def _request(self, obj: Mapping[str, Any], spec: AccessTokenSpec, site: Mapping[str, Any]) -> JsonDict:
        site_meta = meta(site)
        return {"code": spec.code, "token": meta(obj).name, "cost": spec.link_cost or 1,
                "site": {"id": site_meta.uid, "name": site_meta.name, "namespace": site_meta.namespace}}

    async def _create(self, obj: Mapping[str, Any], spec: AccessTokenSpec, answer: JsonDict,
                      site: Mapping[str, Any]) -> TokenOutcome:
        token_meta = meta(obj)
        namespace, name = token_meta.namespace, token_meta.name
        try:
            response = RedeemResponse.model_validate(answer)
        except ValidationError as e:
            first = e.errors(include_input=False)[0]
            raise _Refused(f"the redemption answer is unusable: {'.'.join(str(p) for p in first['loc'])}: "
                           f"{first['msg']}", retry=False, reason="BadAnswer") from None
        if problem := response.problem():
            raise _Refused(f"the redemption answer is unusable: {problem}", retry=False, reason="BadAnswer")
        secret_body, link_body = link_objects(namespace, name, response.endpoints, response,
                                              cost=spec.link_cost or 1, annotations={ANNOTATION_TOKEN: token_meta.uid},
                                              owners=owner_references(site))
        try:
            secret = await self.api.create(SECRET, secret_body, namespace)
        except KubeError as failure:
            return TokenOutcome(obj, error(f"redeemed, but the Secret {name} could not be created: {failure}"),
                                reason="CreateFailed")
        try:
            await self.api.create(LINK, link_body, namespace)
        except KubeError as failure:
            try:
                await self.api.delete(SECRET, name, namespace, uid=meta(secret).uid)
            except (NotFound, KubeError):
                pass
            return TokenOutcome(obj, error(f"redeemed, but the Link {name} could not be created: {failure}"),
                                reason="CreateFailed")
        self._redeemed[token_meta.uid] = (token_meta.generation, response.site.name)
        if len(self._redeemed) > 4096:
            self._redeemed.clear()
        log.info("AccessToken %s/%s redeemed at site %s: Link %s created", namespace, name,
                 response.site.name[:64], name)
        return TokenOutcome(obj, ready(), redeemed=True, created=[f"Secret {name}", f"Link {name}"])
