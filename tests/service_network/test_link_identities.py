"""No token holder becomes another site (docs/service-network-router.md, "Trust"): a grant server never issues a
link certificate for an identity its site already issued, or that its network already knows, or its own; what it
issued is recorded, with the certificate's fingerprint, in a ConfigMap per identity, which survives the controller; and a redemption that fails after its identity was recorded takes the record back.

Two clusters side by side (West grants, East redeems), each with its site controller, grant server and routers;
the redemptions an attacker makes are upstream's requests (the code as the body, headers ``name`` and ``subject``)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from multisite_support import MultiSite, multisite_environment
from test_access_grants import _grant, _linked_sites, _token, _token_status

from service_network.site.identities import fingerprint, identity_object_name

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west", "east") as environment:
        yield environment


async def _redeem(grant: dict[str, Any], name: str, subject: str) -> tuple[int, str]:
    """Upstream's redemption request, as an attacker holding the grant's url, code and CA makes it."""
    context = ssl.create_default_context(cadata=grant["ca"])
    async with aiohttp.ClientSession() as session, session.post(
            grant["url"], data=grant["code"].encode(), ssl=context,
            headers={"name": name, "subject": subject}) as response:
        return response.status, (await response.read()).decode()


async def _records(sites: MultiSite, name: str) -> dict[str, dict[str, Any]]:
    """The identity records in the namespace of ``name``, as kubectl shows them: identity -> data."""
    env = sites[name]
    objects, _ = await env.api.list("configmaps", env.namespace,
                                    label_selector="internal.skupper.io/router-config=link-identity")
    found = {}
    for config_map in objects:
        data = config_map["data"]
        assert config_map["metadata"]["name"] == identity_object_name(data["identity"])
        assert [o["kind"] for o in config_map["metadata"]["ownerReferences"]] == ["Site"]
        found[data["identity"]] = data
    return found


async def _knows(sites: MultiSite, name: str, site_id: str) -> bool:
    """Whether the routers of ``name`` report ``site_id`` in their network status."""
    env = sites[name]
    try:
        config_map = await env.api.get("configmaps", "skupper-network-status", env.namespace)
    except Exception:
        return False
    for text in (config_map.get("data") or {}).values():
        if any(site.get("id") == site_id for site in json.loads(text).get("sites", [])):
            return True
    return False


async def test_a_token_holder_cannot_get_a_certificate_naming_a_site_that_exists(sites: MultiSite) -> None:
    west, east = sites["west"], sites["east"]
    await _linked_sites(sites)
    west_uid = (await west.get("Site", "west"))["metadata"]["uid"]
    east_uid = (await east.get("Site", "east"))["metadata"]["uid"]
    grant = await _grant(west, "g", redemptionsAllowed=5, expirationWindow="1h")

    # East redeems one of West's grants: its identity is recorded at West with its certificate's fingerprint.
    await _token(east, "to-west", grant)
    await _token_status(east, "to-west", "Ready")
    secret = await east.api.get("secrets", "to-west", "east")
    east_cert = base64.b64decode(secret["data"]["tls.crt"])
    records = await _records(sites, "west")
    assert set(records) == {east_uid}
    assert records[east_uid]["certificate"] == fingerprint(east_cert)
    assert records[east_uid]["source"] == "AccessGrant g"

    # A holder of the same grant asks for a certificate naming East: refused, nothing counted or recorded.
    status, text = await _redeem(grant, "stolen", east_uid)
    assert status == 409, text
    assert text.startswith(f"a link certificate for {east_uid} was already issued (AccessGrant g, ")
    assert (await west.status("AccessGrant", "g"))["redemptions"] == 1
    assert await _records(sites, "west") == records

    # ... or naming West itself.
    status, text = await _redeem(grant, "self", west_uid)
    assert (status, text) == (400, "a site cannot link to itself\n")

    # Without the record (deleted by hand), the identity is still refused while West's network knows East.
    await west.wait_for(lambda: _knows(sites, "west", east_uid), 30, "West's routers know East")
    await west.api.delete("configmaps", identity_object_name(east_uid), "west")
    status, text = await _redeem(grant, "stolen", east_uid)
    assert status == 409, text
    assert text == f"{east_uid} is already a site or router of this network; an identity cannot be issued twice\n"
    assert (await west.status("AccessGrant", "g"))["redemptions"] == 1

    # A new identity is issued (once), and a second redemption for it is refused.
    status, _ = await _redeem(grant, "newcomer", "newcomer-uid")
    assert status == 200
    status, text = await _redeem(grant, "again", "newcomer-uid")
    assert status == 409 and "newcomer-uid was already issued (AccessGrant g" in text, text
    assert (await west.status("AccessGrant", "g"))["redemptions"] == 2
    assert set(await _records(sites, "west")) == {"newcomer-uid"}

    # The records survive the controller: a new one refuses what the old one issued.
    await west.controllers[0].stop()
    await west.start_controller(grant_server_address=_address(grant))
    status, text = await _redeem(grant, "after-restart", "newcomer-uid")
    assert status == 409, text


def _address(grant: dict[str, Any]) -> tuple[str, int]:
    host_port = grant["url"].split("/")[2]
    host, port = host_port.rsplit(":", 1)
    return host, int(port)


async def test_a_redemption_that_loses_the_race_for_the_last_use_takes_its_identity_back(sites: MultiSite) -> None:
    west = sites["west"]
    await _linked_sites(sites)
    grant = await _grant(west, "g", redemptionsAllowed=2, expirationWindow="1h")

    results = await asyncio.gather(*(_redeem(grant, f"t{n}", f"site-{n}") for n in range(4)))
    winners = {f"site-{n}" for n, (status, _) in enumerate(results) if status == 200}
    assert len(winners) == 2, results
    assert sorted(status for status, _ in results) == [200, 200, 404, 404]
    # only the winners' identities are kept: a refused redemption leaves nothing behind
    assert set(await _records(sites, "west")) == winners
