"""No token holder becomes another site (docs/service-network-router.md, "Trust"): a grant server never issues a
link certificate for an identity its site already issued, or that its network already knows, or its own; what it
issued is recorded, with the certificate's fingerprint, in a ConfigMap per identity, which survives the controller; and a redemption that fails after its identity was recorded takes the record back.

Two clusters side by side (West grants, East redeems), each with its site controller, grant server and routers;
the redemptions an attacker makes are upstream's requests (the code as the body, headers ``name`` and ``subject``)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from e2e_support import echo_backend, greeting, greetings, link_with_token, service_ip
from multisite_support import MultiSite, multisite_environment
from router_support import Backend, free_port
from test_access_grants import _grant, _linked_sites, _token, _token_status

from service_network.router.dataplane import router_binary
from service_network.site import pki
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

    # The record deleted by hand comes back: West's router reports East's live link with its certificate, and the
    # controller binds that identity to it at once (as for a certificate issued elsewhere).
    await west.wait_for(lambda: _knows(sites, "west", east_uid), 30, "West's routers know East")
    await west.api.delete("configmaps", identity_object_name(east_uid), "west")

    async def rebound() -> dict[str, Any] | None:
        record = (await _records(sites, "west")).get(east_uid)
        return record if record and record["source"] == "first link" else None
    record = await west.wait_for(rebound, 30, "East's identity bound again from its live link")
    assert record["certificate"] == fingerprint(east_cert)
    status, text = await _redeem(grant, "stolen", east_uid)
    assert status == 409, text
    assert text.startswith(f"a link certificate for {east_uid} was already issued (first link, "), text
    assert (await west.status("AccessGrant", "g"))["redemptions"] == 1

    # A new identity is issued (once), and a second redemption for it is refused.
    status, _ = await _redeem(grant, "newcomer", "newcomer-uid")
    assert status == 200
    status, text = await _redeem(grant, "again", "newcomer-uid")
    assert status == 409 and "newcomer-uid was already issued (AccessGrant g" in text, text
    assert (await west.status("AccessGrant", "g"))["redemptions"] == 2
    assert set(await _records(sites, "west")) == {east_uid, "newcomer-uid"}

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


@contextlib.asynccontextmanager
async def _impostor(directory: Path, *, router: str, certificate: pki.KeyPair, ca: bytes, access: tuple[str, int],
                    backend: Backend) -> AsyncIterator[None]:
    """A router run by hand (not a site's): it calls itself ``router``, links to ``access`` with ``certificate``
    and offers ``backend`` under the key ``backend``, as an attacker holding that certificate would."""
    config = _impostor_files(directory, router=router, certificate=certificate, ca=ca, access=access,
                             backend=backend)
    process = await asyncio.create_subprocess_exec(
        router_binary(None), "--config", str(config), "--log-level", "warn",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        yield
    finally:
        process.kill()
        await process.wait()


def _impostor_files(directory: Path, *, router: str, certificate: pki.KeyPair, ca: bytes, access: tuple[str, int],
                    backend: Backend) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    files = {"ca": directory / "ca.crt", "cert": directory / "tls.crt", "key": directory / "tls.key"}
    files["ca"].write_bytes(ca)
    files["cert"].write_bytes(certificate.cert)
    files["key"].write_bytes(certificate.key)
    document = {"version": 1, "site": {"id": router, "name": "east"}, "router": {"id": router},
                "tlsProfiles": [{"name": "stolen", "files": {k: str(v) for k, v in files.items()}}],
                "links": [{"name": "to-west", "host": access[0], "port": access[1], "tlsProfile": "stolen"}],
                "connectors": [{"name": "backend", "routingKey": "backend", "port": backend.port,
                                "targets": [{"host": backend.host}]}]}
    (directory / "router.json").write_text(json.dumps(document))
    return directory / "router.json"


async def _events(env: Any, kind: str, name: str, reason: str) -> list[str]:
    events, _ = await env.api.list("events.events.k8s.io", env.namespace)
    return [e.get("note", "") for e in events if e.get("reason") == reason
            and e.get("regarding", {}).get("kind") == kind and e.get("regarding", {}).get("name") == name]


async def test_a_certificate_for_a_linked_identity_links_nowhere_and_diverts_nothing_through_restarts(
        sites: MultiSite, tmp_path: Path) -> None:
    """East redeemed West's token; an impostor holds another valid certificate naming East, from West's CA (as
    credentials made elsewhere, or before records were kept, would be), calls itself East and links to West with
    its own backend for ``backend``. West's router refuses it, West's Site gets a Warning naming the identity, and
    none of West's connections to ``backend`` reaches the impostor's backend: not before, nor after West's and
    East's router Pods and West's controller are restarted (the binding is the site's record)."""
    west, east = sites["west"], sites["east"]
    grant_address = (west.sim.address_block.client_ip(254), free_port(west.sim.address_block.client_ip(254)))
    await west.start_controller(grant_server_address=grant_address)
    await east.start_controller()
    await sites.create_site("west", link_access="default")
    await sites.create_site("east", link_access=None)
    east_pods = await echo_backend(east, 2, key="backend", connector="backend")
    await west.create("Listener", "backend", {"routingKey": "backend", "host": "backend", "port": 7000})
    await link_with_token(west, east, within=60)
    ip = await service_ip(west, "backend", within=60)
    await west.wait_for(lambda: _answered_by(ip, east_pods), 60, "West's client answered by East")

    east_uid = (await east.get("Site", "east"))["metadata"]["uid"]
    west_ca = await sites.site_ca("west")
    access = await sites.access_endpoint("west")
    impostor_backend = await Backend("impostor-backend", west.sim.address_block.client_ip(250)).start()
    notes: list[str] = []
    try:
        async with _impostor(tmp_path / "impostor", router=east_uid, certificate=pki.issue(west_ca, east_uid,
                             client=True), ca=west_ca.cert, access=access, backend=impostor_backend):
            notes = await west.wait_for(lambda: _events(west, "Site", "west", "LinkRefused"), 60,
                                        "a Warning Event on West's Site")
            answers = await greetings(ip, 7000, 30)
            assert set(answers) <= east_pods, answers

            # restarts: West's and East's router Pods, then West's controller
            for env in (west, east):
                pods, _ = await env.api.list("pods", env.namespace, label_selector="skupper.io/component=router")
                for pod in pods:
                    await env.api.delete("pods", pod["metadata"]["name"], env.namespace)
            await west.controllers[-1].stop()
            await west.start_controller(grant_server_address=grant_address)
            await west.wait_for(lambda: _answered_by(ip, east_pods), 90, "West's client answered by East again")
            answers = await greetings(ip, 7000, 30)
            assert set(answers) <= east_pods, answers
            assert impostor_backend.accepted == 0
    finally:
        await impostor_backend.stop()
    assert f"refused a link as {east_uid}: {east_uid} " in notes[0], notes


async def _answered_by(ip: str, pods: set[str]) -> bool:
    return await greeting(ip, 7000) in pods
