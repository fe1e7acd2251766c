"""AttachedConnector end to end, as upstream's docs lay it out: the site in ``skupper-site``, the workload and its
AttachedConnector in ``team-a`` (no site there), the AttachedConnectorBinding in the site's namespace; a client of
a Listener in another site (East, which dialed the link) reaches team-a's Pods. Deleting the binding stops the
traffic, and both objects say why."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from e2e_support import greeting
from multisite_support import MultiSite, multisite_environment
from router_support import refused
from site_support import ECHO_IMAGE, GV, RESOURCES

SITE_NS, TEAM = "skupper-site", "team-a"
ECHO = {"app": "backend"}


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment(SITE_NS, "east") as environment:
        await environment.start_controllers()
        yield environment


async def test_a_workload_in_a_namespace_without_a_site_is_reached_through_its_binding(sites: MultiSite) -> None:
    site, east = sites[SITE_NS], sites["east"]
    api = site.api
    await api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}})
    await api.create("deployments.apps", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "backend", "namespace": TEAM},
        "spec": {"replicas": 2, "selector": {"matchLabels": ECHO}, "template": {"metadata": {"labels": ECHO}, "spec": {
            "containers": [{"name": "main", "image": ECHO_IMAGE, "ports": [{"containerPort": 7000}]}]}}}}, TEAM)
    await sites.create_site(SITE_NS, link_access="default")
    await sites.create_site("east", link_access=None)
    await east.create("Listener", "backend", {"routingKey": "team-a-backend", "host": "backend", "port": 7000})
    await sites.link_directly("east", SITE_NS)

    # the team's side alone: declared, waiting for the site's consent
    await api.create(RESOURCES["AttachedConnector"], {
        "apiVersion": GV, "kind": "AttachedConnector", "metadata": {"name": "backend", "namespace": TEAM},
        "spec": {"siteNamespace": SITE_NS, "port": 7000, "selector": "app=backend"}}, TEAM)

    async def attached_status(status: str, message: str | None = None) -> dict | None:
        obj = await api.get(RESOURCES["AttachedConnector"], "backend", TEAM)
        current = obj.get("status") or {}
        return current if current.get("status") == status and (
            message is None or current.get("message") == message) else None

    waiting = await site.wait_for(lambda: attached_status("Pending"), 30, "AttachedConnector Pending")
    assert waiting["message"] == ('No AttachedConnectorBinding "backend" in namespace "skupper-site" names '
                                  'namespace "team-a"')
    await east.wait_status("Listener", "backend", "Pending", "No matching connectors", within=30)

    # the site's side: bound; East's client reaches team-a's Pods
    await site.create("AttachedConnectorBinding", "backend",
                      {"connectorNamespace": TEAM, "routingKey": "team-a-backend"})
    team_pods, _ = await api.list("pods", TEAM, label_selector="app=backend")
    pod_names = {p["metadata"]["name"] for p in team_pods}
    bound = await site.wait_status("AttachedConnectorBinding", "backend", "Ready", "OK", within=30)
    assert bound["hasMatchingListener"] is True
    ready = await site.wait_for(lambda: attached_status("Ready", "OK"), 30, "AttachedConnector Ready")
    assert {p["name"] for p in ready["selectedPods"]} == pod_names and len(pod_names) == 2
    await east.wait_status("Listener", "backend", "Ready", "OK", within=30)
    service_ip = (await east.service("backend"))["spec"]["clusterIP"]
    first = await east.wait_for(lambda: greeting(service_ip, 7000), 15, "East's Service reaches team-a")
    answers = {first} | {await greeting(service_ip, 7000) for _ in range(7)}
    assert answers == pod_names

    # the binding goes: traffic stops, and both sides say why
    router_ip, router_port = await east.router_endpoint("backend", "backend")
    await site.delete("AttachedConnectorBinding", "backend")
    await east.wait_status("Listener", "backend", "Pending", "No matching connectors", within=30)
    await east.wait_for(lambda: refused(router_ip, router_port), 15, "East's router refuses")
    assert await greeting(service_ip, 7000) is None
    unbound = await site.wait_for(lambda: attached_status("Pending"), 30, "AttachedConnector Pending again")
    assert "No AttachedConnectorBinding" in unbound["message"]
    assert "selectedPods" not in unbound
