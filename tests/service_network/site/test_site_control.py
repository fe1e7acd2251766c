"""Upstream Skupper's controller and ours stay apart on one cluster: a namespace whose ConfigMap ``skupper`` names
another controller (as upstream's namespace-scope install ships it: ``controller: skupper-controller``) is left
alone by ours, which acts again once the ConfigMap hands the namespace to it or is gone (upstream's rule,
``service_network.site.control``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from site_support import NS, SiteEnv, site_environment

from kubesim.errors import ApiError
from service_network.site.control import other_controller

UPSTREAMS = "upstreams"


@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        await environment.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": UPSTREAMS}})
        await environment.start_controller()
        yield environment


def skupper_config(namespace: str, controller: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "skupper", "namespace": namespace},
            "data": {"controller": controller}}


async def router_config(env: SiteEnv, namespace: str) -> dict[str, Any] | None:
    try:
        return await env.api.get("configmaps", "skupper-router", namespace)
    except ApiError as error:
        if error.code == 404:
            return None
        raise


async def test_a_namespace_handed_to_upstreams_controller_is_left_alone(env: SiteEnv) -> None:
    await env.api.create("configmaps", skupper_config(UPSTREAMS, "skupper-controller"), UPSTREAMS)
    await env.create("Site", "theirs", {}, namespace=UPSTREAMS)
    await env.create("Site", "ours", {})  # a namespace without the ConfigMap: ours acts
    await env.wait_for(lambda: router_config(env, NS), what="our router's ConfigMap")
    await env.wait_for(lambda: _status(env, "ours", NS), what="our Site's status")
    # the other namespace was reconciled in the same pass (both Sites were there before the controller's cache
    # synced a second time): nothing of ours is in it
    await env.create("Site", "probe", {})  # one more change after, so at least one later pass has run
    await env.wait_for(lambda: _status(env, "probe", NS), what="the later Site's status")
    assert await router_config(env, UPSTREAMS) is None
    assert (await env.get("Site", "theirs", UPSTREAMS)).get("status") is None

    # handed to ours (namespace-qualified, as upstream reads it): ours acts
    config = await env.api.get("configmaps", "skupper", UPSTREAMS)
    config["data"]["controller"] = "default/service-network-controller"
    await env.api.update("configmaps", config)
    await env.wait_for(lambda: router_config(env, UPSTREAMS), what="our router's ConfigMap in the handed namespace")
    await env.wait_for(lambda: _status(env, "theirs", UPSTREAMS), what="the handed namespace's Site's status")


async def test_without_the_configmap_ours_acts_again(env: SiteEnv) -> None:
    await env.api.create("configmaps", skupper_config(UPSTREAMS, f"{UPSTREAMS}/skupper-controller"), UPSTREAMS)
    await env.create("Site", "theirs", {}, namespace=UPSTREAMS)
    await env.create("Site", "ours", {})
    await env.wait_for(lambda: _status(env, "ours", NS), what="our Site's status")
    assert await router_config(env, UPSTREAMS) is None
    await env.api.delete("configmaps", "skupper", UPSTREAMS)
    await env.wait_for(lambda: router_config(env, UPSTREAMS), what="our router's ConfigMap once the ConfigMap is gone")


async def _status(env: SiteEnv, name: str, namespace: str) -> dict[str, Any] | None:
    return (await env.get("Site", name, namespace)).get("status") or None


def test_upstreams_rule_for_the_controller_entry() -> None:
    ours = "default/service-network-controller"

    def config(namespace: str, value: Any) -> dict[str, Any]:
        return {"metadata": {"name": "skupper", "namespace": namespace}, "data": {"controller": value}}

    assert other_controller(None, ours) is None
    assert other_controller(config("west", "skupper-controller"), ours) == "west/skupper-controller"
    assert other_controller(config("west", "skupper/skupper-controller"), ours) == "skupper/skupper-controller"
    assert other_controller(config("west", "default/service-network-controller"), ours) is None
    assert other_controller(config("default", "service-network-controller"), ours) is None
    assert other_controller(config("west", "service-network-controller"), ours) == "west/service-network-controller"
    assert other_controller(config("west", ""), ours) is None
