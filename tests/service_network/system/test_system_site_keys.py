"""A system site links to two sites of one network with ``skupper token issue`` / ``skupper system apply``
(issue 48; docs/service-network-router.md, "Proving a site"): West and East are linked; the laptop redeems a
token of West, then one of East, which knows the laptop through West already: the laptop's redemption proves its
site key (a file of its runtime directory) with West's voucher, so East issues it a second link, and East's router
accepts the laptop's link directly; the laptop then deletes that Link and re-links with a new token of East."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from e2e_support import greeting
from multisite_support import MultiSite
from site_support import ECHO_IMAGE, SiteEnv
from test_site_access import sites  # noqa: F401  (the fixture: West and East, each with its controller)
from test_system_site import free_port, resource, skupper

pytestmark = pytest.mark.asyncio


async def _laptop_links(env: SiteEnv) -> tuple[str | None, bool]:
    """The laptop's site id as ``env``'s routers know it, and whether it has a link of its own into ``env``."""
    config_map = await env.api.get("configmaps", "skupper-network-status", env.namespace)
    laptop, direct = None, False
    for text in (config_map.get("data") or {}).values():
        status = json.loads(text)
        laptop = next((s["id"] for s in status.get("sites", []) if s.get("name") == "laptop"), laptop)
        direct |= any(i.get("identity") == laptop for i in status.get("incoming", []) if laptop)
    return laptop, direct


async def _west_and_east(network: MultiSite, cwd: Path) -> str:
    """West and East with link access, East linked to West, East serving ``backend``: the Pod that answers."""
    west, east = network["west"], network["east"]
    for env in (west, east):
        await skupper("site", "create", env.namespace, "--enable-link-access", cwd=cwd, env=env)
    await skupper("token", "issue", "west-for-east.token", cwd=cwd, env=west)
    await skupper("token", "redeem", "west-for-east.token", cwd=cwd, env=east)
    await east.deployment("backend", ECHO_IMAGE, 1, {"app": "backend"})
    await skupper("connector", "create", "backend", "7000", cwd=cwd, env=east)
    return str((await east.wait_ready_pods({"app": "backend"}, 1))[0]["metadata"]["name"])


async def _laptop_links_to_west_then_east(network: MultiSite, cwd: Path, pod: str, to_west: str,
                                          to_east: str) -> str:
    """The laptop (a system site with a Listener for ``backend``) applies ``to_west`` (a token or a generated
    link) and is set up: answered by East's ``pod`` through West; once East knows it, it applies ``to_east``
    and reloads: its own link into East is accepted. ``skupper system status`` then."""
    east = network["east"]
    listen_port = free_port()
    (cwd / "laptop.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "laptop", {}),
        resource("Listener", "backend", {"routingKey": "backend", "host": "127.0.0.1", "port": listen_port})]))
    await skupper("system", "apply", "-f", "laptop.yaml", "-n", "laptop", cwd=cwd)
    await skupper("system", "apply", "-f", to_west, "-n", "laptop", cwd=cwd)
    await skupper("system", "setup", "-n", "laptop", cwd=cwd)
    assert await east.wait_for(lambda: greeting("127.0.0.1", listen_port), 60,
                               "the laptop's Listener answered through West") == pod

    async def east_knows_laptop() -> str | None:
        return (await _laptop_links(east))[0]
    laptop_id = await east.wait_for(east_knows_laptop, 60, "East knows the laptop through West")

    # the second link: East knows the laptop, which proves its site key (West vouches for it)
    await skupper("system", "apply", "-f", to_east, "-n", "laptop", cwd=cwd)
    await skupper("system", "reload", "-n", "laptop", cwd=cwd)

    async def linked_directly() -> bool:
        return (await _laptop_links(east)) == (laptop_id, True)
    await east.wait_for(linked_directly, 60, "the laptop's own link into East")
    return await skupper("system", "status", "-n", "laptop", cwd=cwd)


async def _relinks_to_east(network: MultiSite, cwd: Path) -> None:
    """The laptop deletes its Link into East (the one East's token gave), East drops it; a new token of East,
    applied and reloaded with upstream's commands, links the laptop into East again: East, which issued the laptop
    its identity before, issues it again to the same site key."""
    east = network["east"]
    laptop_id = (await _laptop_links(east))[0]
    token = yaml.safe_load((cwd / "east.token").read_text())["metadata"]["name"]
    await skupper("system", "delete", "Link", token, "-n", "laptop", cwd=cwd)

    async def unlinked() -> bool:
        return (await _laptop_links(east)) == (laptop_id, False)
    await east.wait_for(unlinked, 60, "East without the laptop's own link")
    await skupper("token", "issue", "east-again.token", cwd=cwd, env=east)
    await skupper("system", "apply", "-f", "east-again.token", "-n", "laptop", cwd=cwd)
    await skupper("system", "reload", "-n", "laptop", cwd=cwd)

    async def relinked() -> bool:
        return (await _laptop_links(east)) == (laptop_id, True)
    await east.wait_for(relinked, 60, "the laptop's link into East again")


async def test_a_system_site_links_to_two_sites_that_know_it(sites: MultiSite, tmp_path: Path) -> None:  # noqa: F811
    pod = await _west_and_east(sites, tmp_path)
    await skupper("token", "issue", "west.token", cwd=tmp_path, env=sites["west"])
    await skupper("token", "issue", "east.token", cwd=tmp_path, env=sites["east"])
    try:
        status = await _laptop_links_to_west_then_east(sites, tmp_path, pod, "west.token", "east.token")
        rows = [tuple(c for c in line.split("\t") if c)[:3] for line in status.splitlines()]
        assert [r[2] for r in rows if r and r[0] == "AccessToken"] == ["Ready", "Ready"], status
        assert (tmp_path / "data" / "skupper" / "namespaces" / "laptop" / "runtime" / "site-key" /
                "tls.key").is_file()
        await _relinks_to_east(sites, tmp_path)
    finally:
        await skupper("system", "uninstall", "--force", "-n", "laptop", cwd=tmp_path)


async def test_a_system_site_links_to_two_sites_with_generated_links(sites: MultiSite,  # noqa: F811
                                                                     tmp_path: Path) -> None:
    """The same with ``skupper link generate`` of West and of East, applied with ``skupper system apply``: the
    system site proves its key where each credential was issued, so East binds its credential to the laptop it
    knows through West."""
    pod = await _west_and_east(sites, tmp_path)
    for name in ("west", "east"):
        (tmp_path / f"{name}-link.yaml").write_text(await skupper(
            "link", "generate", "--tls-credentials", f"{name}-for-laptop", cwd=tmp_path, env=sites[name]))
    try:
        await _laptop_links_to_west_then_east(sites, tmp_path, pod, "west-link.yaml", "east-link.yaml")
    finally:
        await skupper("system", "uninstall", "--force", "-n", "laptop", cwd=tmp_path)
