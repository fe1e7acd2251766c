"""TLS at the router: termination at a Listener, origination to a target (CA verification, client certificate
only with useClientCert, host name checked only with verifyHostname), missing material reported and withheld."""

from __future__ import annotations

import asyncio
import ssl

from router_certs import TestCA
from router_support import apply, document, free_port, loopback, refused, running_router, wait_until


def _server_context(ca: TestCA, name: str, *, dns: list[str] = (), ips: list[str] = (),
                    require_client: bool = False) -> ssl.SSLContext:
    issued = ca.issue(name, dns=dns, ips=ips)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(issued.cert, issued.key)
    if require_client:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(ca.ca_file)
    return ctx


async def _peer_report(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Tell the client whether the router presented a client certificate, then echo."""
    cert = writer.get_extra_info("peercert")
    writer.write(f"client-cert={'yes' if cert else 'no'}\n".encode())
    await writer.drain()
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()


async def _first_line(host: str, port: int, context: ssl.SSLContext | None = None,
                      server_hostname: str | None = None) -> str:
    """The first line the client reads; "" when the router closed or reset the connection (its target refused)."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=context, server_hostname=server_hostname), 5)
    try:
        return (await asyncio.wait_for(reader.readline(), 5)).decode().strip()
    except ConnectionResetError:
        return ""
    finally:
        writer.close()


async def test_listener_terminates_tls(state_dir, start_backend, tmp_path):
    ca = TestCA(tmp_path / "pki")
    host = loopback()
    port = free_port(host)
    router_cert = ca.issue("router", dns=["backend.west.test"], ips=[host])
    backend = await start_backend("plain-pod")
    doc = document(
        tls_profiles=[{"name": "listener-tls", "files": {"cert": str(router_cert.cert), "key": str(router_cert.key),
                                                           "ca": str(ca.ca_file)}}],
        listeners=[{"name": "backend", "routingKey": "k", "host": host, "port": port, "tlsProfile": "listener-tls"}],
        connectors=[{"name": "c", "routingKey": "k", "port": backend.port,
                     "targets": [{"host": backend.host}]}])
    async with running_router(state_dir, doc):
        client = ssl.create_default_context(cafile=str(ca.ca_file))
        assert await _first_line(host, port, client, "backend.west.test") == "plain-pod"
        # a plain TCP client gets no greeting from the backend: the router wants a TLS handshake
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"not tls\r\n\r\n")
        assert b"plain-pod" not in await asyncio.wait_for(reader.read(), 5)
        writer.close()


async def test_target_tls_origination(state_dir, start_backend, tmp_path):
    ca = TestCA(tmp_path / "pki")
    host = loopback()
    port = free_port(host)
    backend_host = loopback()
    # the backend requires a client certificate signed by the CA; its own certificate names backend.test only
    server_ctx = _server_context(ca, "backend", dns=["backend.test"], require_client=True)
    secure = await start_backend("tls-pod", backend_host, greet=False, handler=_peer_report, ssl_context=server_ctx)
    client = ca.issue("router-client", client=True)
    profile = {"name": "to-backend", "files": {"ca": str(ca.ca_file), "cert": str(client.cert),
                                                "key": str(client.key)}}

    def doc(**connector: object) -> dict:
        return document(tls_profiles=[profile],
                        listeners=[{"name": "l", "routingKey": "k", "host": host, "port": port}],
                        connectors=[{"name": "c", "routingKey": "k", "port": secure.port, "tlsProfile": "to-backend",
                                     "targets": [{"host": backend_host}], **connector}])

    async with running_router(state_dir, doc(useClientCert=True, verifyHostname=False)) as router:
        assert await _first_line(host, port) == "client-cert=yes"
        # without useClientCert the router presents no certificate: this backend refuses the handshake
        await apply(router, doc(useClientCert=False, verifyHostname=False))
        assert await _first_line(host, port) == ""
        # verifyHostname: the target is addressed by IP, the certificate names backend.test: refused
        await apply(router, doc(useClientCert=True, verifyHostname=True))
        assert await _first_line(host, port) == ""


async def test_verify_hostname_with_a_dns_target(state_dir, start_backend, tmp_path):
    """A target named by DNS (localhost): SNI and the certificate check use that name."""
    ca = TestCA(tmp_path / "pki")
    host = loopback()
    port = free_port(host)
    good = await start_backend("named-pod", "127.0.0.1", greet=False, handler=_peer_report,
                               ssl_context=_server_context(ca, "localhost", dns=["localhost"]))
    doc = document(tls_profiles=[{"name": "ca-only", "files": {"ca": str(ca.ca_file)}}],
                   listeners=[{"name": "l", "routingKey": "k", "host": host, "port": port}],
                   connectors=[{"name": "c", "routingKey": "k", "port": good.port, "tlsProfile": "ca-only",
                                "targets": [{"host": "localhost"}]}])
    async with running_router(state_dir, doc):
        assert await _first_line(host, port) == "client-cert=no"


async def test_missing_tls_file_withholds_listener_and_says_why(state_dir, start_backend, tmp_path):
    ca = TestCA(tmp_path / "pki")
    host = loopback()
    port = free_port(host)
    backend = await start_backend("pod")
    missing_key = tmp_path / "later" / "router.key"
    issued = ca.issue("router", ips=[host])
    doc = document(
        tls_profiles=[{"name": "listener-tls", "files": {"cert": str(issued.cert), "key": str(missing_key)}}],
        listeners=[{"name": "secure", "routingKey": "k", "host": host, "port": port, "tlsProfile": "listener-tls"}],
        connectors=[{"name": "c", "routingKey": "k", "port": backend.port, "targets": [{"host": backend.host}]}])
    async with running_router(state_dir, doc) as router:
        problems = router.problems
        assert any("listeners[0] (listener 'secure') withheld" in p for p in problems), problems
        assert any(f"TLS profile 'listener-tls' key file {missing_key} does not exist" in p for p in problems)
        assert await refused(host, port)
        # the key appears: the same document now applies and the listener serves TLS
        missing_key.parent.mkdir()
        missing_key.write_bytes(issued.key.read_bytes())
        assert await apply(router, doc) == []
        client = ssl.create_default_context(cafile=str(ca.ca_file))
        assert await wait_until(lambda: _first_line(host, port, client, host), what="TLS listener") == "pod"
