"""One kubesim cluster holding an upstream Skupper site and one of ours (issue 43 item 1, issue 46 item 5).

* **Upstream's site** in namespace ``theirs``: upstream's ``deploy/skupper-namespace-scope.yaml`` applied unedited with
  kubectl (its controller in that namespace, watching only it; its ConfigMap ``skupper`` names that controller), its
  Site made with upstream's CLI ``site create`` (``bin/skupper`` of ``../shared/peers/``); its router and
  kube-adaptor run in the Pod's own network namespace (docs/kubesim.md, "Upstream Skupper's own images").
* **Our site** in namespace ``ours``: our site controller in this process, as the other end-to-end tests run it
  (``site_support.SiteEnv``), which leaves ``theirs`` alone because its ConfigMap ``skupper`` names upstream's
  controller (docs/kubesim.md, "Keeping upstream's controller and ours apart"); its router Pod the project image.

Both sites' objects are ``skupper.io/v2alpha1``: our CRDs are installed first, then upstream's manifest applies its
own over the twelve it ships (the same names and group), as a user installing upstream after us would get.

    async with mixed_environment(tmp_path) as mixed:
        await mixed.create_sites()
        token = await mixed.upstream_token("theirs.token")      # upstream's `token issue` in theirs
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from cli_support import SKUPPER, cli_env
from site_support import SiteEnv, site_environment
from upstream_peers import peers

from devenv.upstream_images import load_upstream_images
from kubesim.testing.patience import patience

THEIRS = "theirs"
OURS = "ours"
UPSTREAM_CLI = Path("skupper-2.2.1") / "bin" / "skupper"
NAMESPACE_MANIFEST = Path("skupper-2.2.1") / "deploy" / "skupper-namespace-scope.yaml"


class CommandFailed(AssertionError):
    """A command of the harness ended with an exit code other than 0."""


async def _run(argv: list[str], cwd: Path, within: float, env: dict[str, str] | None = None) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(process.communicate(), patience(within))
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return process.returncode or 0, out.decode(errors="replace")


class MixedSites:
    """Upstream's site (``theirs``) and ours (``ours``) on ``env``'s cluster; commands run in ``workdir``."""

    def __init__(self, env: SiteEnv, peers_dir: Path, workdir: Path) -> None:
        self.env = env
        self.sim = env.sim
        self.peers = peers_dir
        self.workdir = workdir

    # ---- commands ------------------------------------------------------------------------------------------------
    async def kubectl(self, *args: str, within: float = 120) -> str:
        code, out = await _run([str(Path(sys.executable).parent / "kubectl"), "--kubeconfig",
                                str(self.sim.kubeconfig_path), *args], self.workdir, within)
        if code:
            raise CommandFailed(f"kubectl {' '.join(args)}: exit {code}: {out[-2000:]}")
        return out

    async def upstream(self, *args: str, within: float = 300, expect: int = 0) -> str:
        """Upstream's CLI in ``theirs`` (its words; exit code ``expect`` asserted)."""
        code, out = await _run([str(self.peers / UPSTREAM_CLI), "--kubeconfig", str(self.sim.kubeconfig_path),
                                "-n", THEIRS, *args], self.workdir, within)
        if code != expect:
            raise CommandFailed(f"upstream skupper {' '.join(args)}: exit {code}: {out[-2000:]}")
        return out

    async def ours(self, *args: str, within: float = 300, expect: int = 0) -> str:
        """Our CLI in ``ours``."""
        code, out = await _run([str(SKUPPER), *args, "-n", OURS, "--kubeconfig", str(self.sim.kubeconfig_path)],
                               self.workdir, within, env=cli_env(HOME=str(self.workdir)))
        if code != expect:
            raise CommandFailed(f"our skupper {' '.join(args)}: exit {code}: {out[-2000:]}")
        return out

    # ---- the two sites -------------------------------------------------------------------------------------------
    async def install_upstream(self) -> None:
        """Upstream's namespace-scope install in ``theirs``, until its controller is Ready."""
        assert self.sim.cluster is not None
        load_upstream_images(self.sim.cluster.runtime, self.peers)
        await self.kubectl("create", "namespace", THEIRS)
        await self.kubectl("apply", "-n", THEIRS, "-f", str(self.peers / NAMESPACE_MANIFEST))

        async def ready() -> bool:
            found = await self.sim.api.get("deployments.apps", "skupper-controller", THEIRS)
            return (found.get("status") or {}).get("readyReplicas") == 1
        await self.env.wait_for(ready, 120, "upstream's controller Ready in theirs")

    async def create_sites(self, theirs_edge: bool = False, ours_edge: bool = False) -> None:
        """Both Sites with link access, each made by its own CLI (which waits until the site is ready); with
        ``theirs_edge`` (``ours_edge``), upstream's (our) Site is an edge site instead (``spec.edge: true``, no link
        access: neither CLI has a flag for it, so its YAML is applied with kubectl), until its controller says it is
        Ready."""
        for namespace, edge in ((THEIRS, theirs_edge), (OURS, ours_edge)):
            if edge:
                await self.apply(namespace, {"apiVersion": "skupper.io/v2alpha1", "kind": "Site",
                                             "metadata": {"name": namespace}, "spec": {"edge": True}})

                async def ready(namespace: str = namespace) -> bool:
                    return (await self.env.status("Site", namespace, namespace)).get("status") == "Ready"
                await self.env.wait_for(ready, 180, f"the edge Site in {namespace} Ready")
            else:
                cli = self.upstream if namespace == THEIRS else self.ours
                out = await cli("site", "create", namespace, "--enable-link-access")
                assert f'Site "{namespace}" is ready.' in out, out

    async def apply(self, namespace: str, body: dict[str, Any]) -> str:
        """``body`` written to a file and applied with kubectl in ``namespace``, as a user applies YAML."""
        path = self.workdir / f"{body['kind'].lower()}-{body['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(body))
        return await self.kubectl("apply", "-n", namespace, "-f", str(path))

    # ---- tokens --------------------------------------------------------------------------------------------------
    async def upstream_token(self, name: str) -> dict[str, Any]:
        """Upstream's ``token issue`` in ``theirs``: the AccessToken its file holds."""
        out = await self.upstream("token", "issue", name)
        assert f"Token file {name} created" in out, out
        return _one_token((self.workdir / name).read_text())

    async def our_token(self, name: str) -> dict[str, Any]:
        """Our ``token issue`` in ``ours``: the AccessToken its file holds."""
        out = await self.ours("token", "issue", name)
        assert f"Token file {name} created" in out, out
        return _one_token((self.workdir / name).read_text())

    async def redeem_in_ours(self, token: dict[str, Any]) -> dict[str, Any]:
        """The token YAML applied in ``ours`` (as ``kubectl apply -f``), until its status says redeemed."""
        await self.apply(OURS, token)

        last: list[dict[str, Any]] = [{}]

        async def redeemed() -> dict[str, Any] | None:
            last[0] = status = await self.env.status("AccessToken", token["metadata"]["name"], OURS)
            return status if status.get("redeemed") is True else None
        try:
            found: dict[str, Any] = await self.env.wait_for(redeemed, 120, "our site to redeem upstream's token")
        except AssertionError as failure:
            raise AssertionError(f"{failure}; the AccessToken's status: {last[0]}") from None
        return found

    async def link_status(self, kind: str) -> list[str]:
        """The first row of ``link status`` (``kind`` ``upstream`` or ``ours``), its non-empty cells."""
        out = await (self.upstream("link", "status") if kind == "upstream" else self.ours("link", "status"))
        lines = out.strip().splitlines()
        return [cell for cell in lines[1].split("\t") if cell] if len(lines) >= 2 else []

    async def links(self, namespace: str) -> list[dict[str, Any]]:
        found, _ = await self.sim.api.list("links.skupper.io", namespace)
        return found

    async def router_log(self, namespace: str, container: str = "router") -> str:
        """The router container's log of the router Pod in ``namespace`` ('' before there is one)."""
        assert self.sim.cluster is not None
        pods, _ = await self.sim.api.list("pods", namespace, label_selector="skupper.io/component=router")
        texts = []
        for pod in pods:
            path = self.sim.cluster.container_log_path(namespace, pod["metadata"]["name"], container)
            if path is not None and await asyncio.to_thread(path.exists):
                texts.append(await asyncio.to_thread(path.read_text, errors="replace"))
        return "\n".join(texts)


def _one_token(text: str) -> dict[str, Any]:
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    tokens = [doc for doc in docs if doc.get("kind") == "AccessToken"]
    assert len(tokens) == 1, text[:2000]
    return tokens[0]


@contextlib.asynccontextmanager
async def mixed_environment(workdir: Path) -> AsyncIterator[MixedSites]:
    """One cluster (``site_support.site_environment``: our CRDs, the project image, namespace ``ours``) with
    upstream's namespace-scope install in ``theirs`` and our controller running; skipped without the peers."""
    where = peers()
    async with site_environment(OURS) as env:
        mixed = MixedSites(env, where, workdir)
        try:
            await mixed.install_upstream()
            await env.start_controller()
            yield mixed
        finally:
            with contextlib.suppress(Exception):
                await mixed.kubectl("delete", "namespace", THEIRS, "--wait=false", within=30)


# ---- upstream's hello-world across the two sites -----------------------------------------------------------------
ANSWER = re.compile(r"Hi, (?P<name>.+)\.  I am [A-Z][a-z]+ [A-Z][a-z]+ \((?P<pod>\S+)\)\.")


async def ready_pods(mixed: MixedSites, namespace: str, app: str, count: int) -> set[str]:
    """The names of ``count`` Ready Pods labelled ``app`` in ``namespace``, once there are that many."""
    async def check() -> set[str] | None:
        pods, _ = await mixed.sim.api.list("pods", namespace, label_selector=f"app={app}")
        ready = {p["metadata"]["name"] for p in pods if any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in p.get("status", {}).get("conditions", []))}
        return ready if len(ready) == count else None
    found: set[str] = await mixed.env.wait_for(check, 120, f"{count} Ready Pods app={app} in {namespace}")
    return found


async def say_hello(address: str, port: int, name: str) -> tuple[int, str]:
    """What the frontend's page does: ``POST /api/hello`` at ``address:port``; its status and body (bounded)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as client, client.post(
            f"http://{address}:{port}/api/hello", json={"name": name, "text": "Hello!"}) as response:
        return response.status, (await response.content.read(64 * 1024)).decode(errors="replace")


# ---- upstream's statuses about our site (issue 43 item 4) ---------------------------------------------------------
async def upstream_yaml(mixed: MixedSites, *args: str) -> dict[str, Any]:
    """What upstream's CLI prints with ``-o yaml`` for ``args`` (one object, e.g. ``link status <name>``)."""
    found = yaml.safe_load(await mixed.upstream(*args, "-o", "yaml"))
    assert isinstance(found, dict), found
    return found


def cli_flag(out: str, label: str) -> bool | None:
    """The ``true``/``false`` upstream's CLI prints after ``label`` (e.g. ``Has Matching Connector``), or None."""
    found = re.search(rf"^{re.escape(label)}:\s*(true|false)\s*$", out, re.MULTILINE)
    return None if found is None else found.group(1) == "true"


async def site_uid(mixed: MixedSites, namespace: str) -> str:
    """The uid of the one Site in ``namespace`` (upstream's site id)."""
    [site] = (await mixed.sim.api.list("sites.skupper.io", namespace))[0]
    return str(site["metadata"]["uid"])
