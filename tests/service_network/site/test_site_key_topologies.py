"""Every topology Skupper users build still links, with ``skupper token issue`` / ``skupper token redeem`` only
(issue 48; docs/service-network-router.md, "Trust: proving a site"): three clusters, West, Middle and East, each
with link access. Middle links to West, East to West, then East to Middle as well (redundant links: Middle knows
East through West, so only East's site key proof and West's voucher get it a certificate), which makes a full
mesh; a client in West and one in Middle are answered by East's Pods; East deletes its Link to West and links
again with a new token; and a token holder naming East without the proof is still refused, with what to do. The
same with ``skupper link generate``: East's controller proves its key to the site that issued the credential
(``/bindings/<fingerprint>`` of its grant server), which binds the credential to East; a credential holder
without East's key cannot."""

from __future__ import annotations

import base64
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from e2e_support import greeting
from multisite_support import MultiSite, multisite_environment
from site_support import ECHO_IMAGE, SiteEnv
from test_link_identities import _redeem
from test_skupper_cli_getting_started import ok

from service_network.site.identities import fingerprint
from service_network.site.site_keys import (
    ANNOTATION_SITE_BINDING,
    PROOF_HEADER,
    make_proof,
    new_site_key,
    parse_binding,
)

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


async def three_sites(sites: MultiSite, cwd: Path) -> str:
    """West, Middle and East with link access (``skupper site create``); East's site id."""
    for env in sites:
        await ok(env, "site", "create", env.namespace, "--enable-link-access", cwd=cwd)
    return str((await sites["east"].get("Site", "east"))["metadata"]["uid"])


async def knows(env: SiteEnv, site_id: str) -> None:
    async def known() -> bool:
        config_map = await env.api.get("configmaps", "skupper-network-status", env.namespace)
        return site_id in str(config_map.get("data"))
    await env.wait_for(known, 60, f"{env.namespace} knows {site_id} through the network")


async def served_by_east(sites: MultiSite, cwd: Path) -> set[str]:
    """A backend in East (Connector), Listeners in West and Middle, each answered by East's two Pods."""
    east = sites["east"]
    await east.deployment("backend", ECHO_IMAGE, 2, {"app": "backend"})
    await ok(east, "connector", "create", "backend", "7000", cwd=cwd)
    for name in ("west", "middle"):
        await ok(sites[name], "listener", "create", "backend", "7000", cwd=cwd)
    pods = {p["metadata"]["name"] for p in await east.wait_ready_pods({"app": "backend"}, 2)}
    for name in ("west", "middle"):
        await answered_by(sites[name], pods)
    return pods


async def test_full_mesh_redundant_links_and_relinking_with_tokens(sites: MultiSite, tmp_path: Path) -> None:
    west, middle, east = sites["west"], sites["middle"], sites["east"]
    east_uid = await three_sites(sites, tmp_path)

    # Middle to West, East to West: first issuances (no site knew them)
    await link(west, middle, "west-for-middle.token", tmp_path)
    east_to_west = await link(west, east, "west-for-east.token", tmp_path)
    await links_ready(east, {east_to_west})

    await knows(middle, east_uid)

    # East to Middle as well: Middle knows East, and East proves it is East (West vouches for its key)
    east_to_middle = await link(middle, east, "middle-for-east.token", tmp_path)
    await links_ready(east, {east_to_west, east_to_middle})
    records = await middle.api.list("configmaps", "middle",
                                    label_selector="internal.skupper.io/router-config=link-identity")
    assert [r["data"]["identity"] for r in records[0]] == [east_uid]
    assert records[0][0]["data"]["siteKey"]

    pods = await served_by_east(sites, tmp_path)

    # a token holder naming East, as upstream's redeemer does (no proof): refused, and told what to do
    await ok(west, "token", "issue", "stolen.token", cwd=tmp_path)
    stolen = yaml.safe_load((tmp_path / "stolen.token").read_text())["spec"]
    status, text = await _redeem(stolen, "thief", east_uid)
    assert status == 409, text
    assert f"a link certificate for {east_uid} was already issued" in text
    assert "redeem the token with this project's skupper (upstream's redeemer sends no proof)" in text

    # East deletes its Link to West and links again with a new token: still answered through both
    await ok(east, "link", "delete", east_to_west, cwd=tmp_path)

    await east.wait_for(lambda: _gone(east, east_to_west), 30, "East's Link to West deleted")
    again = await link(west, east, "west-again.token", tmp_path)
    await links_ready(east, {again, east_to_middle})
    await answered_by(west, pods)



async def generated_link(granting: SiteEnv, dialing: SiteEnv, credential: str, cwd: Path) -> str:
    """``skupper link generate`` in ``granting`` (a credential of its own), the printed Secret and Link applied
    in ``dialing`` as ``kubectl apply -f`` would: the Link's name."""
    out = await ok(granting, "link", "generate", "--tls-credentials", credential, cwd=cwd)
    link_doc, secret = list(yaml.safe_load_all(out))
    assert (link_doc["kind"], secret["kind"]) == ("Link", "Secret")
    assert ANNOTATION_SITE_BINDING in secret["metadata"].get("annotations", {}), secret["metadata"]
    await dialing.api.create("secrets", {**secret, "metadata": {**secret["metadata"],
                                                                "namespace": dialing.namespace}}, dialing.namespace)
    await dialing.create("Link", link_doc["metadata"]["name"], link_doc["spec"])
    return str(link_doc["metadata"]["name"])


async def test_full_mesh_and_relinking_with_generated_links(sites: MultiSite, tmp_path: Path) -> None:
    west, middle, east = sites["west"], sites["middle"], sites["east"]
    east_uid = await three_sites(sites, tmp_path)

    middle_to_west = await generated_link(west, middle, "for-middle", tmp_path)
    await links_ready(middle, {middle_to_west})
    east_to_west = await generated_link(west, east, "for-east", tmp_path)
    await links_ready(east, {east_to_west})

    await knows(middle, east_uid)

    # a credential of Middle's for East, whom Middle knows through West: East proves its key (West vouches)
    east_to_middle = await generated_link(middle, east, "middle-for-east", tmp_path)
    await links_ready(east, {east_to_west, east_to_middle})

    pods = await served_by_east(sites, tmp_path)

    # a holder of a generated credential cannot bind it to East: without a proof, or with its own key's
    status, text = await _bind_as(middle, "stolen", east_uid, None, tmp_path)
    assert (status, text) == (400, "a binding request needs the headers subject and skupper-site-proof\n")
    status, text = await _bind_as(middle, "stolen", east_uid, new_site_key(), tmp_path)
    assert status == 409, text
    assert text.startswith(f"a link certificate for {east_uid} was already issued (skupper link generate, "), text
    assert "to a site with another site key" in text and text.rstrip().endswith(f"only that site can link as {east_uid}")

    # East deletes its Link to West and links again with a new generated credential
    await ok(east, "link", "delete", east_to_west, cwd=tmp_path)
    await east.wait_for(lambda: _gone(east, east_to_west), 30, "East's Link to West deleted")
    again = await generated_link(west, east, "for-east-again", tmp_path)
    await links_ready(east, {again, east_to_middle})
    await answered_by(west, pods)


async def _bind_as(granting: SiteEnv, credential: str, subject: str, key: bytes | None,
                   cwd: Path) -> tuple[int, str]:
    """A binding request for a credential ``skupper link generate`` printed, as its holder can make it."""
    out = await ok(granting, "link", "generate", "--tls-credentials", credential, cwd=cwd)
    secret = next(d for d in yaml.safe_load_all(out) if d["kind"] == "Secret")
    base, ca = parse_binding(secret["metadata"]["annotations"][ANNOTATION_SITE_BINDING])
    cert = base64.b64decode(secret["data"]["tls.crt"])
    url = f"{base}/bindings/{fingerprint(cert).removeprefix('sha256:')}"
    headers = {"subject": subject}
    if key is not None:
        headers[PROOF_HEADER] = make_proof(key, subject, url, int(time.time()))
    async with aiohttp.ClientSession() as session, session.post(
            url, data=b"", ssl=ssl.create_default_context(cadata=ca), headers=headers) as response:
        return response.status, (await response.read()).decode()


async def _gone(env: SiteEnv, link: str) -> bool:
    try:
        await env.get("Link", link)
    except Exception:
        return True
    return False
