"""The TLS a router access offers to linking routers, seen from a client holding a link certificate: TLS 1.3 with
AES-128-GCM chosen and, for an access that admits TLS 1.2, only forward-secret AEAD ciphers (both engines);
with HAProxy (the baseline, one TLS connection per client connection and hop) sessions resumed from the access's
session cache."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest
from network_support import NetRouter

from service_network.router.names import routing_key_sni


def _client_context(router: NetRouter, *, tls12: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(router.site.ca.ca_file))
    ctx.check_hostname = False          # the access certificate names the key wildcard, the SNI names the key
    cert = router.site.client_cert("west")
    ctx.load_cert_chain(str(cert.cert), str(cert.key))
    if tls12:
        ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def _hop(router: NetRouter, ctx: ssl.SSLContext, session: ssl.SSLSession | None = None
         ) -> tuple[str, str | None, bool, ssl.SSLSession | None]:
    """One connection to the access for the key ``backend``: (greeting, cipher, resumed, session)."""
    assert router.access_port is not None
    with socket.create_connection((router.host, router.access_port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname=routing_key_sni("backend"), session=session) as tls:
        greeting = tls.recv(100).decode().strip()     # after data, the TLS 1.3 session ticket has arrived
        cipher = tls.cipher()
        return greeting, cipher[0] if cipher else None, tls.session_reused, tls.session


def _cipher(router: NetRouter, ctx: ssl.SSLContext) -> str | None:
    """The cipher the access chose for a link connection (the Rust router's access speaks the link protocol after
    the handshake; nothing else is sent)."""
    assert router.access_port is not None
    with socket.create_connection((router.host, router.access_port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="control.service-network") as tls:
        cipher = tls.cipher()
        return cipher[0] if cipher else None


async def _access_with_backend(net, start_backend, engine: str = "haproxy", **access: str) -> NetRouter:  # type: ignore[no-untyped-def]
    east = net.router("east", engine=engine)
    east.doc["routerAccess"][0].update(access)
    east.connect("backend", [await start_backend("pod-east", east.host)])
    return await east.start()


async def test_access_chooses_aes128_gcm_and_resumes_sessions_from_its_cache(net, start_backend):
    east = await _access_with_backend(net, start_backend)
    ctx = _client_context(east)
    greeting, cipher, resumed, session = await asyncio.to_thread(_hop, east, ctx)
    assert (greeting, cipher, resumed) == ("pod-east", "TLS_AES_128_GCM_SHA256", False)
    assert session is not None
    for _ in range(3):      # each resumed connection brings a new session from the cache; any of them resumes
        greeting, cipher, resumed, session = await asyncio.to_thread(_hop, east, ctx, session)
        assert (greeting, cipher, resumed) == ("pod-east", "TLS_AES_128_GCM_SHA256", True)
    info = await east.info()
    assert int(info["SslFrontendSessionReuse_pct"]) >= 50, info["SslFrontendSessionReuse_pct"]


async def test_tls12_access_offers_only_forward_secret_aead_ciphers(net, start_backend):
    east = await _access_with_backend(net, start_backend, minTlsVersion="1.2")
    ctx = _client_context(east, tls12=True)
    greeting, cipher, _, _ = await asyncio.to_thread(_hop, east, ctx)
    assert (greeting, cipher) == ("pod-east", "ECDHE-ECDSA-AES128-GCM-SHA256")
    cbc = _client_context(east, tls12=True)
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA")   # forward secret, but not AEAD
    with pytest.raises(ssl.SSLError):
        await asyncio.to_thread(_hop, east, cbc)


@pytest.mark.parametrize("engine", ["rust", "haproxy"])
async def test_access_prefers_aes128_gcm_whatever_the_client_prefers(net, start_backend, engine):
    east = await _access_with_backend(net, start_backend, engine)
    ctx = _client_context(east)
    # the client asks for AES-256 and ChaCha20 first (OpenSSL's default order)
    assert await asyncio.to_thread(_cipher, east, ctx) == "TLS_AES_128_GCM_SHA256"


async def test_rust_access_admits_only_forward_secret_aead_ciphers_with_tls12(net, start_backend):
    east = await _access_with_backend(net, start_backend, "rust", minTlsVersion="1.2")
    ctx = _client_context(east, tls12=True)
    assert await asyncio.to_thread(_cipher, east, ctx) == "ECDHE-ECDSA-AES128-GCM-SHA256"
    cbc = _client_context(east, tls12=True)
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA")
    with pytest.raises(ssl.SSLError):
        await asyncio.to_thread(_cipher, east, cbc)
