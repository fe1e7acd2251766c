"""TLS and exposePodsByName end to end on kubesim: a Listener terminating client TLS with its Secret, a Connector
originating TLS (CA check, client certificate, host name check) to its server, a missing Secret withholding only
that entity and reported until it appears; and one Service per backend Pod (named after it, reaching that Pod),
following the Pods."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from router_certs import TestCA
from router_support import refused
from site_support import ECHO_IMAGE, NS, SiteEnv, site_environment

from kubesim.testing.rawhttp import RawClient

ECHO = {"app": "echo"}


@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.start_controller()
        yield environment


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def create_secret(env: SiteEnv, name: str, type_: str, **files: Path) -> None:
    await env.api.create("secrets", {"apiVersion": "v1", "kind": "Secret", "type": type_,
                                     "metadata": {"name": name, "namespace": NS},
                                     "data": {key.replace("_", "."): _b64(path) for key, path in files.items()}}, NS)


async def first_line(ip: str, port: int, context: ssl.SSLContext | None = None,
                     server_hostname: str | None = None) -> str | None:
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(ip, port, ssl=context, server_hostname=server_hostname), 3)
    except (OSError, TimeoutError, ssl.SSLError):
        return None
    try:
        return (await asyncio.wait_for(reader.readline(), 3)).decode().strip() or None
    except (OSError, TimeoutError, ssl.SSLError):
        return None
    finally:
        writer.close()


async def test_listener_terminates_tls_once_its_secret_appears(env: SiteEnv, tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "pki")
    await env.create("Site", "west", {})
    await env.deployment("echo", ECHO_IMAGE, 1, ECHO)
    await env.create("Connector", "echo", {"routingKey": "echo", "selector": "app=echo", "port": 7000})
    await env.wait_status("Connector", "echo", "Pending", "No matching listeners")
    await env.create("Listener", "echo", {"routingKey": "echo", "host": "echo", "port": 443,
                                          "tlsCredentials": "echo-tls"})
    status = await env.wait_status("Listener", "echo", "Error", 'TLS credentials secret "echo-tls" not found')
    assert status["hasMatchingConnector"] is True
    await env.wait_status("Site", "west", "Ready", "OK", within=30)
    ip, port = await env.router_endpoint("echo", "echo")
    assert await refused(ip, port)        # the router listener is withheld; its Service and port are kept

    issued = ca.issue("echo", dns=["echo", f"echo.{NS}.svc.cluster.local"])
    await create_secret(env, "echo-tls", "kubernetes.io/tls", tls_crt=issued.cert, tls_key=issued.key,
                        ca_crt=ca.ca_file)
    await env.wait_status("Listener", "echo", "Ready", "OK")
    client = ssl.create_default_context(cafile=str(ca.ca_file))
    pod = (await env.ready_pods(ECHO))[0]["metadata"]["name"]
    assert await env.wait_for(lambda: first_line(ip, port, client, "echo"), 10, "TLS through the router") == pod

    # the router did that with a Role naming exactly its Secrets: its token reads nothing else
    await env.api.create("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tenant-data",
                                                                                      "namespace": NS},
                                     "data": {"password": base64.b64encode(b"hunter2").decode()}}, NS)
    token = env.sim.server.service_accounts.issue(NS, "skupper-router")
    secrets = f"/api/v1/namespaces/{NS}/secrets"
    async with RawClient(env.sim, token=token) as router:
        assert (await router.get(f"{secrets}/echo-tls"))[0] == 200
        assert (await router.get(f"{secrets}?fieldSelector=metadata.name%3Decho-tls"))[0] == 200
        status, body = await router.get(f"{secrets}/tenant-data")
        assert status == 403 and "hunter2" not in str(body)
        assert (await router.get(secrets))[0] == 403
        assert (await router.get(f"/api/v1/namespaces/{NS}/configmaps"))[0] == 403
    # a plain client is not let through: the router wants the handshake
    reader, writer = await asyncio.open_connection(ip, port)
    writer.write(b"plain\n")
    await writer.drain()
    assert await asyncio.wait_for(reader.read(100), 5) != pod.encode() + b"\n"
    writer.close()

    # a Secret of another type is refused with the reason
    await env.create("Listener", "odd", {"routingKey": "echo", "host": "odd", "port": 443, "tlsCredentials": "odd"})
    await create_secret(env, "odd", "kubernetes.io/basic-auth", tls_crt=issued.cert)
    await env.wait_status("Listener", "odd", "Error",
                          'TLS credentials secret "odd" has type "kubernetes.io/basic-auth": expected '
                          "kubernetes.io/tls or Opaque")


async def _tls_backend(ca: TestCA, host: str, require_client: bool) -> asyncio.Server:
    issued = ca.issue("server", dns=[host], ips=[host])   # the router checks an IP target against DNS names
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(issued.cert, issued.key)
    if require_client:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(ca.ca_file)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cert: Any = writer.get_extra_info("peercert")
        writer.write(f"client-cert={'yes' if cert else 'no'}\n".encode())
        await writer.drain()
        writer.close()

    return await asyncio.start_server(serve, host, 7443, ssl=context)


async def test_connector_originates_tls_with_client_certificate(env: SiteEnv, tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "pki")
    backend_ip = env.sim.address_block.client_ip(7)
    server = await _tls_backend(ca, backend_ip, require_client=True)
    try:
        await env.create("Site", "west", {})
        await env.create("Listener", "db", {"routingKey": "db", "host": "db", "port": 5432})
        await env.create("Connector", "db", {"routingKey": "db", "host": backend_ip, "port": 7443,
                                             "tlsCredentials": "db-client", "useClientCert": True,
                                             "verifyHostname": True})
        await env.wait_status("Connector", "db", "Error", 'TLS credentials secret "db-client" not found')
        await env.wait_status("Listener", "db", "Pending", "No matching connectors")
        client = ca.issue("router", client=True)
        await create_secret(env, "db-client", "Opaque", ca_crt=ca.ca_file, tls_crt=client.cert, tls_key=client.key)
        await env.wait_status("Connector", "db", "Ready", "OK")
        await env.wait_status("Listener", "db", "Ready", "OK")
        await env.wait_status("Site", "west", "Ready", "OK", within=30)
        ip, port = await env.router_endpoint("db", "db")
        assert await env.wait_for(lambda: first_line(ip, port), 10, "TLS to the server") == "client-cert=yes"
    finally:
        server.close()
        await server.wait_closed()


async def test_connector_secret_without_ca_is_reported(env: SiteEnv, tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "pki")
    issued = ca.issue("client", client=True)
    await env.create("Site", "west", {})
    await create_secret(env, "no-ca", "Opaque", tls_crt=issued.cert, tls_key=issued.key)
    await env.create("Connector", "db", {"routingKey": "db", "host": "10.0.0.1", "port": 5432,
                                         "tlsCredentials": "no-ca"})
    await env.wait_status("Connector", "db", "Error", 'TLS credentials secret "no-ca" has no ca.crt')


async def _service_names(env: SiteEnv) -> set[str]:
    items, _ = await env.api.list("services", NS)
    return {s["metadata"]["name"] for s in items}


async def test_expose_pods_by_name(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    await env.deployment("echo", ECHO_IMAGE, 3, ECHO)
    await env.create("Connector", "echo", {"routingKey": "echo", "selector": "app=echo", "port": 7000,
                                           "exposePodsByName": True})
    await env.create("Listener", "echo", {"routingKey": "echo", "host": "echo", "port": 7000,
                                          "exposePodsByName": True})
    pods = {p["metadata"]["name"] for p in await env.wait_ready_pods(ECHO, 3)}
    await env.wait_for(lambda: _has_services(env, pods | {"echo"}), 15, "one Service per Pod")
    await env.wait_status("Site", "west", "Ready", "OK", within=30)
    router = await env.router_pod()
    for pod in pods:
        service = await env.service(pod)
        assert service["spec"]["ports"][0]["port"] == 7000
        assert service["metadata"]["labels"]["internal.skupper.io/listener"] == "echo"
        target = service["spec"]["ports"][0]["targetPort"]
        answer = await env.wait_for(lambda target=target: first_line(router["status"]["podIP"], target), 10,
                                    f"Pod {pod} through its own Service")
        assert answer == pod

    # scaled down: the Services of the Pods that went are removed
    await env.api.patch("deployments.apps", "echo", {"spec": {"replicas": 1}}, namespace=NS)

    async def one_pod_service() -> set[str] | None:
        remaining = {p["metadata"]["name"] for p in await env.ready_pods(ECHO)}
        names = await _service_names(env)
        return names if len(remaining) == 1 and names == remaining | {"echo"} else None

    await env.wait_for(one_pod_service, 15, "only the remaining Pod's Service")


async def _has_services(env: SiteEnv, names: set[str]) -> bool:
    return await _service_names(env) == names
