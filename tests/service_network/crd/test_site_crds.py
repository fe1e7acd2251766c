"""The ``skupper.io/v2alpha1`` CRDs: upstream's names, short names, scope, required fields and printer columns;
accepted by the API server (kubesim checks structural schemas as the apiserver does); manifests written for Skupper
apply unchanged; ``kubectl get`` prints upstream's columns; ``service-network crd`` prints them."""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import AsyncIterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubesim.errors import ApiError
from kubesim.sim import KubeSim
from service_network.cli import main as cli_main
from service_network.crd.generate import all_crds, installed_crds, network_observer_crd

CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"

UPSTREAM = {
    # kind: (plural, short names, printer columns)
    "Site": ("sites", ["st"], ["Status", "Sites In Network", "Message"]),
    "Listener": ("listeners", ["lnr"], ["Routing Key", "Port", "Host", "Status", "Has Matching Connector",
                                        "Message"]),
    "Connector": ("connectors", ["cnr"], ["Routing Key", "Port", "Host", "Selector", "Status",
                                          "Has Matching Listener", "Message"]),
    "RouterAccess": ("routeraccesses", [], ["Status", "Message"]),
    "Link": ("links", ["ln"], ["Status", "Remote Site", "Message"]),
    "AccessGrant": ("accessgrants", ["grant", "gr"], ["Redemptions Allowed", "Redemptions Made", "Expiration",
                                                      "Status", "Message"]),
    "AccessToken": ("accesstokens", ["token", "to"], ["URL", "Redeemed", "Status", "Message"]),
    "AttachedConnector": ("attachedconnectors", ["acnr"], ["Port", "Selector", "Site Namespace", "Status"]),
    "AttachedConnectorBinding": ("attachedconnectorbindings", ["acnrb"], ["Routing Key", "Connector Namespace",
                                                                          "Status", "Has Matching Listener"]),
    "MultiKeyListener": ("multikeylisteners", [], ["Status", "Message", "HasDestination"]),
    "Certificate": ("certificates", [], ["CA", "Server", "Client", "Signing", "Status", "Expiration", "Message"]),
    "SecuredAccess": ("securedaccesses", [], ["Status", "Message"]),
}

MANIFESTS = """
apiVersion: skupper.io/v2alpha1
kind: Site
metadata: {name: west, namespace: west}
spec: {linkAccess: default, settings: {router-logging: info}}
---
apiVersion: skupper.io/v2alpha1
kind: Listener
metadata: {name: backend, namespace: west}
spec: {routingKey: backend, host: backend, port: 8080, tlsCredentials: tls, type: tcp, observer: auto,
       exposePodsByName: false, settings: {a: b}}
---
apiVersion: skupper.io/v2alpha1
kind: Connector
metadata: {name: backend, namespace: west}
spec: {routingKey: backend, selector: app=backend, port: 8080, includeNotReadyPods: true, useClientCert: false,
       verifyHostname: true, tlsCredentials: ca, exposePodsByName: true}
---
apiVersion: skupper.io/v2alpha1
kind: RouterAccess
metadata: {name: skupper-router, namespace: west}
spec: {roles: [{name: inter-router, port: 55671}, {name: edge, port: 45671}], tlsCredentials: skupper-site-server,
       issuer: skupper-site-ca, generateTlsCredentials: true, accessType: loadbalancer}
---
apiVersion: skupper.io/v2alpha1
kind: Link
metadata: {name: to-east, namespace: west}
spec: {endpoints: [{name: inter-router, host: east.example, port: "55671"}], tlsCredentials: to-east, cost: 1}
---
apiVersion: skupper.io/v2alpha1
kind: AccessGrant
metadata: {name: grant, namespace: west}
spec: {redemptionsAllowed: 2, expirationWindow: 1h}
---
apiVersion: skupper.io/v2alpha1
kind: AccessToken
metadata: {name: token, namespace: west}
spec: {url: "https://grants.example:9090/abc", code: secret, ca: "-----BEGIN CERTIFICATE-----", linkCost: 2}
"""


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as server:
        for crd in all_crds():
            await server.api.create(CRD_RESOURCE, crd)
        await server.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": "west"}})
        yield server


def keys_in(node: Any) -> set[str]:
    """Every mapping key anywhere in ``node``."""
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in keys_in(v)}
    if isinstance(node, list):
        return {k for v in node for k in keys_in(v)}
    return set()


def test_names_short_names_and_columns_are_upstreams() -> None:
    found = {}
    for crd in all_crds():
        spec = crd["spec"]
        version = spec["versions"][0]
        assert (spec["group"], version["name"], spec["scope"]) == ("skupper.io", "v2alpha1", "Namespaced")
        assert version["subresources"] == {"status": {}}
        found[spec["names"]["kind"]] = (spec["names"]["plural"], spec["names"].get("shortNames", []),
                                        [c["name"] for c in version["additionalPrinterColumns"]])
    assert found == UPSTREAM


def test_required_fields_and_one_of() -> None:
    schemas = {c["spec"]["names"]["kind"]: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
               for c in all_crds()}
    spec = {kind: s["properties"]["spec"] for kind, s in schemas.items()}
    assert spec["Listener"]["required"] == ["routingKey", "host", "port"]
    assert spec["Connector"]["required"] == ["routingKey", "port"]
    assert spec["Connector"]["oneOf"] == [{"required": ["selector"]}, {"required": ["host"]}]
    assert spec["Listener"]["properties"]["observer"]["enum"] == ["auto", "none", "http1", "http2"]
    assert spec["AccessToken"]["required"] == ["url", "code", "ca"]
    assert spec["RouterAccess"]["required"] == ["roles", "tlsCredentials"]
    assert spec["RouterAccess"]["properties"]["roles"]["items"]["required"] == ["name"]     # as upstream
    assert spec["Link"]["required"] == ["endpoints"]
    # Go's omitempty fields: optional, never nullable, no defaults stored by the API server
    assert not {"nullable", "default"} & keys_in(list(schemas.values()))
    condition = schemas["Listener"]["properties"]["status"]["properties"]["conditions"]["items"]
    assert condition["required"] == ["type", "status", "lastTransitionTime", "reason", "message"]


async def test_crds_accepted_and_upstream_manifests_apply(sim: KubeSim) -> None:
    for crd in all_crds():
        stored = await sim.api.get(CRD_RESOURCE, crd["metadata"]["name"])
        established = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
        assert established.get("Established") == "True"
    for document in yaml.safe_load_all(MANIFESTS):
        plural = UPSTREAM[document["kind"]][0]
        created = await sim.api.create(f"{plural}.skupper.io", document, "west")
        assert created["spec"] == document["spec"]          # nothing pruned, nothing defaulted


@pytest.mark.parametrize("spec", [
    {"routingKey": "k", "port": 1, "host": "h", "selector": "app=x"},
    {"routingKey": "k", "port": 1},
])
async def test_connector_needs_exactly_one_of_host_and_selector(sim: KubeSim, spec: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as refused:
        await sim.api.create("connectors.skupper.io", {"apiVersion": "skupper.io/v2alpha1", "kind": "Connector",
                                                       "metadata": {"name": "c", "namespace": "west"},
                                                       "spec": spec}, "west")
    assert refused.value.code == 422


async def test_a_hand_set_grant_code_shorter_than_a_generated_one_is_refused(sim: KubeSim) -> None:
    def grant(name: str, code: str) -> dict[str, Any]:
        return {"apiVersion": "skupper.io/v2alpha1", "kind": "AccessGrant",
                "metadata": {"name": name, "namespace": "west"}, "spec": {"code": code}}
    with pytest.raises(ApiError) as refused:
        await sim.api.create("accessgrants.skupper.io", grant("short", "x" * 23), "west")
    assert refused.value.code == 422
    assert "spec.code" in str(refused.value) and "24" in str(refused.value)
    created = await sim.api.create("accessgrants.skupper.io", grant("long", "x" * 24), "west")
    assert created["spec"]["code"] == "x" * 24


async def test_a_router_access_role_without_a_name_is_refused(sim: KubeSim) -> None:
    with pytest.raises(ApiError) as refused:
        await sim.api.create("routeraccesses.skupper.io", {
            "apiVersion": "skupper.io/v2alpha1", "kind": "RouterAccess", "metadata": {"name": "a", "namespace": "west"},
            "spec": {"roles": [{"port": 55671}], "tlsCredentials": "skupper-site-server"}}, "west")
    assert refused.value.code == 422 and "spec.roles[0].name" in str(refused.value)


async def test_kubectl_prints_upstream_columns(sim: KubeSim, tmp_path: Path) -> None:
    await sim.api.create("listeners.skupper.io", {"apiVersion": "skupper.io/v2alpha1", "kind": "Listener",
                                                  "metadata": {"name": "backend", "namespace": "west"},
                                                  "spec": {"routingKey": "backend", "host": "backend",
                                                           "port": 8080}}, "west")
    kubectl = Path(sys.executable).parent / "kubectl"
    process = await asyncio.create_subprocess_exec(
        str(kubectl), f"--kubeconfig={sim.kubeconfig_path}", f"--cache-dir={tmp_path / 'cache'}", "get", "lnr",
        "-n", "west", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={"HOME": str(tmp_path)})
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    header, row = out.decode().splitlines()[:2]
    assert header.split() == ["NAME", "ROUTING", "KEY", "PORT", "HOST", "STATUS", "HAS", "MATCHING", "CONNECTOR",
                              "MESSAGE"]
    assert row.split() == ["backend", "backend", "8080", "backend"]


def test_crd_command_prints_the_crds() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli_main(["crd"]) == 0
    assert list(yaml.safe_load_all(out.getvalue())) == installed_crds() == [*all_crds(), network_observer_crd()]


def test_the_network_observer_crd_is_upstreams() -> None:
    crd = network_observer_crd()
    assert crd["metadata"]["name"] == "networkobservers.observability.skupper.io"
    assert (crd["spec"]["group"], crd["spec"]["scope"]) == ("observability.skupper.io", "Namespaced")
    assert crd["spec"]["names"] == {"kind": "NetworkObserver", "plural": "networkobservers",
                                    "singular": "networkobserver", "listKind": "NetworkObserverList"}
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"], version["subresources"]) == (
        "v2alpha1", True, True, {"status": {}})
    properties = version["schema"]["openAPIV3Schema"]["properties"]
    for part in ("spec", "status"):
        assert properties[part] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
