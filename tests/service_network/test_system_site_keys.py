"""A system site links to two sites of one network with ``skupper token issue`` / ``skupper system apply``
(issue 48; docs/service-network-router.md, "Proving a site"): West and East are linked; the laptop redeems a
token of West, then one of East, which knows the laptop through West already: the laptop's redemption proves its
site key (a file of its runtime directory) with West's voucher, so East issues it a second link, and East's router
accepts the laptop's link directly."""

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


async def test_a_system_site_links_to_two_sites_that_know_it(sites: MultiSite, tmp_path: Path) -> None:  # noqa: F811
    west, east = sites["west"], sites["east"]
    for env in (west, east):
        await skupper("site", "create", env.namespace, "--enable-link-access", cwd=tmp_path, env=env)
    await skupper("token", "issue", "west-for-east.token", cwd=tmp_path, env=west)
    await skupper("token", "redeem", "west-for-east.token", cwd=tmp_path, env=east)
    await skupper("token", "issue", "west.token", cwd=tmp_path, env=west)
    await skupper("token", "issue", "east.token", cwd=tmp_path, env=east)
    await east.deployment("backend", ECHO_IMAGE, 1, {"app": "backend"})
    await skupper("connector", "create", "backend", "7000", cwd=tmp_path, env=east)
    pod = (await east.wait_ready_pods({"app": "backend"}, 1))[0]["metadata"]["name"]

    listen_port = free_port()
    (tmp_path / "laptop.yaml").write_text(yaml.safe_dump_all([
        resource("Site", "laptop", {}),
        resource("Listener", "backend", {"routingKey": "backend", "host": "127.0.0.1", "port": listen_port})]))
    try:
        await skupper("system", "apply", "-f", "laptop.yaml", "-n", "laptop", cwd=tmp_path)
        await skupper("system", "apply", "-f", "west.token", "-n", "laptop", cwd=tmp_path)
        await skupper("system", "setup", "-n", "laptop", cwd=tmp_path)
        assert await east.wait_for(lambda: greeting("127.0.0.1", listen_port), 60,
                                   "the laptop's Listener answered through West") == pod

        async def east_knows_laptop() -> str | None:
            return (await _laptop_links(east))[0]
        laptop_id = await east.wait_for(east_knows_laptop, 60, "East knows the laptop through West")

        # the second token: East knows the laptop, which proves its site key (West vouches for it)
        await skupper("system", "apply", "-f", "east.token", "-n", "laptop", cwd=tmp_path)
        await skupper("system", "reload", "-n", "laptop", cwd=tmp_path)

        async def linked_directly() -> bool:
            return (await _laptop_links(east)) == (laptop_id, True)
        await east.wait_for(linked_directly, 60, "the laptop's own link into East")
        status = await skupper("system", "status", "-n", "laptop", cwd=tmp_path)
        rows = [tuple(c for c in line.split("\t") if c)[:3] for line in status.splitlines()]
        assert [r[2] for r in rows if r and r[0] == "AccessToken"] == ["Ready", "Ready"], status
        assert (tmp_path / "data" / "skupper" / "namespaces" / "laptop" / "runtime" / "site-key" /
                "tls.key").is_file()
    finally:
        await skupper("system", "uninstall", "-n", "laptop", cwd=tmp_path)
