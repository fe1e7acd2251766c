"""Upstream's getting-started with the ``skupper`` command only (no kubectl, no hand-written YAML for Skupper's
resources): two clusters, West with link access, East without; a token issued in West and redeemed in East; East's
backend exposed by a Connector, a Listener in West; a client in West answered by East's Pods; ``listener status`` and
``link status`` show Ready; ``debug dump`` holds the named parts. The workloads are created through the API, as
``kubectl create deployment`` would."""

from __future__ import annotations

import asyncio
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cli_support import SKUPPER, cli_env
from e2e_support import greeting
from multisite_support import MultiSite, multisite_environment
from site_support import ECHO_IMAGE, SiteEnv


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west", "east") as environment:
        await environment.start_controllers()
        yield environment


async def skupper(env: SiteEnv, *args: str, cwd: Path) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        str(SKUPPER), *args, "-n", env.namespace, "--kubeconfig", str(env.sim.kubeconfig_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=cwd, env=cli_env(HOME=str(cwd)))
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


async def ok(env: SiteEnv, *args: str, cwd: Path) -> str:
    code, out = await skupper(env, *args, cwd=cwd)
    assert code == 0, f"skupper {' '.join(args)} -> {code}: {out}"
    return out


async def test_getting_started_with_the_skupper_command(sites: MultiSite, tmp_path: Path) -> None:
    west, east = sites["west"], sites["east"]
    assert (await ok(west, "site", "create", "west", "--enable-link-access", cwd=tmp_path)).strip() == (
        'Site "west" is ready.')
    assert (await ok(east, "site", "create", "east", cwd=tmp_path)).strip() == 'Site "east" is ready.'

    issued = await ok(west, "token", "issue", "west.token", "--redemptions-allowed", "1", cwd=tmp_path)
    assert "Token file west.token created" in issued
    assert "The token expires after 1 use(s) or after 15m0s." in issued
    token_text = (tmp_path / "west.token").read_text()
    assert token_text.startswith("apiVersion: skupper.io/v2alpha1\nkind: AccessToken\n")
    redeemed = await ok(east, "token", "redeem", "west.token", cwd=tmp_path)
    assert redeemed.strip().startswith('Token "west-') and redeemed.strip().endswith('" has been redeemed')

    await east.deployment("backend", ECHO_IMAGE, 2, {"app": "backend"})
    assert (await ok(east, "connector", "create", "backend", "7000", cwd=tmp_path)).strip() == (
        'Connector "backend" is configured.')
    assert (await ok(west, "listener", "create", "backend", "7000", "--wait", "ready", cwd=tmp_path)).strip() == (
        'Listener "backend" is ready.')
    pods = {p["metadata"]["name"] for p in await east.wait_ready_pods({"app": "backend"}, 2)}

    # a client in West is answered by East's Pods, the moment the Listener is Ready
    ip = (await west.service("backend"))["spec"]["clusterIP"]
    answers = {await greeting(ip, 7000) for _ in range(8)}
    assert answers == pods

    listeners = await ok(west, "listener", "status", cwd=tmp_path)
    header, row = listeners.splitlines()[:2]
    assert header.split("\t")[0] == "NAME" and "MATCHING-CONNECTOR" in header
    assert [c for c in row.split("\t") if c][:6] == ["backend", "Ready", "backend", "backend", "7000", "true"]
    links = await ok(east, "link", "status", cwd=tmp_path)
    assert links.startswith("NAME\t")
    assert [c for c in links.splitlines()[1].split("\t") if c][1:3] == ["Ready", "1"]

    dumped = await ok(west, "debug", "dump", "west-dump", cwd=tmp_path)
    name = dumped.split("archive:  ")[1].strip()
    assert name.startswith("west-dump-west-") and name.endswith(".tar.gz")
    with tarfile.open(tmp_path / name) as tar:
        names = set(tar.getnames())
    for part in ("/versions/skupper.yaml", "/site-namespace/resources/Site-west.yaml",
                 "/site-namespace/resources/Listener-backend.yaml",
                 "/site-namespace/resources/Configmap-skupper-network-status.yaml",
                 "/site-namespace/resources/Configmap-skupper-router.yaml", "/site-namespace/events.txt"):
        assert part.lstrip("/") in {n.lstrip("/") for n in names}, f"{part} missing from {sorted(names)}"
    assert any(n.lstrip("/").startswith("site-namespace/logs/skupper-router-") for n in names), sorted(names)
    with tarfile.open(tmp_path / name) as tar:
        metrics = [tar.extractfile(m) for m in tar.getmembers() if m.name.lstrip("/").startswith(
            "site-namespace/metrics/skupper-router-")]
        network = [tar.extractfile(m) for m in tar.getmembers() if m.name.lstrip("/").startswith(
            "site-namespace/network/skupper-router-")]
        assert metrics and b"service_network_listener_connections_total" in metrics[0].read()  # type: ignore[union-attr]
        assert network and b'"sites"' in network[0].read()                                   # type: ignore[union-attr]
