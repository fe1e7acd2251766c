"""Every topology Skupper users build still links, with ``skupper token issue`` / ``skupper token redeem`` only
(issue 48; docs/service-network-router.md, "Trust: proving a site"): three clusters, West, Middle and East, each
with link access. Middle links to West, East to West, then East to Middle as well (redundant links: Middle knows
East through West, so only East's site key proof and West's voucher get it a certificate), which makes a full
mesh; a client in West and one in Middle are answered by East's Pods; East deletes its Link to West and links
again with a new token; and a token holder naming East without the proof is still refused, with what to do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from e2e_support import greeting
from multisite_support import MultiSite, multisite_environment
from site_support import ECHO_IMAGE, SiteEnv
from test_link_identities import _redeem
from test_skupper_cli_getting_started import ok

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west", "middle", "east") as environment:
        await environment.start_controllers()
        yield environment


async def link(granting: SiteEnv, redeeming: SiteEnv, token: str, cwd: Path) -> str:
    """``skupper token issue`` in ``granting``, ``skupper token redeem`` in ``redeeming``: the redeemed token's
    name (the Link's)."""
    await ok(granting, "token", "issue", token, "--redemptions-allowed", "1", cwd=cwd)
    out = await ok(redeeming, "token", "redeem", token, cwd=cwd)
    name = yaml.safe_load((cwd / token).read_text())["metadata"]["name"]
    assert out.strip() == f'Token "{name}" has been redeemed', out
    return str(name)


async def links_ready(env: SiteEnv, names: set[str]) -> None:
    async def ready() -> bool:
        for name in names:
            status = await env.status("Link", name)
            if status.get("status") != "Ready":
                return False
        return True
    await env.wait_for(ready, 60, f"Links {sorted(names)} of {env.namespace} Ready")


async def answered_by(env: SiteEnv, pods: set[str]) -> None:
    ip = (await env.service("backend"))["spec"]["clusterIP"]

    async def all_answer() -> bool:
        try:
            return {await greeting(ip, 7000) for _ in range(8)} == pods
        except OSError:
            return False
    await env.wait_for(all_answer, 60, f"a client in {env.namespace} answered by East's Pods")


async def test_full_mesh_redundant_links_and_relinking_with_tokens(sites: MultiSite, tmp_path: Path) -> None:
    west, middle, east = sites["west"], sites["middle"], sites["east"]
    for env in (west, middle, east):
        await ok(env, "site", "create", env.namespace, "--enable-link-access", cwd=tmp_path)
    east_uid = (await east.get("Site", "east"))["metadata"]["uid"]

    # Middle to West, East to West: first issuances (no site knew them)
    await link(west, middle, "west-for-middle.token", tmp_path)
    east_to_west = await link(west, east, "west-for-east.token", tmp_path)
    await links_ready(east, {east_to_west})

    async def middle_knows_east() -> bool:
        config_map = await middle.api.get("configmaps", "skupper-network-status", "middle")
        return east_uid in str(config_map.get("data"))
    await middle.wait_for(middle_knows_east, 60, "Middle knows East through West")

    # East to Middle as well: Middle knows East, and East proves it is East (West vouches for its key)
    east_to_middle = await link(middle, east, "middle-for-east.token", tmp_path)
    await links_ready(east, {east_to_west, east_to_middle})
    records = await middle.api.list("configmaps", "middle",
                                    label_selector="internal.skupper.io/router-config=link-identity")
    assert [r["data"]["identity"] for r in records[0]] == [east_uid]
    assert records[0][0]["data"]["siteKey"]

    await east.deployment("backend", ECHO_IMAGE, 2, {"app": "backend"})
    await ok(east, "connector", "create", "backend", "7000", cwd=tmp_path)
    for env in (west, middle):
        await ok(env, "listener", "create", "backend", "7000", cwd=tmp_path)
    pods = {p["metadata"]["name"] for p in await east.wait_ready_pods({"app": "backend"}, 2)}
    await answered_by(west, pods)
    await answered_by(middle, pods)

    # a token holder naming East, as upstream's redeemer does (no proof): refused, and told what to do
    await ok(west, "token", "issue", "stolen.token", cwd=tmp_path)
    stolen = yaml.safe_load((tmp_path / "stolen.token").read_text())["spec"]
    status, text = await _redeem(stolen, "thief", east_uid)
    assert status == 409, text
    assert f"a link certificate for {east_uid} was already issued" in text
    assert "redeem the token with this project's skupper (upstream's redeemer sends no proof)" in text

    # East deletes its Link to West and links again with a new token: still answered through both
    await ok(east, "link", "delete", east_to_west, cwd=tmp_path)

    async def gone() -> bool:
        try:
            await east.get("Link", east_to_west)
        except Exception:
            return True
        return False
    await east.wait_for(gone, 30, "East's Link to West deleted")
    again = await link(west, east, "west-again.token", tmp_path)
    await links_ready(east, {again, east_to_middle})
    await answered_by(west, pods)

