"""Upstream Skupper's own site on kubesim (issue 46): its images run from ``../shared/peers/``, its install manifest
applied with kubectl runs its controller, which authenticates as its ServiceAccount, is allowed what its RBAC grants,
and answers a Site with its router Deployment, Services, Secrets, Role and RoleBinding and its own status words."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from clusterhelpers import wait_for
from traffichelpers import FAST_RESTARTS, eventually
from upstream_peers import peers

from devenv.upstream_images import UPSTREAM_IMAGES, PeersMissing, load_upstream_images
from kubesim.auth.rbac import subject_matches
from kubesim.cluster.runtime import RuntimeRegistry
from kubesim.sim import KubeSim
from kubesim.testing.patience import patience

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


SKUPPER_CLI = Path("skupper-2.2.1") / "bin" / "skupper"


async def skupper(sim: KubeSim, where: Path, namespace: str, *args: str, cwd: Path | None = None,
                  within: float = 300) -> str:
    """Upstream's CLI against the cluster (``--kubeconfig``, ``-n``, in ``cwd``): its output; exit 0 asserted."""
    process = await asyncio.create_subprocess_exec(
        str(where / SKUPPER_CLI), "--kubeconfig", str(sim.kubeconfig_path), "-n", namespace, *args, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), patience(within))
    text = out.decode(errors="replace")
    assert process.returncode == 0, f"skupper {' '.join(args)}: exit {process.returncode}: {text[-2000:]}"
    return text


async def status_row(sim: KubeSim, where: Path, namespace: str, kind: str) -> list[str]:
    """The one row of ``skupper <kind> status`` (its tab-separated cells, empty ones left out) once its STATUS is
    Ready, else []."""
    lines = (await skupper(sim, where, namespace, kind, "status")).strip().splitlines()
    row = [cell for cell in lines[1].split("\t") if cell] if len(lines) == 2 else []
    return row if len(row) > 1 and row[1] == "Ready" else []


async def say_hello(host: str, port: int) -> str:
    """``POST /api/hello`` as upstream's hello-world frontend sends it to its backend: the answer's text."""
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as client, \
            client.post(f"http://{host}:{port}/api/hello", json={"name": "Visitor", "text": "Hello!"}) as response:
        body = await response.text()
    return str(json.loads(body).get("text", "")) if response.status == 200 and body.startswith("{") else ""


@needs_root
async def test_upstreams_hello_world_between_two_upstream_sites(sim: KubeSim, tmp_path: Path) -> None:
    """Upstream's getting-started, two upstream sites on one kubesim: its namespace-scope manifest in ``west`` and
    in ``east`` (a controller per namespace, each acting on its own only), ``skupper site create``, ``token issue``
    / ``token redeem``, a listener in west, the backend and its connector in east; the frontend in west says hello
    through west's ``backend`` Service (the router Pod's undeclared ``tcpListener`` port), the Link (east's router
    dialling west's load balancer from its namespace) and east's router dialling a backend Pod's IP. The
    hello-world images are kubesim's built-in stand-ins (``runtime/helloworld.py``), as in our own hello-world."""
    where = peers()
    assert sim.cluster is not None
    load_upstream_images(sim.cluster.runtime, where)
    manifest = str(where / "skupper-2.2.1" / "deploy" / "skupper-namespace-scope.yaml")
    for namespace in ("west", "east"):
        await kubectl(sim, "create", "namespace", namespace)
        await kubectl(sim, "apply", "-n", namespace, "-f", manifest)
    for namespace in ("west", "east"):
        await wait_for(sim.api, "deployments.apps", "skupper-controller", namespace,
                       lambda found: bool(found) and found.get("status", {}).get("readyReplicas") == 1, within=120)
    # the sites, as the getting-started makes them (the CLI waits until each is ready)
    out = await skupper(sim, where, "west", "site", "create", "west", "--enable-link-access")
    assert 'Site "west" is ready.' in out, out
    out = await skupper(sim, where, "east", "site", "create", "east")
    assert 'Site "east" is ready.' in out, out
    # the link: a token issued in west (upstream's grant server), redeemed in east (east's controller calling it)
    # (a relative file name: the CLI refuses one with characters outside [A-Za-z0-9./~-], as pytest's tmp_path has)
    token = tmp_path / "west.token"
    out = await skupper(sim, where, "west", "token", "issue", token.name, cwd=tmp_path)
    assert token.is_file(), out
    assert 'Token file west.token created' in out, out
    out = await skupper(sim, where, "east", "token", "redeem", token.name, cwd=tmp_path)
    assert re.search(r'Token "west-[0-9a-f-]+" has been redeemed', out), out

    link = await eventually(lambda: status_row(sim, where, "east", "link"), within=120,
                            what="east's link to west to be Ready")
    assert link[0].startswith("west-") and link[1:] == ["Ready", "1", "OK"], link  # NAME STATUS COST MESSAGE
    # the application: the backend and its connector in east, the listener and the frontend in west
    await kubectl(sim, "create", "deployment", "backend", "-n", "east", "--image",
                  "quay.io/skupper/hello-world-backend", "--replicas", "3")
    out = await skupper(sim, where, "east", "connector", "create", "backend", "8080")
    assert 'Connector "backend" is configured.' in out, out
    await kubectl(sim, "create", "deployment", "frontend", "-n", "west", "--image",
                  "quay.io/skupper/hello-world-frontend")
    out = await skupper(sim, where, "west", "listener", "create", "backend", "8080")
    assert 'Listener "backend" is configured.' in out, out

    async def three_backends() -> set[str]:
        pods, _ = await sim.api.list("pods", "east", label_selector="app=backend")
        return {p["metadata"]["name"] for p in pods} if len(pods) == 3 else set()

    backend_names = await eventually(three_backends, within=30, what="east's three backend Pods")

    service = await wait_for(sim.api, "services", "backend", "west", lambda found: found is not None, within=60)
    assert service is not None
    cluster_ip = service["spec"]["clusterIP"]

    async def through_west() -> str:
        return await say_hello(cluster_ip, 8080)

    answer = await eventually(through_west, within=120, what="west's backend Service to reach east's backend")
    assert answer.startswith("Hi, Visitor.  I am "), answer
    assert answer.rsplit("(", 1)[1].rstrip(").") in backend_names, answer  # a Pod of east's backend answered

    async def through_frontend() -> str:
        pods, _ = await sim.api.list("pods", "west", label_selector="app=frontend")
        ip = (pods[0].get("status") or {}).get("podIP") if pods else None
        return await say_hello(ip, 8080) if ip else ""

    answer = await eventually(through_frontend, within=60, what="the frontend to say hello through the network")
    assert answer.rsplit("(", 1)[1].rstrip(").") in backend_names, answer
    # what the CLI says about it, in upstream's words (the listener's and connector's match is published by the
    # sites' network status, a little after the traffic passes)
    assert await status_row(sim, where, "west", "site") == ["west", "Ready", "OK"]
    listener = await eventually(lambda: status_row(sim, where, "west", "listener"), within=60,
                                what="west's listener to be Ready")
    assert listener == ["backend", "Ready", "backend", "backend", "8080", "true", "OK"]  # ... HOST PORT MATCHING
    connector = await eventually(lambda: status_row(sim, where, "east", "connector"), within=60,
                                 what="east's connector to be Ready")
    assert connector == ["backend", "Ready", "backend", "app=backend", "8080", "true", "OK"]
