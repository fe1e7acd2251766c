"""Our site and upstream Skupper's site on one kubesim, linked as users link them (issue 43 item 1, issue 46 item
5): a token issued by each, redeemed by the other (each grant server reached across the Pod network relays), each
side's Link and Secret, and each router's TLS to the other up: upstream's router verifies our access's certificate
for the host it dials, ours dials upstream's without offering a session it cannot resume.

Past TLS and AMQP, our router admits upstream's router by its credential (the Link it dialed; the Site uid our grant
bound its client certificate to), its router id (``<site>-<Pod>``) an alias of that identity, and our Link is Ready.
Upstream's own statuses are true about our site (issue 43 item 4): upstream's controller computes them from the flow
records (vanflow) its kube-adaptor collects into the ConfigMap ``skupper-network-status``, and our router emits our
site's (docs/dev/mixed-networks.md, sections 4.1 and 7): upstream's Site counts our site in its network, its Link to
our site is Ready naming our site, its Listener is matched by our Connector (and not once it is deleted), its
Connector by our Listener, as upstream's CLI prints them.

Traffic: upstream's hello-world across the two sites, both ways (frontend on upstream's site and backend on ours,
then the reverse), over a Link either side dialed (ours with upstream's token, or upstream's with ours), each answer
naming the backend Pod that answered; our Listener Matched/Ready for a Connector only upstream's site has (a key its
routers serve through our AMQP link), and no longer once it is deleted. The same with upstream's site an edge site
(``spec.edge: true``) redeeming our token: its router dials our access's ``edge`` endpoint as an edge; and with our
site the edge site redeeming upstream's token: our router dials upstream's ``edge`` endpoint as an edge
(docs/dev/mixed-networks.md, section 6; upstream's statuses about our site are not asserted over an edge link:
our vanflow records do not cross edge connections yet)."""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mixed_support import (
    ANSWER,
    OURS,
    THEIRS,
    MixedSites,
    cli_flag,
    mixed_environment,
    ready_pods,
    say_hello,
    site_uid,
    upstream_yaml,
)
from upstream_reference import reference

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(900),
              pytest.mark.skipif(os.geteuid() != 0, reason="upstream's containers need a private mount namespace "
                                                           "(root; CI runs as root)")]

@pytest.fixture
async def mixed(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[MixedSites]:
    """Both sites; upstream's (``"theirs"``) or ours (``"ours"``) an edge site when the test parametrizes this
    fixture so (indirect)."""
    async with mixed_environment(tmp_path) as environment:
        try:
            edge = getattr(request, "param", "")
            await environment.create_sites(theirs_edge=edge == "theirs", ours_edge=edge == "ours")
            yield environment
        finally:  # both routers' logs beside the test's files, to read a failure
            for namespace in (THEIRS, OURS):
                (tmp_path / f"{namespace}-router.log").write_text(await environment.router_log(namespace))


async def _secret(mixed: MixedSites, namespace: str, name: str) -> dict[str, str]:
    secret = await mixed.sim.api.get("secrets", name, namespace)
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def _endpoints(link: dict[str, Any]) -> set[tuple[str, str]]:
    return {(e["name"], e["port"]) for e in link["spec"]["endpoints"]}


async def test_tokens_both_ways_tls_and_amqp_up_both_ways(mixed: MixedSites) -> None:
    # upstream's token (its CLI in theirs), applied in ours: our controller redeems it at upstream's grant server
    theirs_token = await mixed.upstream_token("theirs.token")
    await mixed.redeem_in_ours(theirs_token)
    # our token (our CLI in ours), redeemed with upstream's CLI in theirs: upstream's controller calls our grant server
    await mixed.our_token("ours.token")
    out = await mixed.upstream("token", "redeem", "ours.token")
    assert 'has been redeemed' in out, out

    # each side's Link names the other's router access, with a Secret of the other's CA and a client certificate
    [ours_link] = await mixed.links(OURS)
    assert _endpoints(ours_link) == {("inter-router", "55671"), ("edge", "45671")}  # upstream's ports
    [theirs_link] = await mixed.links(THEIRS)
    assert _endpoints(theirs_link) == {("inter-router", "55671"), ("edge", "45671")}  # ours offers both as upstream
    for namespace, link in ((OURS, ours_link), (THEIRS, theirs_link)):
        secret = await _secret(mixed, namespace, link["spec"]["tlsCredentials"])
        assert {"ca.crt", "tls.crt", "tls.key"} <= secret.keys()

    # both routers dial: TLS up both ways (upstream's router verifies our access's certificate for the IP it dials,
    # a DNS name too as upstream's certificates have it; ours offers no session upstream's router cannot resume),
    # then AMQP; our router takes upstream's router id (<site>-<Pod>) as an alias of each connection's credential
    # (docs/dev/mixed-networks.md, section 7): our Link is Ready, upstream's dial is admitted
    async def ours_ready() -> list[str] | None:
        row = await mixed.link_status("ours")
        return row if row[:3] == [ours_link["metadata"]["name"], "Ready", "1"] else None
    await mixed.env.wait_for(ours_ready, 120, "our Link Ready, upstream's router admitted by the Link's credential")
    status = await mixed.env.status("Link", ours_link["metadata"]["name"], OURS)
    assert re.fullmatch(r"theirs-skupper-router-\S+", str(status.get("remoteSiteName"))), status
    theirs_log = await mixed.router_log(THEIRS)
    for words in ("certificate verify failed", "session id context uninitialized", "Unknown protocol detected"):
        assert words not in theirs_log, words

    # upstream's dial: admitted (no refusal in our router's log) and still up a while later (skrouterd's connector
    # says so in its log: a connection it keeps)
    async def theirs_admitted() -> bool:
        log = await mixed.router_log(OURS)
        return "upstream router theirs-skupper-router-" in log and " linked (AMQP)" in log
    await mixed.env.wait_for(theirs_admitted, 120, "our router admitted upstream's dial")
    assert "link refused" not in await mixed.router_log(OURS)

    # upstream's Link: its controller sets Operational only from a link record of its network status, which its
    # kube-adaptor builds from the routers' flow records (skrouterd's LINK, whose peer is the access identity our
    # router sent, and our ROUTER_ACCESS of that identity under our ROUTER and SITE records): Ready, naming our site
    # (docs/dev/mixed-networks.md, sections 4.1 and 7)
    link = await _upstream_link_ready(mixed, theirs_link["metadata"]["name"])
    assert link["status"]["remoteSiteId"] == await site_uid(mixed, OURS), link["status"]
    await _upstream_network_has_ours(mixed)


# ---- upstream's statuses about our site (issue 43 item 4), as upstream's CLI prints them --------------------------
async def _upstream_link_ready(mixed: MixedSites, name: str) -> dict[str, Any]:
    """Upstream's Link ``name`` Ready in its ``link status`` and, in ``link status <name> -o yaml``, naming our
    site as the remote site; that Link."""
    async def ready() -> dict[str, Any] | None:
        row = await mixed.link_status("upstream")
        if row[:2] != [name, "Ready"]:
            return None
        link = await upstream_yaml(mixed, "link", "status", name)
        status = link.get("status") or {}
        operational = [c for c in status.get("conditions", []) if c.get("type") == "Operational"]
        return link if status.get("remoteSiteName") == OURS and operational and \
            operational[0].get("status") == "True" else None
    found: dict[str, Any] = await mixed.env.wait_for(ready, 120, "upstream's Link Ready, naming our site")
    return found


async def _upstream_network_has_ours(mixed: MixedSites) -> dict[str, Any]:
    """Upstream's Site (``site status -o yaml``): two sites in its network, ours one of them (its id our Site's
    uid), each with its Link operational to the other when it has one, ours listing its Link to upstream's site
    exactly when our site has one (our LINK record may come after our SITE record); our site's entry."""
    ours_id = await site_uid(mixed, OURS)
    ours_links = [THEIRS] if await mixed.links(OURS) else []
    last: list[object] = [None]

    async def counted() -> dict[str, Any] | None:
        status = (await upstream_yaml(mixed, "site", "status")).get("status") or {}
        last[0] = {k: status.get(k) for k in ("sitesInNetwork", "network")}
        network = status.get("network") or []
        ours = [s for s in network if s.get("id") == ours_id]
        if status.get("sitesInNetwork") != 2 or len(network) != 2 or not ours or ours[0].get("name") != OURS:
            return None
        if [link.get("remoteSiteName") for link in ours[0].get("links") or []] != ours_links:
            return None
        for site in network:
            for link in site.get("links") or []:
                if not link.get("operational") or link.get("remoteSiteName") not in {OURS, THEIRS} - {site["name"]}:
                    return None
        return ours[0]
    try:
        found: dict[str, Any] = await mixed.env.wait_for(counted, 120, "upstream's Site counting our site")
    except AssertionError as failure:
        raise AssertionError(f"{failure}; upstream's Site status: {last[0]}") from None
    return found


async def _upstream_matched(mixed: MixedSites, kind: str, name: str, matched: bool) -> str:
    """Upstream's ``<kind> status <name>`` (kind ``listener`` or ``connector``) once it prints ``matched`` as its
    ``Has Matching Connector``/``Has Matching Listener``; that output."""
    label = "Has Matching Connector" if kind == "listener" else "Has Matching Listener"

    async def printed() -> str | None:
        out = await mixed.upstream(kind, "status", name)
        return out if cli_flag(out, label) is matched else None
    found: str = await mixed.env.wait_for(printed, 120, f"upstream's {kind} {name}: {label} {matched}")
    return found


async def _answer_from(mixed: MixedSites, namespace: str, backends: set[str], what: str) -> str:
    """The Pod (one of ``backends``) upstream's backend names when asked through the frontend's Service in
    ``namespace``: the Service kubectl exposed, reached at its cluster IP as a client in the cluster reaches it."""
    assert mixed.sim.cluster is not None
    cluster = mixed.sim.cluster
    last: list[object] = [None]

    async def answered() -> str | None:
        address = cluster.resolve(f"frontend.{namespace}.svc.cluster.local")
        if address is None:
            return None
        try:
            last[0] = code, body = await say_hello(address, 8080, "Tester")
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            last[0] = error
            return None
        found = ANSWER.search(body) if code == 200 else None
        return found.group("pod") if found and found.group("pod") in backends else None
    try:
        pod: str = await mixed.env.wait_for(answered, 120, what)
    except AssertionError as failure:
        raise AssertionError(f"{failure}; the last answer: {last[0]!r}") from None
    return pod


async def _listener_matched(mixed: MixedSites, name: str, matched: bool, what: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        status = await mixed.env.status("Listener", name, OURS)
        if matched:
            return status if status.get("status") == "Ready" and status.get("hasMatchingConnector") is True else None
        return status if not status.get("hasMatchingConnector") else None
    found: dict[str, Any] = await mixed.env.wait_for(check, 120, what)
    return found


async def _hello_world(mixed: MixedSites, files: Path, backend_in: str, connector: Awaitable[str],
                       listener: Awaitable[str]) -> set[str]:
    """Upstream's backend (3 Pods) in ``backend_in`` with ``connector`` (a CLI command) for it, its frontend in the
    other namespace with ``listener`` and a Service made by ``kubectl expose``; the backend Pods' names once Ready."""
    frontend_in = THEIRS if backend_in == OURS else OURS
    await mixed.kubectl("apply", "-n", backend_in, "-f", str(files / "east" / "backend.yml"))
    await connector
    await mixed.kubectl("apply", "-n", frontend_in, "-f", str(files / "west" / "frontend.yml"))
    await listener
    await mixed.kubectl("expose", "-n", frontend_in, "deployment/frontend", "--port", "8080")
    await ready_pods(mixed, frontend_in, "frontend", 1)
    return await ready_pods(mixed, backend_in, "backend", 3)


async def _link_ours_dialing(mixed: MixedSites) -> None:
    """Upstream's token applied in ours: our Link dials upstream's site, until our CLI shows it Ready."""
    await mixed.redeem_in_ours(await mixed.upstream_token("theirs.token"))

    async def ours_ready() -> list[str] | None:
        row = await mixed.link_status("ours")
        return row if row[1:3] == ["Ready", "1"] else None
    await mixed.env.wait_for(ours_ready, 120, "our Link to upstream's site Ready")


async def _link_theirs_dialing(mixed: MixedSites) -> None:
    """Our token redeemed with upstream's CLI: upstream's Link dials our site (ours has no Link), until our router
    has admitted upstream's router."""
    await mixed.our_token("ours.token")
    out = await mixed.upstream("token", "redeem", "ours.token")
    assert 'has been redeemed' in out, out

    async def admitted() -> bool:
        log = await mixed.router_log(OURS)
        return "upstream router theirs-skupper-router-" in log and " linked (AMQP)" in log
    await mixed.env.wait_for(admitted, 120, "our router admitted upstream's dial")
    assert await mixed.links(OURS) == [], "our site has no Link of its own"
    assert len(await mixed.links(THEIRS)) == 1


async def _link_theirs_edge_dialing(mixed: MixedSites) -> None:
    """Our token redeemed with upstream's CLI in upstream's edge site: its controller configures its router (``mode:
    edge``) with a connector of role ``edge`` to the ``edge`` endpoint our token lists (45671), and our router
    admits it as an edge router (docs/dev/mixed-networks.md, section 6)."""
    await mixed.our_token("ours.token")
    out = await mixed.upstream("token", "redeem", "ours.token")
    assert 'has been redeemed' in out, out
    [theirs_link] = await mixed.links(THEIRS)
    [edge] = [e for e in theirs_link["spec"]["endpoints"] if e["name"] == "edge"]
    assert edge["port"] == "45671", theirs_link

    async def connector() -> dict[str, Any] | None:      # upstream's router configuration, as its controller wrote it
        found = await mixed.sim.api.get("configmaps", "skupper-router", THEIRS)
        config = json.loads(found.get("data", {}).get("skrouterd.json") or "[]")
        return next((e[1] for e in config if e[0] == "connector" and e[1].get("name") == theirs_link["metadata"][
            "name"]), None)
    dialed = await mixed.env.wait_for(connector, 120, "upstream's router configured with the Link's connector")
    router = next(e[1] for e in json.loads((await mixed.sim.api.get("configmaps", "skupper-router", THEIRS))["data"][
        "skrouterd.json"]) if e[0] == "router")
    assert (router["mode"], dialed["role"], dialed["host"], str(dialed["port"])) == (
        "edge", "edge", edge["host"], "45671"), (router, dialed)

    async def admitted() -> bool:
        log = await mixed.router_log(OURS)
        return "upstream edge router theirs-skupper-router-" in log and " linked (AMQP)" in log
    await mixed.env.wait_for(admitted, 120, "our router admitted upstream's edge router on its edge port")
    assert await mixed.links(OURS) == [], "our site has no Link of its own"
    assert "link refused" not in await mixed.router_log(OURS)


async def _link_ours_edge_dialing(mixed: MixedSites) -> None:
    """Upstream's token applied in our edge site (``spec.edge: true``): our Link takes the ``edge`` endpoint of
    upstream's answer (45671) and our router document's link says ``role: edge`` (docs/dev/mixed-networks.md,
    section 6); our router dials upstream's edge listener as an edge, until our CLI shows the Link Ready."""
    await mixed.redeem_in_ours(await mixed.upstream_token("theirs.token"))
    [ours_link] = await mixed.links(OURS)
    [edge] = [e for e in ours_link["spec"]["endpoints"] if e["name"] == "edge"]
    assert edge["port"] == "45671", ours_link

    async def entry() -> dict[str, Any] | None:
        found = await mixed.sim.api.get("configmaps", "skupper-router", OURS)
        document = json.loads(found.get("data", {}).get("router.json") or "{}")
        return next((x for x in document.get("links", []) if x["name"] == ours_link["metadata"]["name"]), None)
    dialed = await mixed.env.wait_for(entry, 120, "our router document with the Link's entry")
    assert (dialed["role"], dialed["host"], dialed["port"]) == ("edge", edge["host"], 45671), dialed
    document = json.loads((await mixed.sim.api.get("configmaps", "skupper-router", OURS))["data"]["router.json"])
    assert document["routerAccess"] == [], "an edge site accepts no links"

    async def ours_ready() -> list[str] | None:
        row = await mixed.link_status("ours")
        return row if row[1:3] == ["Ready", "1"] else None
    await mixed.env.wait_for(ours_ready, 120, "our edge site's Link to upstream's site Ready")
    assert "link refused" not in await mixed.router_log(OURS)


# which Site is an edge site (the fixture's param), and the link's direction
LINK_DIRECTIONS = [pytest.param("", _link_ours_dialing, id="ours-dials"),
                   pytest.param("", _link_theirs_dialing, id="theirs-dials"),
                   pytest.param("theirs", _link_theirs_edge_dialing, id="theirs-edge-dials"),
                   pytest.param("ours", _link_ours_edge_dialing, id="ours-edge-dials")]


@pytest.mark.parametrize(("mixed", "link"), LINK_DIRECTIONS, indirect=["mixed"])
async def test_upstream_hello_world_both_ways(mixed: MixedSites, link: Callable[[MixedSites], Awaitable[None]]) -> None:
    """Upstream's hello-world (its ``e2e-hello-world`` Deployments applied with kubectl, the frontend exposed with
    ``kubectl expose`` as its getting-started does) across one Link, made either way (``link``): ours dialing
    upstream's site with upstream's token, upstream's dialing ours with our token, or upstream's edge site (``spec.edge:
    true``) dialing ours as an edge with our token. (a) backend on our site behind
    our Connector, frontend on upstream's behind upstream's Listener (its CLI's ``listener create``); (b) backend on
    upstream's site behind its Connector (its CLI's ``connector create``), frontend on ours behind our Listener,
    whose status follows a Connector that only upstream's site has. Each param has its own cluster (the fixture)."""
    hello_world = reference("e2e-hello-world")
    await link(mixed)

    # upstream's Site counts ours in its network, whichever side dialed and in either role (our router's SITE,
    # ROUTER and ROUTER_ACCESS records, and our LINK when we dialed; over an edge link they cross on the edge's
    # proxy links, docs/dev/mixed-networks.md section 6); upstream's Link, when upstream dialed, Ready naming ours
    ours_in_theirs = await _upstream_network_has_ours(mixed)
    ours_links = [link["remoteSiteName"] for link in ours_in_theirs.get("links") or []]
    assert ours_links == ([THEIRS] if await mixed.links(OURS) else []), ours_in_theirs
    for theirs_link in await mixed.links(THEIRS):
        await _upstream_link_ready(mixed, theirs_link["metadata"]["name"])

    # (a) backend on ours (our Connector), frontend on upstream's (upstream's Listener)
    ours_backends = await _hello_world(
        mixed, hello_world, backend_in=OURS,
        connector=mixed.ours("connector", "create", "backend", "8080", "--selector", "app=backend"),
        listener=mixed.upstream("listener", "create", "backend", "8080"))
    pod = await _answer_from(mixed, THEIRS, ours_backends,
                             "upstream's frontend answered by our backend Pods through upstream's Listener")
    assert pod in ours_backends
    # upstream's Listener matched by our Connector, the only one of its key (our CONNECTOR record), and no longer
    # once our CLI deletes it (the record ended)
    out = await _upstream_matched(mixed, "listener", "backend", True)
    assert re.search(r"^Status:\s+Ready\s*$", out, re.MULTILINE), out
    await mixed.ours("connector", "delete", "backend")
    await _upstream_matched(mixed, "listener", "backend", False)

    # (b) backend on upstream's site (its Connector), frontend on ours (our Listener); another routing key, so
    # that the only Connector our Listener can match is upstream's
    theirs_backends = await _hello_world(
        mixed, hello_world, backend_in=THEIRS,
        connector=mixed.upstream("connector", "create", "backend", "8080", "--routing-key", "backend-theirs"),
        listener=mixed.ours("listener", "create", "backend-theirs", "8080", "--host", "backend",
                            "--routing-key", "backend-theirs"))
    pod = await _answer_from(mixed, OURS, theirs_backends,
                             "our frontend answered by upstream's backend Pods through our Listener")
    assert pod in theirs_backends
    status = await _listener_matched(mixed, "backend-theirs", True,
                                     "our Listener Ready and matched by upstream's Connector")
    assert status["status"] == "Ready", status
    # upstream's Connector matched by our Listener (our LISTENER record)
    await _upstream_matched(mixed, "connector", "backend", True)

    # upstream's Connector deleted (its CLI): our Listener no longer matched
    await mixed.upstream("connector", "delete", "backend")
    status = await _listener_matched(mixed, "backend-theirs", False,
                                     "our Listener unmatched once upstream's Connector is gone")
    assert status.get("hasMatchingConnector") is not True, status
