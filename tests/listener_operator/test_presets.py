"""Preset ListenerClasses: the right classes, created only when missing, never updated."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from listener_operator.crd.models import ListenerClassSpec
from listener_operator.presets import PRESETS, ensure_presets, preset_classes
from operator_runtime.api import KubeApi
from operator_runtime.config import make_api
from operator_runtime.errors import ApiFailure

PREFIX = "/apis/listeners.stackable.tech/v1alpha1/listenerclasses"


class FakeApi:
    """Just enough of the API server for ListenerClass get/create, recording every request."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.fail_get_with: int | None = None
        self.race_on_create: set[str] = set()

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        if request.method == "GET" and request.path.startswith(PREFIX + "/"):
            name = request.path.rsplit("/", 1)[1]
            if self.fail_get_with:
                return self.status(self.fail_get_with)
            if name in self.objects:
                return web.json_response(self.objects[name])
            return self.status(404)
        if request.method == "POST" and request.path == PREFIX:
            body = await request.json()
            name = body["metadata"]["name"]
            if name in self.objects or name in self.race_on_create:
                return self.status(409)
            self.objects[name] = body
            return web.json_response(body, status=201)
        return self.status(405)

    @staticmethod
    def status(code: int) -> web.Response:
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                           "message": f"code {code}"}).encode()
        return web.Response(body=body, status=code, headers={"Content-Type": "application/json"})


@pytest.fixture
async def fake(tmp_path: Path) -> AsyncIterator[tuple[FakeApi, KubeApi]]:
    api = FakeApi()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", api.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{runner.addresses[0][1]}"}}],
        "users": [{"name": "c", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}]}))
    client = make_api(str(kubeconfig))
    try:
        yield api, client
    finally:
        await client.close()
        await runner.cleanup()


def test_preset_contents() -> None:
    specs = {preset: {o["metadata"]["name"]: o["spec"] for o in preset_classes(preset)} for preset in PRESETS}
    assert specs["none"] == {}
    assert specs["ephemeral-nodes"] == {
        "cluster-internal": {"serviceType": "ClusterIP"},
        "external-unstable": {"serviceType": "NodePort", "pinnedNodePorts": False},
        "external-stable": {"serviceType": "LoadBalancer"},
    }
    assert specs["stable-nodes"]["external-stable"] == {"serviceType": "NodePort", "pinnedNodePorts": True}
    for objects in map(preset_classes, PRESETS):
        for obj in objects:
            ListenerClassSpec.model_validate(obj["spec"])
            assert obj["apiVersion"] == "listeners.stackable.tech/v1alpha1" and obj["kind"] == "ListenerClass"


def test_unknown_preset_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="none, ephemeral-nodes, stable-nodes"):
        preset_classes("bogus")


async def test_creates_missing_classes_and_writes_nothing_on_restart(
        fake: tuple[FakeApi, KubeApi]) -> None:
    api, client = fake
    created = await ensure_presets(client, "stable-nodes")
    assert created == ["cluster-internal", "external-unstable", "external-stable"]
    assert api.objects["external-stable"]["spec"] == {"serviceType": "NodePort", "pinnedNodePorts": True}
    api.requests.clear()
    assert await ensure_presets(client, "stable-nodes") == []
    assert {method for method, _ in api.requests} == {"GET"}


async def test_existing_class_is_never_updated(fake: tuple[FakeApi, KubeApi]) -> None:
    api, client = fake
    admin_owned = {"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "ListenerClass",
                   "metadata": {"name": "external-stable"}, "spec": {"serviceType": "ClusterIP"}}
    api.objects["external-stable"] = admin_owned
    assert await ensure_presets(client, "ephemeral-nodes") == ["cluster-internal", "external-unstable"]
    assert api.objects["external-stable"]["spec"] == {"serviceType": "ClusterIP"}
    assert ("POST", PREFIX) in api.requests
    assert all(method in ("GET", "POST") for method, _ in api.requests)


async def test_none_preset_makes_no_requests(fake: tuple[FakeApi, KubeApi]) -> None:
    api, client = fake
    assert await ensure_presets(client, "none") == []
    assert api.requests == []


async def test_concurrent_creator_counts_as_existing(fake: tuple[FakeApi, KubeApi]) -> None:
    api, client = fake
    api.race_on_create = {"cluster-internal"}
    assert await ensure_presets(client, "ephemeral-nodes") == ["external-unstable", "external-stable"]


async def test_other_api_errors_propagate(fake: tuple[FakeApi, KubeApi]) -> None:
    api, client = fake
    api.fail_get_with = 403
    with pytest.raises(ApiFailure):
        await ensure_presets(client, "ephemeral-nodes")
    assert api.objects == {}
