"""Static links as upstream's ``skupper link generate`` makes them (``internal/cmd/skupper/link/kube/
link_generate.go``, v2.2.1): in the granting site a ``Certificate`` named ``link-<site>`` (``ca`` = the Site's
``status.defaultIssuer``, ``client: true``, ``subject`` = its link endpoints' hosts joined by commas); printed, Links
``link-<site>-<group>`` (``tlsCredentials`` = the Certificate's name, ``cost`` 1, that group's endpoints) and a
``kubernetes.io/tls`` Secret of the Certificate's name (``tls.crt``, ``tls.key``, ``ca.crt``).

Applied in a second site the Link comes Ready and carries traffic; the credential is then bound to that site (its
identity recorded by the granting site at the first link), so a third site applying the very same Link and Secret
is refused, with a Warning on its Link, and the first keeps all of its traffic."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_support import echo_backend, greeting, greetings, service_ip
from multisite_support import MultiSite, multisite_environment
from test_skupper_cli_getting_started import ok

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def sites() -> AsyncIterator[MultiSite]:
    async with multisite_environment("west", "east", "rogue") as environment:
        yield environment


async def _link_generate(sites: MultiSite, site: str) -> list[dict[str, Any]]:
    """What upstream's ``skupper link generate`` does in ``site`` and prints: the Links and the Secret."""
    env = sites[site]

    async def ready_site() -> dict[str, Any] | None:
        status = (await env.get("Site", site)).get("status") or {}
        return status if status.get("endpoints") and status.get("defaultIssuer") else None
    status = await env.wait_for(ready_site, 60, f"Site {site} with link access and a default issuer")
    assert status["defaultIssuer"] == "skupper-site-ca"
    name = f"link-{site}"
    await env.create("Certificate", name, {"ca": status["defaultIssuer"], "client": True,
                                           "subject": ",".join(e["host"] for e in status["endpoints"])})
    secret = await env.wait_for(lambda: env.api.get("secrets", name, env.namespace), 60, f"Secret {name}")
    groups: dict[str, list[dict[str, Any]]] = {}
    for endpoint in status["endpoints"]:
        groups.setdefault(endpoint.get("group", ""), []).append(endpoint)
    links = [{"apiVersion": "skupper.io/v2alpha1", "kind": "Link", "metadata": {"name": f"{name}-{group}"},
              "spec": {"tlsCredentials": name, "cost": 1, "endpoints": endpoints}}
             for group, endpoints in groups.items()]
    printed_secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "kubernetes.io/tls",
                      "data": {k: secret["data"][k] for k in ("tls.crt", "tls.key", "ca.crt")}}
    return [*links, printed_secret]


async def _our_link_generate(sites: MultiSite, site: str, tmp_path: Path) -> list[dict[str, Any]]:
    """What this project's ``skupper link generate`` prints (no ``--subject``: upstream's flags)."""
    env = sites[site]

    async def ready_site() -> bool:
        status = (await env.get("Site", site)).get("status") or {}
        return bool(status.get("endpoints")) and status.get("status") == "Ready"
    await env.wait_for(ready_site, 60, f"Site {site} Ready with link access")
    out = await ok(env, "link", "generate", cwd=tmp_path)
    return [d for d in yaml.safe_load_all(out) if d]


async def _apply(sites: MultiSite, site: str, documents: list[dict[str, Any]]) -> None:
    env = sites[site]
    for doc in documents:
        body = {**doc, "metadata": {**doc["metadata"], "namespace": env.namespace}}
        resource = "secrets" if doc["kind"] == "Secret" else "links.skupper.io"
        await env.api.create(resource, body, env.namespace)


async def _link_status(sites: MultiSite, site: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = await sites[site].status("Link", name)
    return status


@pytest.mark.parametrize("generator", ["upstream", "ours"])
async def test_a_generated_link_works_once_and_a_second_site_with_it_is_refused(sites: MultiSite, tmp_path: Path,
                                                                                 generator: str) -> None:
    west, east, rogue = sites["west"], sites["east"], sites["rogue"]
    for env in (west, east, rogue):
        await env.start_controller()
    await sites.create_site("west", link_access="default")
    await sites.create_site("east", link_access=None)
    await sites.create_site("rogue", link_access=None)
    west_pods = await echo_backend(west, 2, key="backend", connector="backend")
    rogue_pods = await echo_backend(rogue, 1, key="backend", connector="backend")
    await east.create("Listener", "backend", {"routingKey": "backend", "host": "backend", "port": 7000})

    documents = (await _link_generate(sites, "west") if generator == "upstream"
                 else await _our_link_generate(sites, "west", tmp_path))
    links = [d["metadata"]["name"] for d in documents if d["kind"] == "Link"]
    assert links == ["link-west-skupper-router"]
    certificate = (await west.get("Certificate", "link-west"))["spec"]
    host, _ = await sites.access_endpoint("west")
    # upstream's subject: every endpoint's host, joined (the inter-router and the edge endpoint: one host twice)
    assert certificate == {"ca": "skupper-site-ca", "client": True, "subject": f"{host},{host}"}

    # applied in East: Ready, and East's client reaches West's backend over it
    await _apply(sites, "east", documents)
    await east.wait_status("Link", links[0], "Ready", within=60)
    ip = await service_ip(east, "backend", within=60)

    async def answered() -> bool:
        return await greeting(ip, 7000) in west_pods
    await east.wait_for(answered, 60, "East's client answered by West's backend")
    east_uid = (await east.get("Site", "east"))["metadata"]["uid"]

    # the credential is now East's: West recorded East's identity with the credential's key at its first link
    async def recorded() -> dict[str, Any] | None:
        objects, _ = await west.api.list("configmaps", "west",
                                         label_selector="internal.skupper.io/router-config=link-identity")
        return next((o["data"] for o in objects if o["data"]["identity"] == east_uid), None)
    record = await west.wait_for(recorded, 30, "East's identity recorded by West")
    # our generator's Secret carries West's binding address: East also proves its site key there, which binds
    # the credential first or rebinds it with that key ("Proving a site")
    assert record["source"] in (("first link",) if generator == "upstream" else ("first link", "skupper link generate"))

    # the same Link and Secret applied by a third site: refused, with a Warning on its Link
    await _apply(sites, "rogue", documents)

    async def refused() -> str | None:
        status = await _link_status(sites, "rogue", links[0])
        message = str(status.get("message", ""))
        return message if status.get("status") != "Ready" and "refused by the remote router" in message else None
    message = await rogue.wait_for(refused, 60, "the rogue site's Link refused")
    assert f"the certificate bound to {east_uid} was presented by a router calling itself" in message, message

    async def warned() -> bool:
        events, _ = await rogue.api.list("events.events.k8s.io", "rogue")
        return any(e.get("reason") == "LinkRefused" and e.get("regarding", {}).get("name") == links[0]
                   for e in events)
    await rogue.wait_for(warned, 30, "a LinkRefused Warning on the rogue site's Link")
    # East is unaffected: its Link Ready, every connection answered by West
    assert (await _link_status(sites, "east", links[0]))["status"] == "Ready"
    answers = await greetings(ip, 7000, 30)
    assert set(answers) <= west_pods, answers
    # and nothing of the rogue site's reaches West: West's network has East and no rogue site
    west_status = (await west.get("Site", "west"))["status"]
    assert {s["name"] for s in west_status["network"]} == {"west", "east"}, west_status["network"]
    assert not set(answers) & rogue_pods
