"""The TLS a router access offers to linking routers, seen from a client holding a link certificate: TLS 1.3 with
AES-128-GCM chosen whatever the client prefers and, for an access that admits TLS 1.2, only forward-secret AEAD
ciphers."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest
from network_support import NetRouter


def _client_context(router: NetRouter, *, tls12: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(router.site.ca.ca_file))
    ctx.check_hostname = False          # as a linking router: the site CA is the trust anchor, names are not matched
    cert = router.site.client_cert("west")
    ctx.load_cert_chain(str(cert.cert), str(cert.key))
    if tls12:
        ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def _cipher(router: NetRouter, ctx: ssl.SSLContext) -> str | None:
    """The cipher the access chose for a link connection (the access speaks the link protocol after the handshake;
    nothing else is sent)."""
    assert router.access_port is not None
    with socket.create_connection((router.host, router.access_port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="control.service-network") as tls:
        cipher = tls.cipher()
        return cipher[0] if cipher else None


async def _access_with_backend(net, start_backend, **access: str) -> NetRouter:  # type: ignore[no-untyped-def]
    east = net.router("east")
    east.doc["routerAccess"][0].update(access)
    east.connect("backend", [await start_backend("pod-east", east.host)])
    return await east.start()


async def test_access_prefers_aes128_gcm_whatever_the_client_prefers(net, start_backend):
    east = await _access_with_backend(net, start_backend)
    ctx = _client_context(east)
    # the client asks for AES-256 and ChaCha20 first (OpenSSL's default order)
    assert await asyncio.to_thread(_cipher, east, ctx) == "TLS_AES_128_GCM_SHA256"


async def test_access_admits_only_forward_secret_aead_ciphers_with_tls12(net, start_backend):
    east = await _access_with_backend(net, start_backend, minTlsVersion="1.2")
    ctx = _client_context(east, tls12=True)
    assert await asyncio.to_thread(_cipher, east, ctx) == "ECDHE-ECDSA-AES128-GCM-SHA256"
    cbc = _client_context(east, tls12=True)
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA")
    with pytest.raises(ssl.SSLError):
        await asyncio.to_thread(_cipher, east, cbc)
