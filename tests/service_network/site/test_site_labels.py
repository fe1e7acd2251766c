"""Upstream's labels and annotations on what the site controller makes, seen as upstream's tools see them: router
Pods found with kubectl by each selector upstream's tools use (``debug dump``: ``app.kubernetes.io/name``; the HA
scenario: ``skupper.io/group``; scenarios: ``app.kubernetes.io/part-of``; upstream's controller:
``skupper.io/component,skupper.io/type``), the router access Services, Certificates and their Secrets marked as
upstream's; and router Deployments made by an earlier version of this controller (another, immutable selector)
kept working through the upgrade: the same Deployment, its Pods rolled to the new labels, traffic through."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import ECHO, greeting
from site_support import ECHO_IMAGE, SiteEnv, site_environment

UPSTREAM_POD_LABELS = {"app.kubernetes.io/name": "skupper-router", "app.kubernetes.io/part-of": "skupper",
                       "application": "skupper-router", "skupper.io/component": "router", "skupper.io/type": "site"}


@pytest.fixture
async def env() -> AsyncIterator[SiteEnv]:
    async with site_environment() as environment:
        yield environment


async def kubectl(env: SiteEnv, home: Path, *args: str) -> str:
    binary = Path(sys.executable).parent / "kubectl"
    process = await asyncio.create_subprocess_exec(
        str(binary), f"--kubeconfig={env.sim.kubeconfig_path}", f"--cache-dir={home / 'cache'}", "-n",
        env.namespace, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"HOME": str(home)})
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def names(env: SiteEnv, home: Path, kind: str, selector: str) -> list[str]:
    """What ``kubectl get <kind> -l <selector>`` lists, by name."""
    out = await kubectl(env, home, "get", kind, "-l", selector, "-o", "jsonpath={.items[*].metadata.name}")
    return sorted(out.split())


async def test_router_pods_are_found_by_each_of_upstreams_selectors(env: SiteEnv, tmp_path: Path) -> None:
    await env.start_controller()
    await env.create("Site", "west", {"ha": True, "linkAccess": "default"})
    await env.wait_status("Site", "west", "Ready", within=90)
    pods = await env.wait_ready_pods(UPSTREAM_POD_LABELS, 2, within=60)
    by_group = {p["metadata"]["labels"]["skupper.io/group"]: p["metadata"]["name"] for p in pods}
    assert set(by_group) == {"skupper-router", "skupper-router-2"}

    everything = sorted(by_group.values())
    for selector in ("app.kubernetes.io/name=skupper-router", "app.kubernetes.io/part-of=skupper",
                     "skupper.io/component=router,skupper.io/type=site", "application=skupper-router"):
        assert await names(env, tmp_path, "pods", selector) == everything, selector
    for group, pod in by_group.items():
        assert await names(env, tmp_path, "pods", f"skupper.io/group={group}") == [pod]
    annotations = json.loads(await kubectl(env, tmp_path, "get", "pod", by_group["skupper-router"], "-o",
                                           "jsonpath={.metadata.annotations}"))
    assert annotations["prometheus.io/port"] == "9090" and annotations["prometheus.io/scrape"] == "true"
    assert len(annotations["skupper.io/config-digest"]) == 64
    assert await names(env, tmp_path, "deployments", "app.kubernetes.io/name=skupper-router,skupper.io/type=site") \
        == ["skupper-router", "skupper-router-2"]

    # the router access: one Service per router, marked and selecting as upstream's SecuredAccess makes them
    assert await names(env, tmp_path, "services", "internal.skupper.io/secured-access=true") == [
        "skupper-router", "skupper-router-2"]
    second = await env.service("skupper-router-2")
    assert second["spec"]["selector"] == {"skupper.io/component": "router", "skupper.io/group": "skupper-router-2"}
    assert second["metadata"]["annotations"]["internal.skupper.io/controlled"] == "true"
    access = await env.get("RouterAccess", "skupper-router")
    assert access["metadata"]["annotations"]["internal.skupper.io/controlled"] == "true"
    # Certificates the controller keeps, and their Secrets
    assert await names(env, tmp_path, "certificates.skupper.io", "internal.skupper.io/certificate=true") == [
        "skupper-site-ca", "skupper-site-server"]
    server = await env.api.get("certificates.skupper.io", "skupper-site-server", env.namespace)
    owner = server["metadata"]["ownerReferences"][0]["uid"]
    assert server["metadata"]["annotations"]["internal.skupper.io/hosts-" + owner] == ",".join(
        sorted(server["spec"]["hosts"]))
    secret = await env.api.get("secrets", "skupper-site-server", env.namespace)
    assert {k: v for k, v in secret["metadata"]["annotations"].items() if k in (
        "internal.skupper.io/controlled", "internal.skupper.io/certificate")} == {
        "internal.skupper.io/controlled": "true", "internal.skupper.io/certificate": "true"}
    assert secret["metadata"]["annotations"]["internal.skupper.io/hosts"] == ",".join(sorted(server["spec"]["hosts"]))


def _as_an_earlier_version_made_it(body: dict[str, Any]) -> dict[str, Any]:
    """A router Deployment as the previous version of this controller wrote it: its selector (immutable) and Pod
    labels, no Pod annotations."""
    name = body["metadata"]["name"]
    labels = {"application": "skupper-router", "skupper.io/component": "router"}
    old = dict(labels)
    if name == "skupper-router-2":
        old["internal.skupper.io/router-group"] = name
    template = {**body["spec"]["template"], "metadata": {"labels": dict(old)}}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": body["metadata"]["namespace"], "labels": labels,
                         "ownerReferences": body["metadata"]["ownerReferences"]},
            "spec": {"replicas": 1, "selector": {"matchLabels": old}, "template": template}}


async def test_router_deployments_of_an_earlier_version_keep_working_after_an_upgrade(env: SiteEnv) -> None:
    """kubesim refuses a changed Deployment selector as Kubernetes does (tests/kubesim/server/test_server_crud.py): the
    controller keeps the selector an earlier version gave the router Deployments (so its applies are accepted and
    the Site stays Ready), and their Pods roll to upstream's labels."""
    controller = await env.start_controller()
    await env.create("Site", "west", {"ha": True})
    await env.wait_status("Site", "west", "Ready", within=90)
    earlier = {}
    for name in ("skupper-router", "skupper-router-2"):
        earlier[name] = _as_an_earlier_version_made_it(await env.api.get("deployments.apps", name, env.namespace))
    await controller.stop()
    # the cluster as the earlier version left it: its Deployments (the Pods follow)
    for name, body in earlier.items():
        await env.api.delete("deployments.apps", name, env.namespace)

        async def gone(name: str = name) -> bool:
            deployments, _ = await env.api.list("deployments.apps", env.namespace)
            return name not in [d["metadata"]["name"] for d in deployments]
        await env.wait_for(gone, 30, f"Deployment {name} gone")
        await env.api.create("deployments.apps", body, env.namespace)
    await env.wait_ready_pods({"internal.skupper.io/router-group": "skupper-router-2"}, 1, within=60)
    uids = {name: (await env.api.get("deployments.apps", name, env.namespace))["metadata"]["uid"] for name in earlier}

    # the new version starts
    await env.start_controller()
    await env.deployment("echo", ECHO_IMAGE, 1, ECHO)
    await env.create("Listener", "echo", {"routingKey": "echo", "host": "echo", "port": 7000})
    await env.create("Connector", "echo", {"routingKey": "echo", "selector": "app=echo", "port": 7000})
    await env.wait_status("Listener", "echo", "Ready", "OK", within=90)
    pods = await env.wait_ready_pods(UPSTREAM_POD_LABELS, 2, within=90)
    assert sorted(p["metadata"]["labels"]["skupper.io/group"] for p in pods) == ["skupper-router", "skupper-router-2"]
    for name, body in earlier.items():
        live = await env.api.get("deployments.apps", name, env.namespace)
        assert live["metadata"]["uid"] == uids[name]                       # the same Deployment, never replaced
        assert live["spec"]["selector"] == body["spec"]["selector"]       # its selector kept
        assert live["metadata"]["labels"] == UPSTREAM_POD_LABELS
    second = next(p for p in pods if p["metadata"]["labels"]["skupper.io/group"] == "skupper-router-2")
    assert second["metadata"]["labels"]["internal.skupper.io/router-group"] == "skupper-router-2"   # its selector's
    assert (await env.status("Site", "west"))["status"] == "Ready"
    ip = (await env.service("echo"))["spec"]["clusterIP"]
    assert await env.wait_for(lambda: greeting(ip, 7000), 20, "traffic through the upgraded routers")
