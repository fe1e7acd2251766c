"""A system site offers the ``edge`` role too, as upstream's system sites do (``internal/nonkube``: a RouterAccess
with roles ``inter-router`` and ``edge`` gives the router a listener for each and its links an endpoint for each):
the router document ``skupper system setup`` writes has one ``routerAccess`` entry per role, the router listens on
both ports, and ``skupper system generate-link`` gives a Link with both endpoints (a RouterAccess with only
``inter-router`` keeps only that one). What a user sees: the files the CLI writes, the Link it prints, the ports
that accept. Loopback only; every wait bounded."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_system_site_truth import HOST, free_port, ok, resource, short_home, skupper, until

from service_network.system.compose import router_access

RUNTIME = Path("data/skupper/namespaces/hub/runtime")


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from short_home(monkeypatch)


def accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=2):
            return True
    except OSError:
        return False


async def test_a_system_site_offers_the_edge_role_beside_inter_router(home: Path) -> None:
    inter, edge = free_port(), free_port()
    (home / "hub.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "hub", {}),
        resource("RouterAccess", "skupper-router", {"roles": [{"name": "inter-router", "port": inter},
                                                              {"name": "edge", "port": edge}],
                                                    "bindHost": HOST})]))
    try:
        await ok("system", "apply", "-f", "hub.yaml", "-n", "hub", cwd=home)
        await ok("system", "setup", "-n", "hub", cwd=home)
        document = json.loads((home / RUNTIME / "router" / "router.json").read_text())
        assert [(a["role"], a["port"], a["host"]) for a in document["routerAccess"]] == [
            ("inter-router", inter, HOST), ("edge", edge, HOST)]
        assert len({a["tlsProfile"] for a in document["routerAccess"]}) == 1, "one server certificate for both"

        async def both() -> bool:
            return accepts(inter) and accepts(edge)
        await until(both, 60, "the router listens on both ports", home)

        generated = await ok("system", "generate-link", "--subject", "a-remote-site", "-n", "hub", cwd=home)
        _, link = list(yaml.safe_load_all(generated))
        assert link["spec"]["endpoints"] == [{"name": "inter-router", "host": HOST, "port": str(inter)},
                                             {"name": "edge", "host": HOST, "port": str(edge)}]
    finally:
        await skupper("system", "uninstall", "--force", cwd=home)


def access(roles: list[dict[str, object]]) -> list[dict[str, object]]:
    return [resource("RouterAccess", "ra", {"roles": roles, "bindHost": HOST})]


def test_the_edge_role_is_offered_only_when_listed_and_on_a_port_of_its_own() -> None:
    plan, states = router_access(access([{"name": "inter-router", "port": 55671}]))
    assert plan is not None and plan.roles() == [("inter-router", 55671)]
    plan, _ = router_access(access([{"name": "inter-router"}, {"name": "edge"}]))
    assert plan is not None and plan.roles() == [("inter-router", 55671), ("edge", 45671)], "upstream's defaults"
    plan, states = router_access(access([{"name": "inter-router", "port": 7000}, {"name": "edge", "port": 7000}]))
    assert plan is None
    assert "the inter-router and edge roles both ask for port 7000" in states[("RouterAccess", "ra")].message
    plan, states = router_access(access([{"name": "inter-router", "port": 7000}, {"name": "edge", "port": 0}]))
    assert plan is not None and plan.edge_port == 45671, "port 0 (unset) takes the default, as for inter-router"
    plan, states = router_access(access([{"name": "inter-router", "port": 7000}, {"name": "edge", "port": 70000}]))
    assert plan is None and "edge ports 1-65535" in states[("RouterAccess", "ra")].message
