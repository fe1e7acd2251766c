"""The router Pod's network status publisher against kubesim's API with exactly the router Role's access: it waits
for the ConfigMap the controller creates, writes its own key only when the status differs from what the ConfigMap
holds, restores a key someone removed, never touches another router's key, and cannot create the ConfigMap."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from router_support import wait_until

from kubesim.auth.authn import User
from kubesim.auth.rbac import ClusterRoleAuthorizer
from kubesim.sim import KubeSim
from operator_runtime.config import make_api
from service_network.router.routed import listening_in_status_texts
from service_network.router.shutdown import cancel_and_wait
from service_network.router.status_publisher import StatusPublisher, status_text
from service_network.site.resources import role_rules

NS = "west"
NAME = "skupper-network-status"


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as server:
        await server.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        yield server


async def data(sim: KubeSim) -> dict[str, str] | None:
    try:
        return dict((await sim.api.get("configmaps", NAME, NS)).get("data") or {})
    except Exception:
        return None


async def test_publisher_writes_only_on_change_and_only_its_key(sim: KubeSim) -> None:
    authorizer = ClusterRoleAuthorizer(role_rules(), sim.server.store)
    sim.server.authorizer = authorizer
    api = make_api(sim.kubeconfig_path)
    status: dict[str, Any] = {"version": 1, "router": "west-uid", "sites": [{"name": "west"}]}
    publisher = StatusPublisher(api, NS, NAME, "skupper-router.json", "service-network-router-skupper-router")
    task = asyncio.create_task(publisher.run(lambda: status))
    try:
        publisher.changed()
        await asyncio.sleep(0.5)
        assert await data(sim) is None and publisher.writes == 0       # no ConfigMap: waits (may not create it)

        # the controller creates it (another field manager), with another router's key already there
        await sim.api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                            "metadata": {"name": NAME, "namespace": NS},
                                            "data": {"skupper-router-2.json": "{}"}}, NS)
        written = await wait_until(lambda: _key(sim, "skupper-router.json"), 10, "status written")
        assert json.loads(written) == status and written == status_text(status)
        assert (await data(sim) or {})["skupper-router-2.json"] == "{}"
        await wait_until(lambda: publisher.writes >= 1, 10, "write 1 counted")   # counted once its answer came back
        assert publisher.writes == 1

        # asked again with the same status: nothing written
        for _ in range(3):
            publisher.changed()
        await asyncio.sleep(0.5)
        assert publisher.writes == 1

        # a new status: written once
        status = {**status, "sites": [{"name": "west"}, {"name": "east"}]}
        publisher.changed()
        await wait_until(lambda: _key(sim, "skupper-router.json", status_text(status)), 10, "new status")
        await wait_until(lambda: publisher.writes >= 2, 10, "write 2 counted")   # counted once its answer came back
        assert publisher.writes == 2

        # someone removes the key: restored
        current = await sim.api.get("configmaps", NAME, NS)
        current["data"] = {"skupper-router-2.json": "{}"}
        await sim.api.update("configmaps", current)
        await wait_until(lambda: _key(sim, "skupper-router.json", status_text(status)), 10, "key restored")
        assert (await data(sim) or {})["skupper-router-2.json"] == "{}"
        await wait_until(lambda: publisher.writes >= 3, 10, "write 3 counted")   # counted once its answer came back
        assert publisher.writes == 3
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()
    assert authorizer.denied == [], authorizer.denied


async def _key(sim: KubeSim, key: str, expected: str | None = None) -> str | None:
    value = (await data(sim) or {}).get(key)
    if value is None or (expected is not None and value != expected):
        return None
    return value


async def test_publisher_outlives_a_token_file_that_is_gone_for_a_while(sim: KubeSim, tmp_path: Path) -> None:
    # the router's credentials are a token file, as a Pod's projected service-account token
    token_file = tmp_path / "token"
    token_file.write_text("token-one")
    sim.server.authenticator.tokens["token-one"] = User("router", ("system:masters",))
    config = yaml.safe_load(sim.kubeconfig_path.read_text())
    config["users"][0]["user"] = {"tokenFile": str(token_file)}
    kubeconfig = tmp_path / "router-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    api = make_api(kubeconfig)
    status: dict[str, Any] = {"version": 1, "router": "west-uid", "sites": [{"name": "west"}]}
    publisher = StatusPublisher(api, NS, NAME, "skupper-router.json", "service-network-router-skupper-router")
    await sim.api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": NAME, "namespace": NS}, "data": {}}, NS)
    task = asyncio.create_task(publisher.run(lambda: status))
    try:
        publisher.changed()
        await wait_until(lambda: _key(sim, "skupper-router.json"), 10, "status written")
        # the token is revoked and its file is gone: the next write cannot be authenticated
        del sim.server.authenticator.tokens["token-one"]
        token_file.unlink()
        current = await sim.api.get("configmaps", NAME, NS)
        current["data"] = {}
        await sim.api.update("configmaps", current)
        await asyncio.sleep(0.8)
        assert not task.done(), task
        # a new token arrives: the status is written again
        sim.server.authenticator.tokens["token-two"] = User("router", ("system:masters",))
        token_file.write_text("token-two")
        await wait_until(lambda: _key(sim, "skupper-router.json", status_text(status)), 10, "key restored")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()


async def test_publisher_hands_over_what_the_routers_listened_for_before_its_first_write(sim: KubeSim) -> None:
    """Issue 49.5: a new router Pod learns from every router's key which Listeners had a route (its readiness
    waits for those only), read before its own key is overwritten."""
    authorizer = ClusterRoleAuthorizer(role_rules(), sim.server.store)
    sim.server.authorizer = authorizer
    api = make_api(sim.kubeconfig_path)
    before = {"skupper-router.json": json.dumps({"version": 1, "listening": ["mine"]}),
              "skupper-router-2.json": json.dumps({"version": 1, "listening": ["ha-peer's", "mine"]}),
              "broken.json": "{not json"}
    await sim.api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": NAME, "namespace": NS}, "data": before}, NS)
    seen: list[frozenset[str]] = []
    status: dict[str, Any] = {"version": 1, "router": "west-uid", "listening": []}
    publisher = StatusPublisher(api, NS, NAME, "skupper-router.json",
                                "service-network-router-skupper-router",
                                on_synced=lambda found: seen.append(listening_in_status_texts(found.values())))
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(api.close)
        task = asyncio.create_task(publisher.run(lambda: status))
        stack.push_async_callback(cancel_and_wait, task, 5.0)
        publisher.changed()
        await wait_until(lambda: _key(sim, "skupper-router.json", status_text(status)), 10, "own status written")
    assert seen == [frozenset({"mine", "ha-peer's"})]
    assert authorizer.denied == [], authorizer.denied
