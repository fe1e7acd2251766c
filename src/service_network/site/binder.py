"""The dialing side of ``skupper link generate`` credentials (I/O): a Link whose credentials Secret carries the
granting site's binding address (:data:`.site_keys.ANNOTATION_SITE_BINDING`, which that site's controller writes
on the credential and ``skupper link generate`` prints with it) is announced to that site once: an HTTPS POST to
``<grant server>/bindings/<the credential's key fingerprint>`` with the headers ``subject`` (this Site's uid) and
``skupper-site-proof`` (:mod:`.site_keys`), verified with the annotation's CA. The granting site binds the
credential to this site by the same rules as a redemption, so a site its network already knows, or that linked
to it before, links with a generated credential too (a site nobody knows is bound at its first link anyway). The
voucher of the answer is kept like a redemption's.

Outcomes: bound (not sent again for that Secret); refused (a Warning Event on the Link with the granting site's
words, not sent again until the Secret changes); unreachable (retried with the controller's backoff).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from operator_runtime.api import KubeApi
from operator_runtime.errors import KubeError
from operator_runtime.kinds import SECRET
from operator_runtime.objects import mapping, meta
from operator_runtime.reflector import Reflector

from ..http_body import BodyTooLarge, read_body
from .access_io import decode
from .bounded import BoundedCache
from .grant_io import SiteAccess
from .grants import ANNOTATION_TOKEN
from .identities import fingerprint
from .redeem import REDEEM_TIMEOUT, checked_voucher, client_context
from .site_key_io import SiteKeys, held_vouchers
from .site_keys import ANNOTATION_SITE_BINDING, PROOF_HEADER, ProofProblem, make_proof, parse_binding

__all__ = ["BindOutcome", "BindingRefused", "CredentialBinder", "post_binding"]

log = logging.getLogger(__name__)
MAX_ANSWER = 16 * 1024


class BindingRefused(Exception):
    """A binding not made: the issuing site's words (``status`` 0: not reached), and whether to try again."""

    def __init__(self, message: str, *, status: int, retry: bool) -> None:
        super().__init__(message)
        self.status = status
        self.retry = retry


async def post_binding(url: str, ca_pem: str, subject: str, proof: str) -> str | BindingRefused:
    """POST a binding request (the site proof for ``url``) to the site that issued a credential; its voucher text,
    or why not."""
    try:
        context = client_context(ca_pem)
    except (ssl.SSLError, ValueError) as e:
        return BindingRefused(f"the binding address's CA is not a PEM certificate: {str(e)[:200]}", status=0,
                              retry=False)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REDEEM_TIMEOUT)) as session, \
                session.post(url, data=b"", ssl=context,
                             headers={"subject": subject, PROOF_HEADER: proof}) as response:
            status = response.status
            text = (await read_body(response.content, MAX_ANSWER)).decode(errors="replace")
    except BodyTooLarge as e:
        return BindingRefused(f"the site that issued the link credential answered with more than it may: {e}",
                              status=0, retry=False)
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        return BindingRefused(f"could not reach the site that issued the link credential at {url[:200]}: "
                              f"{str(e)[:200]}", status=0, retry=True)
    if status != 200:
        words = " ".join(text.split())[:300] or f"HTTP {status}"
        return BindingRefused(f"the site that issued the link credential refused to bind it to this site: {words}",
                              status=status, retry=status >= 500 or status == 429)
    return text


@dataclass(frozen=True)
class BindOutcome:
    link: Mapping[str, Any]
    message: str | None = None          # a refusal, for a Warning Event on the Link
    retry: bool = False


class CredentialBinder:
    """Announces generated link credentials to the sites that issued them (one controller)."""

    def __init__(self, api: KubeApi, links: Reflector, secrets: Reflector,
                 site_access: Callable[[str], SiteAccess]) -> None:
        self.api = api
        self.links = links
        self.secrets = secrets
        self.site_access = site_access
        self.keys = SiteKeys(api)
        #: Secret uid:resourceVersion -> done (bound or refused), or the monotonic time of the next try
        self._done: BoundedCache[str, float | None] = BoundedCache()

    async def reconcile(self, namespace: str) -> list[BindOutcome]:
        access = self.site_access(namespace)
        if access.site is None:
            return []
        outcomes = []
        for link in self.links.by_index("namespace", namespace):
            if meta(link).deletion_timestamp or ANNOTATION_TOKEN in meta(link).annotations:
                continue
            secret = self.secrets.get(f"{namespace}/{mapping(link, 'spec').get('tlsCredentials', '')}")
            if secret is None or ANNOTATION_SITE_BINDING not in meta(secret).annotations:
                continue
            key = f"{meta(secret).uid}:{meta(secret).resource_version}"
            if key in self._done and ((until := self._done.get(key)) is None or time.monotonic() < until):
                continue
            outcome = await self._bind(link, secret, access.site)
            self._done.put(key, time.monotonic() + 5.0 if outcome.retry else None)
            outcomes.append(outcome)
        return outcomes

    async def _bind(self, link: Mapping[str, Any], secret: Mapping[str, Any], site: Mapping[str, Any]) -> BindOutcome:
        try:
            base, ca = parse_binding(meta(secret).annotations[ANNOTATION_SITE_BINDING])
            cert = decode(await self.api.get(SECRET, meta(secret).name, meta(secret).namespace), "tls.crt")
            url = f"{base}/bindings/{fingerprint(cert).removeprefix('sha256:')}"
            key_secret = await self.keys.secret(site)
            key = SiteKeys.key_of(key_secret)
            proof = make_proof(key, meta(site).uid, url, int(time.time()), list(held_vouchers(key_secret).values()))
        except (ProofProblem, ValueError, KubeError) as e:
            log.warning("Link %s: its credential cannot be announced: %s", meta(link).name, str(e)[:300])
            return BindOutcome(link, f"the link credential cannot be announced to the site that issued it: "
                                     f"{str(e)[:300]}")
        outcome = await post_binding(url, ca, meta(site).uid, proof)
        if isinstance(outcome, BindingRefused):
            log.warning("Link %s: %s", meta(link).name, outcome)
            return BindOutcome(link, None if outcome.retry and outcome.status == 0 else str(outcome),
                               retry=outcome.retry)
        text = outcome
        voucher = checked_voucher(text, meta(site).uid, key)
        if voucher is not None:
            try:
                await self.keys.keep_voucher(site, meta(link).name, voucher)
            except KubeError as failure:
                log.warning("could not keep the voucher of Link %s: %s", meta(link).name, failure)
        log.info("Link %s: its credential is bound to this site at the site that issued it", meta(link).name)
        return BindOutcome(link)
