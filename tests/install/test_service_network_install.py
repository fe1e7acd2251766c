"""The service network installed as a user installs it: ``helm template --set serviceNetwork.enabled=true | kubectl
apply`` into a bare kubesim whose nodes have the project's image, then the Skupper hello-world example applied with
kubectl, and nothing else from the test.

kubesim runs the site controller Pod of the chart (``service-network run controller`` with the Pod's environment and
ServiceAccount token) and enforces RBAC for that token. The test sees what a user would: the controller Pod Ready
and holding its Lease, the skupper.io CRDs applied by it, the Site, Connector and Listener Ready, a client reaching
the backend Pods through the Listener's Service and the router Pod the controller created, an AccessGrant whose
published URL is the controller Pod's grant server (TLS verified with the grant's CA), and every request of the controller's
ServiceAccount allowed by the chart's ClusterRole and leader-election Role (none refused).
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml
from rendered_install import CHART_DIR, REPO
from test_install_run import BIN, run, until

from devenv.image import load_project_image
from kubesim.auth.rbac import RbacAuthorizer, rules_allow
from kubesim.errors import ApiError
from kubesim.sim import KubeSim
from kubesim.testing.traffic import who_answers

NAMESPACE = "listener-operator"
ACCOUNT = f"system:serviceaccount:{NAMESPACE}:listener-operator-service-network-controller"
ROUTER_ACCOUNT = "system:serviceaccount:hello-world:skupper-router"
ROLE_LABEL = "app.kubernetes.io/role=service-network-controller"
CRDS = "customresourcedefinitions.apiextensions.k8s.io"
KINDS = {"Site": "sites.skupper.io", "Listener": "listeners.skupper.io", "Connector": "connectors.skupper.io"}


async def controller_pod(sim: KubeSim) -> dict[str, Any] | None:
    pods, _ = await sim.api.list("pods", NAMESPACE, label_selector=ROLE_LABEL)
    ready = [p for p in pods if not p["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]
    return ready[0] if len(ready) == 1 == len(pods) else None


async def all_ready(sim: KubeSim) -> dict[str, str] | None:
    statuses = {}
    for kind, resource in KINDS.items():
        try:
            obj = await sim.api.get(resource, "west" if kind == "Site" else "backend", "hello-world")
        except ApiError:
            return None
        statuses[kind] = (obj.get("status") or {}).get("status")
    return statuses if set(statuses.values()) == {"Ready"} else None


async def answers(address: str, port: int, count: int) -> list[str]:
    """Who answers ``count`` connections (a refused or failed one is not counted)."""
    found = []
    for _ in range(count * 3):
        if len(found) == count:
            break
        try:
            found.append(await who_answers(address, port, seconds=3))
        except OSError:
            await asyncio.sleep(0.2)
    return found


@pytest.fixture
async def sim() -> Any:
    # No plugin discovery by socket: the listener operator's driver registers through the chart's DaemonSet.
    async with KubeSim(nodes=1, discover_plugins=False) as sim:
        assert sim.cluster is not None
        load_project_image(sim.cluster.runtime)
        yield sim


async def test_the_chart_with_the_service_network_runs_the_site_controller_and_serves_a_listener(
        sim: KubeSim, tmp_path: Path) -> None:
    kubectl = [str(BIN / "kubectl"), "--kubeconfig", str(sim.kubeconfig_path), "--cache-dir", str(tmp_path / "c")]
    rendered = await run(str(BIN / "helm"), "template", "listener-operator", str(CHART_DIR), "--namespace", NAMESPACE,
                         "--set", "serviceNetwork.enabled=true", "--set", "serviceNetwork.grantServer.enabled=true")
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    await run(*kubectl, "create", "namespace", NAMESPACE)
    await run(*kubectl, "apply", "--server-side", "-f", "-", stdin=rendered)

    # The site controller Pod becomes Ready: it applied the skupper.io CRDs and holds its Lease.
    pod = await until(lambda: controller_pod(sim), 60, "a Ready site controller Pod")
    assert pod["spec"]["serviceAccountName"] == "listener-operator-service-network-controller"
    (container,) = pod["spec"]["containers"]
    assert (container["command"], container["args"]) == (["service-network"], ["run", "controller"])
    for resource in KINDS.values():
        crd = await sim.api.get(CRDS, resource)
        assert {m["manager"] for m in crd["metadata"]["managedFields"]} == {"service-network-controller"}
    lease = await until(lambda: _lease_holder(sim), 30, "the site controller's Lease")
    assert lease == pod["metadata"]["name"]
    acquired = await _lease_renewed(sim)

    # A user applies the Skupper hello-world example: Site, backend Deployment, Connector, Listener.
    await run(*kubectl, "apply", "-f", str(REPO / "examples" / "service-network"))
    assert await until(lambda: all_ready(sim), 90, "Site, Connector and Listener Ready")
    site = await sim.api.get(KINDS["Site"], "west", "hello-world")
    assert site["status"]["controller"]["namespace"] == NAMESPACE

    # A client connects to the Listener's Service: kube-proxy -> the router Pod -> a backend Pod, which answers.
    service = await sim.api.get("services", "backend", "hello-world")
    assert service["spec"]["selector"]["skupper.io/component"] == "router"
    backends, _ = await sim.api.list("pods", "hello-world", label_selector="app=backend")
    names = {p["metadata"]["name"] for p in backends}
    answered = await answers(service["spec"]["clusterIP"], 8080, 6)
    assert len(answered) == 6 and set(answered) <= names, (answered, names)
    assert len(set(answered)) > 1, answered  # the router balances new connections over the backend Pods

    # An AccessGrant: its URL is the grant server in the controller Pod (the chart's port), which answers TLS that
    # the grant's CA verifies (the grant stays Pending: the example's Site has no linkAccess).
    await sim.api.create("accessgrants.skupper.io", {
        "apiVersion": "skupper.io/v2alpha1", "kind": "AccessGrant",
        "metadata": {"name": "for-east", "namespace": "hello-world"}, "spec": {"redemptionsAllowed": 1}}, "hello-world")
    grant = await until(lambda: _published_grant(sim), 30, "the AccessGrant's url, code and CA")
    pod_ip = (await sim.api.get("pods", pod["metadata"]["name"], NAMESPACE))["status"]["podIP"]
    assert grant["url"].startswith(f"https://{pod_ip}:9090/"), grant
    context = ssl.create_default_context(cadata=grant["ca"])
    _reader, writer = await asyncio.wait_for(
        asyncio.open_connection(pod_ip, 9090, ssl=context, server_hostname=pod_ip), 10)
    writer.close()
    await writer.wait_closed()

    # The leader renews its Lease (an update) while it works, however quickly the rest went.
    await until(lambda: _lease_renewed(sim, after=acquired), 30, "a renewal of the site controller's Lease")

    # RBAC: every request of the site controller's ServiceAccount was allowed by the chart's roles (none refused),
    # including the CRD maintenance, the router objects, the Service, the statuses, the Lease and the Events; the
    # router Pod's ServiceAccount works within the Role the controller gave it.
    authorizer = sim.server.authorizer
    assert isinstance(authorizer, RbacAuthorizer)
    assert authorizer.denied_for(ACCOUNT) == []
    assert authorizer.denied_for(ROUTER_ACCOUNT) == []
    rules = [rule for obj in objects if obj["kind"] in ("ClusterRole", "Role")
             and obj["metadata"]["name"].startswith("listener-operator-service-network-controller")
             for rule in obj["rules"]]
    used = authorizer.used[ACCOUNT]
    for verb, group, resource in used:
        assert rules_allow(rules, verb, group, resource, None), (verb, group, resource)
    assert {
        ("patch", "apiextensions.k8s.io", "customresourcedefinitions"),  # CRD maintenance
        ("watch", "skupper.io", "sites"), ("patch", "skupper.io", "listeners/status"),
        ("patch", "apps", "deployments"), ("patch", "rbac.authorization.k8s.io", "roles"),
        ("patch", "", "configmaps"), ("create", "", "services"),
        ("create", "coordination.k8s.io", "leases"), ("update", "coordination.k8s.io", "leases"),
    } <= used, sorted(used)
    assert ("watch", "", "configmaps") in authorizer.used[ROUTER_ACCOUNT]  # its router document


async def _published_grant(sim: KubeSim) -> dict[str, Any] | None:
    grant = await sim.api.get("accessgrants.skupper.io", "for-east", "hello-world")
    status: dict[str, Any] = grant.get("status") or {}
    return status if status.get("url") and status.get("code") and status.get("ca") else None


async def _lease_renewed(sim: KubeSim, after: str | None = None) -> str | None:
    """The site controller's Lease's renewTime, once it differs from ``after``."""
    lease = await sim.api.get("leases.coordination.k8s.io", "service-network-controller", NAMESPACE)
    renewed = lease["spec"].get("renewTime")
    return str(renewed) if renewed and renewed != after else None


async def _lease_holder(sim: KubeSim) -> str | None:
    try:
        lease = await sim.api.get("leases.coordination.k8s.io", "service-network-controller", NAMESPACE)
    except ApiError:
        return None
    holder = lease["spec"].get("holderIdentity")
    return str(holder) if holder else None
