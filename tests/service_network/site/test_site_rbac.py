"""The site controller needs exactly the access of ``CONTROLLER_RULES`` plus CRD maintenance's rule (what the chart's
ClusterRole and leader-election Role grant, ``service_network.rbac``): run with an authorizer allowing only those
rules, through leader election, every kind of write it makes (CRDs, router objects, the ConfigMap, a Service created,
changed and deleted, statuses (a Link's too), Events), nothing is denied. The router's Role: reads, and one write
(its network status)."""

from __future__ import annotations

from pathlib import Path

from site_support import CRD_RESOURCE, NS, RESOURCES, SiteEnv

from kubesim.auth.rbac import ClusterRoleAuthorizer, rules_allow
from kubesim.sim import KubeSim
from service_network.crd.generate import all_crds
from service_network.rbac import cluster_role_rules, leader_election_rules
from service_network.site.resources import controller_rules, role_rules


async def test_controller_runs_with_its_cluster_role_only(tmp_path: Path) -> None:
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as sim:
        for crd in all_crds():
            await sim.api.create(CRD_RESOURCE, crd)
        await sim.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        authorizer = ClusterRoleAuthorizer(cluster_role_rules(maintain_crds=True) + leader_election_rules(),
                                           sim.server.store)
        sim.server.authorizer = authorizer
        env = SiteEnv(sim)
        controller = await env.start_controller(leader_elect=True, leader_election_namespace=NS,
                                                lease_duration=3.0, renew_deadline=2.0, retry_period=0.5)
        try:
            await env.create("Site", "west", {})
            await env.create("Listener", "db", {"routingKey": "db", "host": "db", "port": 5432,
                                                "tlsCredentials": "missing"})
            await env.create("Connector", "db", {"routingKey": "db", "host": "10.1.2.3", "port": 5432})
            await env.wait_status("Listener", "db", "Error", 'TLS credentials secret "missing" not found')
            await env.wait_status("Connector", "db", "Pending", "No matching listeners")   # its listener is withheld
            await env.wait_status("Site", "west", "Pending", "No router pod is ready")
            await env.create("Link", "to-east", {"endpoints": [{"name": "inter-router", "host": "127.0.70.9",
                                                                "port": "55671"}], "tlsCredentials": "east"})
            await env.wait_status("Link", "to-east", "Error", 'TLS credentials secret "east" not found')
            obj = await env.get("Listener", "db")
            obj["spec"]["port"] = 5433
            await sim.api.update(RESOURCES["Listener"], obj)                         # Service patched
            await env.wait_for(lambda: _service_port(env, 5433), 10, "Service port 5433")
            await sim.api.delete(RESOURCES["Listener"], "db", NS)                    # Service deleted
            await env.wait_for(lambda: _no_service(env), 10, "Service db deleted")
            events, _ = await sim.api.list("events.events.k8s.io", NS)
            assert any(e.get("reason") == "TlsCredentialsNotFound" for e in events)
            # a NetworkObserver: its objects, CA, password Secret and status (the Role it grants reads Pods)
            await sim.api.create("networkobservers.observability.skupper.io", {
                "apiVersion": "observability.skupper.io/v2alpha1", "kind": "NetworkObserver",
                "metadata": {"name": "network-observer", "namespace": NS}, "spec": {}}, NS)
            await env.wait_for(lambda: _deployed(env), 20, "the NetworkObserver Deployed")
        finally:
            await controller.stop()
        assert authorizer.denied == [], authorizer.denied
        used = {(resource, verb) for verb, _, resource in authorizer.used}
        assert {("services", "create"), ("services", "patch"), ("services", "delete"), ("configmaps", "patch"),
                ("deployments", "patch"), ("roles", "patch"), ("listeners/status", "patch"),
                ("links/status", "patch"), ("leases", "update"), ("customresourcedefinitions", "patch"),
                ("networkobservers/status", "patch"), ("certificates", "create"), ("secrets", "create")} <= used


async def _deployed(env: SiteEnv) -> bool:
    obj = await env.api.get("networkobservers.observability.skupper.io", "network-observer", NS)
    return any(c["type"] == "Deployed" and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


def test_router_role_reads_its_configuration_and_writes_only_the_network_status() -> None:
    rules = role_rules(["link-east", "db-tls"])
    for verb in ("get", "list", "watch"):
        assert rules_allow(rules, verb, "", "configmaps", "skupper-router")
        assert rules_allow(rules, verb, "", "configmaps", "skupper-router-2")
        assert rules_allow(rules, verb, "", "secrets", "link-east")
        assert rules_allow(rules, verb, "", "secrets", "db-tls")
        assert not rules_allow(rules, verb, "", "secrets", "tenant-data")         # only the Secrets it names
        assert not rules_allow(rules, verb, "", "secrets", None)                  # never the whole collection
        assert not rules_allow(rules, verb, "", "configmaps", "app-settings")
    # no TLS profile from a Secret: no Secret at all (an empty resourceNames would allow every one)
    assert not any(rules_allow(role_rules(), "get", "", "secrets", name) for name in ("link-east", "x"))
    assert rules_allow(rules, "patch", "", "configmaps", "skupper-network-status")
    assert not rules_allow(rules, "patch", "", "configmaps", "skupper-router")       # its own document: never
    assert not rules_allow(rules, "create", "", "configmaps", "skupper-network-status")
    assert not rules_allow(rules, "update", "", "configmaps", "skupper-network-status")
    assert not rules_allow(rules, "delete", "", "configmaps", "skupper-network-status")
    assert not any(rules_allow(rules, verb, "", "secrets", "x") for verb in ("create", "patch", "update", "delete"))
    # the controller may grant it (RBAC escalation check): its ClusterRole covers every rule of the router's Role
    assert rules_allow(controller_rules(), "patch", "", "configmaps", "skupper-network-status")


async def _service_port(env: SiteEnv, port: int) -> bool:
    return [p["port"] for p in (await env.service("db"))["spec"]["ports"]] == [port]


async def _no_service(env: SiteEnv) -> bool:
    services, _ = await env.api.list("services", NS)
    return not services
