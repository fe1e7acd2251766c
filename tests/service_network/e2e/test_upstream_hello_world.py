"""Upstream's hello-world, applied verbatim from the reference copy of upstream's repository
(``e2e-hello-world/`` and ``controller-example/``, found by ``upstream_reference``), on two
clusters side by side with their namespaces as given (``west``, ``east``), with upstream's images
(``quay.io/skupper/hello-world-frontend`` and ``-backend``, kubesim's built-in stand-ins): West's frontend says hello
to East's backend through the Listener.

West (``linkAccess: default``) issues the grant; East, which has **no link access** (its Site is upstream's, without
``linkAccess``), redeems the token: East dials West, and that one link carries West's client to East's backend
Pods. Then the roles swapped (``controller-example``): the Listener in the dialing site (East) reaches a Connector
in the accepting site (West)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml
from e2e_support import greeting, service_ip
from multisite_support import MultiSite, multisite_environment
from site_support import AGNHOST, RESOURCES, SiteEnv
from upstream_reference import reference

pytestmark = pytest.mark.asyncio



def _manifests(*parts: str) -> list[dict[str, Any]]:
    path = reference(*parts)
    files = sorted(path.glob("*.y*ml")) if path.is_dir() else [path]
    return [doc for f in files for doc in yaml.safe_load_all(f.read_text()) if doc]


async def _apply(env: SiteEnv, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        obj.setdefault("metadata", {})["namespace"] = env.namespace
        kind = obj["kind"]
        resource = "deployments.apps" if kind == "Deployment" else RESOURCES[kind]
        await env.api.create(resource, obj, env.namespace)


async def _token_from_grant(granting: SiteEnv, redeeming: SiteEnv, grant: str, token: dict[str, Any]) -> None:
    """What ``skupper token issue`` / ``redeem`` do: the grant's url, code and CA into upstream's token manifest."""
    async def published() -> dict[str, Any] | None:
        status = await granting.status("AccessGrant", grant)
        return status if status.get("url") and status.get("code") and status.get("ca") else None
    status = await granting.wait_for(published, 60, f"AccessGrant {grant} published")
    token["spec"] = {**(token.get("spec") or {}), "url": status["url"], "code": status["code"], "ca": status["ca"]}
    await _apply(redeeming, [token])

    async def redeemed() -> bool:
        current = await redeeming.status("AccessToken", token["metadata"]["name"])
        assert current.get("status") != "Error", current
        return current.get("redeemed") is True
    await redeeming.wait_for(redeemed, 60, "the token redeemed")


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    reference("e2e-hello-world"), reference("controller-example")   # skipped before two sites start for nothing
    async with multisite_environment("west", "east") as environment:
        await environment.start_controllers()
        yield environment


async def _answers(env: SiteEnv, service: str, port: int, pods: set[str]) -> str:
    ip = await service_ip(env, service, within=60)

    async def answered() -> str | None:
        name = await greeting(ip, port)
        return name if name in pods else None
    name: str = await env.wait_for(answered, 60, f"an answer from {sorted(pods)} at {service}:{port}")
    return name


async def test_upstream_hello_world_verbatim_east_without_link_access(sites: MultiSite) -> None:
    west, east = sites["west"], sites["east"]
    await _apply(west, _manifests("e2e-hello-world", "west"))
    await _apply(east, _manifests("e2e-hello-world", "east"))
    assert "linkAccess" not in (await east.get("Site", "east")).get("spec", {})
    grant, token = _manifests("controller-example", "access_grant.yaml")[0], _manifests(
        "controller-example", "access_token.yaml")[0]
    await _apply(west, [grant])
    await sites.access_endpoint("west")          # as `skupper token issue` waits for the site to be ready
    await _token_from_grant(west, east, grant["metadata"]["name"], token)
    # East has no router access: nothing could dial it; its one Link carries West's client to East's Pods
    assert not (await east.api.list("routeraccesses.skupper.io", "east"))[0]
    assert not (await west.api.list("links.skupper.io", "west"))[0]
    backends = {p["metadata"]["name"] for p in await east.wait_ready_pods({"app": "backend"}, 3, within=60)}
    frontend = (await west.wait_ready_pods({"app": "frontend"}, 1, within=60))[0]["status"]["podIP"]

    async def hello() -> dict[str, Any] | None:
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as client, client.post(
                    f"http://{frontend}:8080/api/hello", json={"name": "Tester", "text": "Hello!"}) as response:
                return await response.json() if response.status == 200 else None
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None
    answer = await west.wait_for(hello, 60, "West's frontend answered through East's backend")
    # upstream's backend answer: "Hi, <name>.  I am <its name> (<its Pod>)." from one of East's Pods
    match = re.fullmatch(r"Hi, Tester\.  I am [A-Z][a-z]+ [A-Z][a-z]+ \((\S+)\)\.", answer["text"])
    assert match and match.group(1) in backends, answer
    await west.wait_status("Listener", "backend", "Ready", within=60)
    await east.wait_status("Connector", "backend", "Ready", within=60)
    assert (await west.status("Listener", "backend")).get("hasMatchingConnector") is True
    assert (await east.status("Connector", "backend")).get("hasMatchingListener") is True

    # roles swapped (controller-example): a Listener in East, the dialing site, and a Connector in West
    listener = _manifests("controller-example", "listener.yaml")[0]
    listener["metadata"]["name"] = "backend-in-west"
    listener["spec"]["host"] = "backend-in-west"
    connector = _manifests("controller-example", "connector.yaml")[0]
    connector["metadata"]["name"] = "backend-in-west"
    await _apply(east, [listener])
    await west.deployment("backend", AGNHOST, 1, {"app": "backend"}, args=["serve-hostname", "--port=8080", "--http=false", "--tcp"],
                          port=8080)
    await _apply(west, [connector])
    west_pods = {p["metadata"]["name"] for p in await west.wait_ready_pods({"app": "backend"}, 1, within=60)}
    assert await _answers(east, "backend-in-west", 8080, west_pods) in west_pods
    await east.wait_status("Listener", "backend-in-west", "Ready", within=60)
    await west.wait_status("Connector", "backend-in-west", "Ready", within=60)
