"""Every error case of the site controller, end to end on kubesim: what upstream reports (no active Site, a second
Site, a foreign Service, a duplicate host and port, a Connector without target) and what it misses (an invalid
host, a Service the API refuses to write, a foreign Service being modified), each with the status message a user
reads, and recovery once the cause is gone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from site_support import NS, SiteEnv, site_environment

from kubesim.errors import ApiError


@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.start_controller()
        yield environment


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


async def services(env: SiteEnv) -> dict[str, dict[str, Any]]:
    items, _ = await env.api.list("services", NS)
    return {s["metadata"]["name"]: s for s in items}


async def test_no_active_site_then_a_site(env: SiteEnv) -> None:
    await env.create("Listener", "db", {"routingKey": "db", "host": "db", "port": 5432})
    await env.create("Connector", "db", {"routingKey": "db", "host": "10.1.2.3", "port": 5432})
    for kind in ("Listener", "Connector"):
        status = await env.wait_status(kind, "db", "Error", "No active site in namespace")
        configured = condition(status, "Configured")
        assert (configured["status"], configured["reason"]) == ("False", "Error")
        ready = condition(status, "Ready")
        assert (ready["status"], ready["reason"], ready["message"]) == ("False", "Error",
                                                                       "No active site in namespace")
        assert configured["observedGeneration"] == 1
    assert "db" not in await services(env)

    await env.create("Site", "west", {})
    await env.wait_status("Listener", "db", "Ready", "OK")
    await env.wait_status("Connector", "db", "Ready", "OK")
    assert [p["port"] for p in (await env.service("db"))["spec"]["ports"]] == [5432]


async def test_second_site_is_inactive(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    await env.wait_status("Site", "west", "Ready", "OK", within=30)
    await env.create("Site", "other", {})
    status = await env.wait_status("Site", "other", "Error",
                                   "An active site already exists in the namespace (west)")
    assert "Running" not in {c["type"] for c in status["conditions"]}
    router = await env.api.get("configmaps", "skupper-router", NS)
    assert [r["name"] for r in router["metadata"]["ownerReferences"]] == ["west"]

    # The controller restarted: the owner of the router ConfigMap stays active.
    await env.controllers[0].stop()
    await env.start_controller()
    await env.wait_status("Site", "west", "Ready", "OK")
    await env.wait_status("Site", "other", "Error", "An active site already exists in the namespace (west)")


async def test_foreign_service_is_reported_and_never_modified(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    foreign = await env.api.create("services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "db", "namespace": NS, "labels": {"team": "a"}},
        "spec": {"selector": {"app": "postgres"}, "ports": [{"port": 5432}]}}, NS)
    await env.create("Listener", "db", {"routingKey": "db", "host": "db", "port": 5432})
    await env.wait_status("Listener", "db", "Error", "Service db already exists in namespace")
    current = await env.service("db")
    assert current["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
    assert current["spec"]["selector"] == {"app": "postgres"}

    await env.api.delete("services", "db", NS)
    await env.wait_status("Listener", "db", "Pending", "No matching connectors")
    ours = await env.service("db")
    assert ours["metadata"]["annotations"]["internal.skupper.io/controlled"] == "true"


async def test_a_users_service_carrying_our_annotation_survives(env: SiteEnv) -> None:
    """An annotation and label copied from one of ours do not make a Service the controller's: only an owner
    reference to the Site does (upstream would delete this Service as a stale listener Service)."""
    await env.create("Site", "west", {})
    copied = await env.api.create("services", {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "reports", "namespace": NS, "labels": {"internal.skupper.io/listener": "reports"},
                     "annotations": {"internal.skupper.io/controlled": "true"}},
        "spec": {"selector": {"app": "reports"}, "ports": [{"port": 8080}]}}, NS)
    # a Listener of another host makes the controller plan the namespace's Services (and delete stale ones)
    await env.create("Listener", "db", {"routingKey": "db", "host": "db", "port": 5432})
    await env.wait_status("Listener", "db", "Pending", "No matching connectors")
    assert (await env.service("db"))["metadata"]["ownerReferences"][0]["kind"] == "Site"
    await env.create("Listener", "reports", {"routingKey": "r", "host": "reports", "port": 8080})
    await env.wait_status("Listener", "reports", "Error", "Service reports already exists in namespace")
    current = await env.service("reports")
    assert current["metadata"]["resourceVersion"] == copied["metadata"]["resourceVersion"]


async def test_duplicate_host_and_port_first_wins_across_restarts(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    await env.create("Listener", "first", {"routingKey": "a", "host": "shared", "port": 8080})
    await env.wait_status("Listener", "first", "Pending", "No matching connectors")
    await env.create("Listener", "second", {"routingKey": "b", "host": "shared", "port": 8080})
    message = "Listener first with host shared and port 8080 already exists in namespace"
    await env.wait_status("Listener", "second", "Error", message)
    await env.create("Listener", "third", {"routingKey": "c", "host": "shared", "port": 9090})
    await env.wait_status("Listener", "third", "Pending", "No matching connectors")

    async def two_ports() -> list[tuple[str, int]] | None:
        ports = sorted((p["name"], p["port"]) for p in (await env.service("shared"))["spec"]["ports"])
        return ports if len(ports) == 2 else None

    assert await env.wait_for(two_ports, 10, "two Service ports") == [("first", 8080), ("third", 9090)]

    await env.controllers[0].stop()
    await env.start_controller()
    await env.wait_status("Listener", "second", "Error", message)
    await env.wait_status("Listener", "first", "Pending", "No matching connectors")

    # A port change into the conflict is refused; back out of it, it is exposed again.
    await env.update_spec("Listener", "third", port=8080)
    await env.wait_status("Listener", "third", "Error",
                          "Listener first with host shared and port 8080 already exists in namespace")
    await env.update_spec("Listener", "third", port=9191)
    await env.wait_status("Listener", "third", "Pending", "No matching connectors")
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in (await env.service("shared"))["spec"]["ports"]}
    assert ports["third"][0] == 9191 and ports["first"] == (8080, 1024)


async def test_invalid_host_is_an_error_and_creates_nothing(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    await env.create("Listener", "bad", {"routingKey": "x", "host": "Not_A_Service", "port": 80})
    await env.create("Listener", "long", {"routingKey": "x", "host": "a" * 64, "port": 80})
    await env.wait_status("Listener", "bad", "Error",
                          'host "Not_A_Service" cannot name a Service: must consist of lower case alphanumeric '
                          "characters or '-', start with an alphabetic character, and end with an alphanumeric "
                          "character")
    await env.wait_status("Listener", "long", "Error",
                          f'host "{"a" * 64}" cannot name a Service: must be no more than 63 characters (has 64)')
    assert set(await services(env)) == set()


async def test_failed_service_write_is_reported_then_retried(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    await env.wait_status("Site", "west", "Ready", "OK", within=30)
    env.sim.faults.update({"errors": [{"rate": 1.0, "code": 500, "verbs": ["create"], "resources": ["services"]}]})
    await env.create("Listener", "db", {"routingKey": "db", "host": "db", "port": 5432})
    status = await env.wait_for(lambda: _error_status(env, "db"), 10, "Listener db in Error")
    assert status["message"].startswith("Service db could not be written: ")
    assert condition(status, "Configured")["reason"] == "Error"
    env.sim.faults.reset()
    await env.wait_status("Listener", "db", "Pending", "No matching connectors", within=10)
    assert (await env.service("db"))["spec"]["ports"][0]["targetPort"] == 1024


async def _error_status(env: SiteEnv, name: str) -> dict[str, Any] | None:
    status = await env.status("Listener", name)
    return status if status.get("status") == "Error" else None


async def test_connector_errors(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    await env.create("Connector", "empty", {"routingKey": "x", "host": "", "port": 80})
    await env.wait_status("Connector", "empty", "Error",
                          "Connector must define a non-empty spec.host or spec.selector")
    with pytest.raises(ApiError) as refused:
        await env.create("Connector", "both", {"routingKey": "x", "host": "h", "selector": "app=x", "port": 80})
    assert refused.value.code == 422
    with pytest.raises(ApiError) as refused:
        await env.create("Connector", "neither", {"routingKey": "x", "port": 80})
    assert refused.value.code == 422
    await env.create("Connector", "nothing", {"routingKey": "x", "selector": "app=nothing", "port": 80})
    await env.wait_status("Connector", "nothing", "Error", "No matches for selector")
    await env.create("Connector", "syntax", {"routingKey": "x", "selector": "app in (a", "port": 80})
    await env.wait_status("Connector", "syntax", "Error", 'invalid selector "app in (a": unbalanced parentheses')
    await env.create("Connector", "udp", {"routingKey": "x", "host": "10.0.0.1", "port": 53, "type": "udp"})
    await env.wait_status("Connector", "udp", "Error", 'type "udp" is not supported: only tcp')
    await env.create("Connector", "badhost", {"routingKey": "x", "host": "bad host!", "port": 80})
    await env.wait_status("Connector", "badhost", "Error", 'host "bad host!" is neither an IP address nor a DNS name')
    document = await env.api.get("configmaps", "skupper-router", NS)
    assert '"connectors": []' in document["data"]["router.json"]


async def test_listener_updates_service_recreation_and_stale_services(env: SiteEnv) -> None:
    await env.create("Site", "west", {})
    await env.create("Listener", "web", {"routingKey": "web", "host": "web", "port": 80})
    await env.wait_status("Listener", "web", "Pending", "No matching connectors")
    assert [(p["port"], p["targetPort"]) for p in (await env.service("web"))["spec"]["ports"]] == [(80, 1024)]

    # host changed: the old Service goes, the new one has the same router port
    await env.update_spec("Listener", "web", host="www")
    await env.wait_for(lambda: _names_are(env, {"www"}), 10, "only Service www")
    # port changed: the Service port changes, the router port does not
    await env.update_spec("Listener", "web", port=8080)

    async def moved() -> bool:
        return [(p["port"], p["targetPort"]) for p in (await env.service("www"))["spec"]["ports"]] == [(8080, 1024)]

    await env.wait_for(moved, 10, "Service port 8080 -> 1024")

    # deleted Service: re-created
    await env.api.delete("services", "www", NS)
    await env.wait_for(moved, 10, "Service www re-created")

    # a Service of ours (owned by the Site) nobody exposes any more: deleted
    site = await env.api.get("sites.skupper.io", "west", NS)
    owner = {"apiVersion": "skupper.io/v2alpha1", "kind": "Site", "name": "west", "uid": site["metadata"]["uid"]}
    await env.api.create("services", {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "leftover", "namespace": NS, "labels": {"internal.skupper.io/listener": "gone"},
                     "annotations": {"internal.skupper.io/controlled": "true"}, "ownerReferences": [owner]},
        "spec": {"selector": {"application": "skupper-router"}, "ports": [{"port": 1}]}}, NS)
    await env.wait_for(lambda: _names_are(env, {"www"}), 10, "stale Service deleted")

    # the Listener deleted: its Service goes
    await env.delete("Listener", "web")
    await env.wait_for(lambda: _names_are(env, set()), 10, "no Service left")


async def _names_are(env: SiteEnv, names: set[str]) -> bool:
    return set(await services(env)) == names
