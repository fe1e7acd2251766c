"""Upstream Skupper's own site on kubesim (issue 46): its images run from ``../shared/peers/``, its install manifest
applied with kubectl runs its controller, which authenticates as its ServiceAccount, is allowed what its RBAC grants,
and answers a Site with its router Deployment, Services, Secrets, Role and RoleBinding and its own status words."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from clusterhelpers import wait_for
from traffichelpers import FAST_RESTARTS, eventually
from upstream_peers import peers

from devenv.upstream_images import UPSTREAM_IMAGES, PeersMissing, load_upstream_images
from kubesim.auth.rbac import subject_matches
from kubesim.cluster.runtime import RuntimeRegistry
from kubesim.sim import KubeSim

NS = "west"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="upstream's containers need a private mount namespace "
                                                         "(root; CI runs as root)")


def test_without_the_peers_nothing_is_registered_and_the_refusal_names_them(tmp_path: Path) -> None:
    registry = RuntimeRegistry()
    with pytest.raises(PeersMissing, match=r"\.\./shared/peers/.*UPSTREAM_PEERS"):
        load_upstream_images(registry, tmp_path / "absent")
    (tmp_path / "half" / "skupper-2.2.1" / "bin").mkdir(parents=True)
    (tmp_path / "half" / "skupper-2.2.1" / "bin" / "controller").write_text("")
    with pytest.raises(PeersMissing, match="kube-adaptor"):
        load_upstream_images(registry, tmp_path / "half")
    assert registry.images() == []  # all or nothing


def test_every_image_upstreams_manifests_name_runs_from_the_peers() -> None:
    where = peers()
    manifest = (where / "skupper-2.2.1" / "deploy" / "skupper-namespace-scope.yaml").read_text()
    registry = RuntimeRegistry()
    assert load_upstream_images(registry, where) == sorted(i.repository for i in UPSTREAM_IMAGES)
    for image in UPSTREAM_IMAGES:
        assert f"{image.repository}:{image.tag}" in manifest  # the controller's image and the two it deploys
        assert registry.lookup(f"{image.repository}:{image.tag}") is not None


def test_a_role_binding_subject_without_namespace_is_the_bindings_namespace() -> None:
    from kubesim.auth.authn import User

    account = User(name="system:serviceaccount:west:skupper-controller", groups=())
    subject = {"kind": "ServiceAccount", "name": "skupper-controller"}
    assert subject_matches(subject, account, "west")
    assert not subject_matches(subject, account, "east")
    assert not subject_matches({**subject, "namespace": "east"}, account, "west")


async def kubectl(sim: KubeSim, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "kubectl"), "--kubeconfig", str(sim.kubeconfig_path), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, out.decode()[-2000:]
    return out.decode()


@pytest_asyncio.fixture
async def sim() -> AsyncIterator[KubeSim]:
    async with KubeSim(nodes=1, **FAST_RESTARTS) as running:
        yield running


async def test_ingresses_are_served(sim: KubeSim) -> None:
    ingress = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web", "namespace": "default"},
               "spec": {"rules": [{"host": "web.example"}]}}
    await sim.api.create("ingresses.networking.k8s.io", ingress, "default")
    assert "web" in await kubectl(sim, "get", "ingresses", "-n", "default", "-o", "name")


@needs_root
@pytest.mark.parametrize("scope", ["namespace", "cluster"])
async def test_upstreams_controller_from_its_manifest_answers_a_site(sim: KubeSim, scope: str) -> None:
    """namespace scope: the controller in the Site's namespace, watching it; cluster scope: in ``skupper``, watching
    every namespace (its ClusterRole, ClusterRoleBinding)."""
    where = peers()
    assert sim.cluster is not None
    load_upstream_images(sim.cluster.runtime, where)
    await kubectl(sim, "create", "namespace", NS)
    manifest = str(where / "skupper-2.2.1" / "deploy" / f"skupper-{scope}-scope.yaml")
    await kubectl(sim, "apply", *(["-n", NS] if scope == "namespace" else []), "-f", manifest)

    def running(found: dict[str, Any] | None) -> bool:
        return bool(found) and found.get("status", {}).get("readyReplicas") == 1

    controller_namespace = NS if scope == "namespace" else "skupper"
    await wait_for(sim.api, "deployments.apps", "skupper-controller", controller_namespace, running)
    site = {"apiVersion": "skupper.io/v2alpha1", "kind": "Site", "metadata": {"name": "west", "namespace": NS},
            "spec": {"linkAccess": "default"}}
    await sim.api.create("sites.skupper.io", site, NS)
    # what the controller made for the Site, through its RBAC (a RoleBinding subject without namespace) and the
    # protobuf bodies its client sends (its router's Role and RoleBinding)
    router = await wait_for(sim.api, "deployments.apps", "skupper-router", NS, lambda found: found is not None)
    assert router is not None
    images = {c["name"]: c["image"] for c in router["spec"]["template"]["spec"]["containers"]}
    assert images == {"router": "quay.io/skupper/skupper-router:3.5.1", "kube-adaptor": "quay.io/skupper/kube-adaptor:2.2.1"}
    role = await wait_for(sim.api, "roles.rbac.authorization.k8s.io", "skupper-router", NS, lambda f: f is not None)
    assert role is not None and any("deployments" in rule.get("resources", []) for rule in role["rules"])
    binding = await sim.api.get("rolebindings.rbac.authorization.k8s.io", "skupper-router", NS)
    assert binding["roleRef"]["name"] == "skupper-router"
    for name in ("skupper-router", "skupper-router-local"):
        assert await wait_for(sim.api, "services", name, NS, lambda f: f is not None)
    # the router Pod: its init container (kube-adaptor -init) writes the router's configuration from the ConfigMap
    # once the controller has annotated the Secrets (a protobuf update sending managedFields back); then skrouterd
    # starts on it, its id the Site's name and the Pod's (${HOSTNAME} expanded as upstream's launch.sh does)
    async def router_pod() -> dict[str, Any] | None:
        pods, _ = await sim.api.list("pods", NS, label_selector="skupper.io/component=router")
        statuses = (pods[0].get("status") or {}).get("initContainerStatuses") or [] if pods else []
        done = bool(statuses) and "terminated" in statuses[0]["state"]
        return pods[0] if done else None

    found_pod = await eventually(router_pod, within=60, what="the router Pod's config-init to complete")
    assert found_pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    name = found_pod["metadata"]["name"]
    log = sim.cluster.container_log_path(NS, name, "router")
    assert log is not None

    async def started() -> str:
        text = await asyncio.to_thread(log.read_text) if await asyncio.to_thread(log.exists) else ""
        return text if "Router started" in text else ""

    text = await eventually(started, within=30, what="skrouterd to start")
    assert f"Router started in Interior mode, area=0 id=west-{name}" in text
    # both containers ready in the Pod's own network namespace (readiness probes on :9090 and :9191 through the
    # Pod IP; kube-adaptor reaching the router on the Pod's localhost:5672), and upstream's status on the Site:
    # Ready, the network as kube-adaptor's collector publishes it (a protobuf Lease for its leader election)
    def ready(found: dict[str, Any] | None) -> bool:
        return bool(found) and (found.get("status") or {}).get("status") == "Ready" and \
            found["status"].get("sitesInNetwork") == 1

    found = await wait_for(sim.api, "sites.skupper.io", "west", NS, ready, within=90)
    assert found is not None
    assert {c["type"]: c["status"] for c in found["status"]["conditions"]} == {
        "Configured": "True", "Resolved": "True", "Running": "True", "Ready": "True"}
    assert found["status"]["message"] == "OK"
    pods, _ = await sim.api.list("pods", NS, label_selector="skupper.io/component=router")
    assert [c["ready"] for c in pods[0]["status"]["containerStatuses"]] == [True, True]
