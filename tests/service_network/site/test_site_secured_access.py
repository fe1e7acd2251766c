"""SecuredAccess: selected Pods' ports exposed through an access type with a server certificate of the issuer:
the Service (ours, owned), the Certificate and its Secret (the endpoint's names, signed by the issuer), the status
(endpoints per port, the CA clients verify with), bytes through the published address to the selected Pod; a
Service that is not ours is never taken over; bad specs are errors naming the field."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
from e2e_support import greeting
from site_support import ECHO_IMAGE, GV, SiteEnv, site_environment

from service_network.site import pki
from service_network.site.secured import compose_secured_access

SECURED = "securedaccesses.skupper.io"


def secured(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": GV, "kind": "SecuredAccess",
            "metadata": {"name": name, "namespace": "west", "uid": f"uid-{name}"},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "https", "port": 8443, "targetPort": 7000}],
                     **spec}}


@pytest.mark.parametrize(("spec", "message"), [
    ({"accessType": "route"}, 'access type "route" is not supported here (supported: loadbalancer, nodeport, local)'),
    ({"ports": []}, "spec.ports must have 1 to 64 entries"),
    ({"ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]}, 'spec.ports[1].name "a" is used twice'),
    ({"ports": [{"name": "a", "port": 70000}]}, "spec.ports[0]: port 70000 is not between 1 and 65535"),
    ({"selector": {}}, "spec.selector must select Pods (at least one label)"),
])
def test_bad_specs_are_errors(spec: dict[str, Any], message: str) -> None:
    plan = compose_secured_access(secured(**spec), {}, [])
    assert (plan.configured.reason, plan.configured.message, plan.service) == ("Error", message, None)


def test_the_service_and_certificate_composed() -> None:
    plan = compose_secured_access(secured(issuer="team-ca", accessType="local"), {}, [])
    assert plan.service is not None and plan.certificate is not None
    assert plan.service["spec"] == {"type": "ClusterIP", "selector": {"app": "web"}, "ports": [
        {"name": "https", "port": 8443, "targetPort": 7000, "protocol": "TCP"}]}
    assert plan.certificate["spec"]["ca"] == "team-ca" and plan.certificate["spec"]["server"] is True
    assert "web.west.svc" in plan.certificate["spec"]["hosts"]
    assert plan.resolved is not None and plan.resolved.message == "waiting for Service web"
    foreign = {"metadata": {"name": "web", "namespace": "west"}}
    conflict = compose_secured_access(secured(), {"web": foreign}, [])
    assert conflict.configured.message == "Service web already exists in namespace" and conflict.service is None


@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.start_controller()
        yield environment


async def test_a_secured_access_publishes_the_pods_with_a_certificate_of_its_issuer(env: SiteEnv) -> None:
    api, ns = env.api, env.namespace
    await api.create("certificates.skupper.io", {"apiVersion": GV, "kind": "Certificate",
                                                 "metadata": {"name": "team-ca", "namespace": ns},
                                                 "spec": {"ca": "", "subject": "team-ca", "signing": True}}, ns)
    await env.deployment("web", ECHO_IMAGE, 1, {"app": "web"})
    pod = (await env.wait_ready_pods({"app": "web"}, 1))[0]["metadata"]["name"]
    await api.create(SECURED, {"apiVersion": GV, "kind": "SecuredAccess", "metadata": {"name": "web", "namespace": ns},
                               "spec": {"selector": {"app": "web"}, "issuer": "team-ca",
                                        "ports": [{"name": "https", "port": 8443, "targetPort": 7000}]}}, ns)

    async def ready() -> dict[str, Any] | None:
        status = (await api.get(SECURED, "web", ns)).get("status") or {}
        return status if status.get("status") == "Ready" else None
    status = await env.wait_for(ready, 30, "SecuredAccess Ready")
    [endpoint] = status["endpoints"]
    assert (endpoint["name"], endpoint["port"]) == ("https", "8443")
    host = endpoint["host"]
    service = await api.get("services", "web", ns)
    assert service["spec"]["type"] == "LoadBalancer" and service["spec"]["selector"] == {"app": "web"}
    assert [r["kind"] for r in service["metadata"]["ownerReferences"]] == ["SecuredAccess"]

    ca = await api.get("secrets", "team-ca", ns)
    ca_pem = base64.b64decode(ca["data"]["tls.crt"])
    assert status["ca"].encode() == ca_pem
    certificate = await api.get("certificates.skupper.io", "web", ns)
    assert [r["kind"] for r in certificate["metadata"]["ownerReferences"]] == ["SecuredAccess"]
    secret = await api.get("secrets", "web", ns)
    cert = base64.b64decode(secret["data"]["tls.crt"])
    assert pki.signed_by(cert, ca_pem)
    info = pki.cert_info(cert)
    assert host in info.ip_addresses | info.dns_names and "web.west.svc" in info.dns_names

    # bytes through the published address reach the selected Pod
    assert await env.wait_for(lambda: greeting(host, 8443), 20, "the endpoint answers") == pod

    # deleted: its Service and Certificate go with it (owner references)
    await api.delete(SECURED, "web", ns)

    async def gone() -> bool:
        services, _ = await api.list("services", ns)
        certificates, _ = await api.list("certificates.skupper.io", ns)
        return not any(s["metadata"]["name"] == "web" for s in services) and not any(
            c["metadata"]["name"] == "web" for c in certificates)
    await env.wait_for(gone, 30, "the Service and Certificate deleted with the SecuredAccess")
