"""The HTTPS redemption server of the site controller (aiohttp): ``POST /<grant uid>`` with a JSON redemption request
answers with the granting site's link credentials, or with an error status and a JSON ``{"reason", "message"}``.

Its certificate is issued at start by the grant-server CA, kept in the Secret ``skupper-grant-server-ca`` of the
controller's namespace (created when missing, so tokens issued before a restart stay valid); the certificate names
the host of the advertised URL. TLS 1.3 only, as upstream. Grants publish the CA in their status and tokens carry
it, so the redeeming site verifies this server with it.

The redemption itself (grant lookup, checks, counting, the link back) is the ``redeem`` callable's: this module only
speaks HTTP: bodies are bounded (64 KiB), parsed with the pydantic models of :mod:`.grants`, and errors never echo
more than 200 characters of the input.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from pydantic import ValidationError

from operator_runtime.api import KubeApi
from operator_runtime.errors import AlreadyExists, KubeError, NotFound
from operator_runtime.kinds import SECRET

from . import pki
from .access import endpoint_hosts
from .access_io import decode, tls_secret
from .grants import RedeemRequest, Refusal

__all__ = ["GRANT_SERVER_CA_SECRET", "GrantServer", "Redeem", "load_grant_ca", "server_context"]

log = logging.getLogger(__name__)

GRANT_SERVER_CA_SECRET = "skupper-grant-server-ca"
MAX_BODY = 64 * 1024

#: (grant uid, request) -> the JSON answer, or a Refusal
Redeem = Callable[[str, RedeemRequest], Awaitable[dict[str, object] | Refusal]]


async def load_grant_ca(api: KubeApi, namespace: str | None) -> pki.KeyPair:
    """The grant-server CA from its Secret in ``namespace`` (created when missing); in memory without a namespace
    or when the Secret cannot be read or written (then tokens do not survive a restart: logged)."""
    if namespace:
        try:
            try:
                secret = await api.get(SECRET, GRANT_SERVER_CA_SECRET, namespace)
            except NotFound:
                pair = pki.new_ca("skupper-grant-server-ca")
                try:
                    secret = await api.create(SECRET, tls_secret(GRANT_SERVER_CA_SECRET, namespace, pair, pair.cert,
                                                                 owners=[]), namespace)
                except AlreadyExists:
                    secret = await api.get(SECRET, GRANT_SERVER_CA_SECRET, namespace)
            pair = pki.KeyPair(decode(secret, "tls.crt"), decode(secret, "tls.key"))
            pki.load_pair(pair, "grant server CA")
            return pair
        except (KubeError, pki.CertificateError) as e:
            log.warning("grant server CA Secret %s/%s unusable (%s): using a CA kept in memory", namespace,
                        GRANT_SERVER_CA_SECRET, str(e)[:200])
    return pki.new_ca("skupper-grant-server-ca")


def server_context(ca: pki.KeyPair, host: str) -> ssl.SSLContext:
    """A TLS 1.3 server context with a certificate for ``host`` signed by ``ca``."""
    dns, ips = endpoint_hosts([host])
    pair = pki.issue(ca, host, dns=dns, ips=ips, server=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    with tempfile.TemporaryDirectory(prefix="sn-grant-") as directory:
        chain, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pair.key)
        chain.write_bytes(pair.cert + ca.cert)
        context.load_cert_chain(str(chain), str(key))
    return context


def _error(status: int, reason: str, message: str) -> web.Response:
    return web.json_response({"reason": reason, "message": message[:1000]}, status=status)


@dataclass
class _Bound:
    url: str
    ca_pem: str


class GrantServer:
    """Serves redemptions on ``host:port`` (port 0: any free port); ``url_base`` is what grants publish
    (default ``https://<host>:<port>``)."""

    def __init__(self, redeem: Redeem, ca: pki.KeyPair, host: str, port: int, url_base: str | None = None) -> None:
        self.redeem = redeem
        self.ca = ca
        self.host = host
        self.port = port
        self.url_base = url_base
        self._runner: web.AppRunner | None = None
        self.bound: _Bound | None = None

    @property
    def ca_pem(self) -> str:
        return self.ca.cert.decode()

    def url(self, grant_uid: str) -> str | None:
        return f"{self.bound.url}/{grant_uid}" if self.bound is not None else None

    async def start(self) -> str:
        from urllib.parse import urlsplit

        advertised = urlsplit(self.url_base).hostname if self.url_base else None
        context = server_context(self.ca, advertised or self.host)
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/{uid}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=context)
        await site.start()
        port = int(self._runner.addresses[0][1]) if self._runner.addresses else self.port
        base = (self.url_base or f"https://{self.host}:{port}").rstrip("/")
        self.bound = _Bound(base, self.ca_pem)
        log.info("grant server on %s:%d (grants publish %s/<uid>)", self.host, port, base)
        return base

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        uid = request.match_info["uid"]
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _error(413, "TooLarge", f"the request is larger than {MAX_BODY} bytes")
        try:
            body = RedeemRequest.model_validate(json.loads(raw))
        except (ValueError, ValidationError) as e:
            if isinstance(e, ValidationError):
                first = e.errors(include_input=False)[0]
                detail = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
            else:
                detail = "not JSON"
            return _error(400, "BadRequest", f"invalid redemption request: {detail[:200]}")
        try:
            answer = await self.redeem(uid, body)
        except Exception:   # a bug must not leave the client waiting: logged, and the client told
            log.exception("redemption of grant %s failed", uid[:64])
            return _error(500, "InternalError", "the redemption failed; see the site controller's log")
        if isinstance(answer, Refusal):
            return _error(answer.http_status, answer.reason, answer.message)
        return web.json_response(answer)
