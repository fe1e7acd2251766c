"""Our network observer shows upstream's site end to end (issue 43 item 4): upstream Skupper's whole site (its
controller, CLI, kube-adaptor and skrouterd) and ours on one kubesim (the ``mixed`` fixture of
``test_mixed_sites``), linked by our Link redeeming upstream's token; our site's observer made as upstream's docs
make one, a ``NetworkObserver`` resource applied with kubectl; upstream's hello-world across the two sites both
ways. Then the observer's HTTP API is asked what upstream's console asks it (``/api/v2alpha1/sites``, ``routers``,
``routerlinks``, ``processes``, ``connectors``, ``services``, ``sitepairs``), and must show: upstream's site by its
name beside ours, its router, the link between the two sites up, upstream's backend Pods by name as processes of
its site, and the connections that crossed between the sites counted."""

from __future__ import annotations

import json
import os
from typing import Any

import aiohttp
import pytest
from mixed_support import OURS, THEIRS, MixedSites, site_uid
from test_mixed_sites import _answer_from, _hello_world, _link_ours_dialing, _link_theirs_dialing, mixed
from upstream_reference import reference

from devenv.observer import ObserverAccess, network_observer, observer_access
from kubesim.testing.patience import patience

__all__ = ["mixed"]

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(900),
              pytest.mark.skipif(os.geteuid() != 0, reason="upstream's containers need a private mount namespace "
                                                           "(root; CI runs as root)")]

#: what upstream's console reads, every few seconds (its network-observer API, cmd/network-observer/spec)
KINDS = ("sites", "routers", "routerlinks", "processes", "connectors", "listeners", "services", "sitepairs")


async def _observer(mixed: MixedSites) -> ObserverAccess:
    """A NetworkObserver of upstream's defaults in our site's namespace, applied with kubectl as upstream's docs
    apply one; how to reach it once our controller deployed it (its console URL, user and password, CA)."""
    await mixed.apply(OURS, network_observer(OURS))
    access = await observer_access(mixed.sim.api, OURS, patience(180))
    assert isinstance(access, ObserverAccess), f"our NetworkObserver: {access}"
    return access


async def _seen(access: ObserverAccess) -> dict[str, list[dict[str, Any]]]:
    """Every kind of :data:`KINDS` as the console gets it (its results)."""
    seen: dict[str, list[dict[str, Any]]] = {}
    headers = {"Authorization": access.authorization()}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10), headers=headers) as session:
        for kind in KINDS:
            async with session.get(f"{access.url}api/v2alpha1/{kind}", ssl=access.ssl_context(),
                                   server_hostname=access.server_name) as resp:
                assert resp.status == 200, (kind, resp.status, (await resp.text())[:500])
                body = await resp.json()
            assert body["count"] == len(body["results"]), body
            seen[kind] = body["results"]
    return seen


def _named(records: list[dict[str, Any]], **fields: Any) -> list[dict[str, Any]]:
    return [r for r in records if all(r.get(k) == v for k, v in fields.items())]


@pytest.mark.parametrize("dialing", ["ours", "theirs"])
async def test_our_observer_shows_upstreams_site_and_its_traffic(mixed: MixedSites, dialing: str) -> None:
    """Both hello-worlds of ``test_upstream_hello_world_both_ways`` over the link between the sites (``ours``: our
    Link redeeming upstream's token; ``theirs``: upstream's CLI redeeming ours, its router dialing ours): (a) its
    frontend behind upstream's Listener reaching our backend, (b) upstream's backend behind its Connector reached
    by our frontend; then what our observer's API shows of upstream's site, and the site pairs both ways ((b)'s
    from skrouterd's co-records of our flows)."""
    hello_world = reference("e2e-hello-world")
    await (_link_ours_dialing if dialing == "ours" else _link_theirs_dialing)(mixed)
    access = await _observer(mixed)
    theirs_id, ours_id = await site_uid(mixed, THEIRS), await site_uid(mixed, OURS)
    # the link shown: our Link from our router (we dialed), upstream's Link from its router (it dialed)
    link_named = (
        {"name": (await mixed.links(OURS))[0]["metadata"]["name"], "sourceSiteName": OURS, "destinationSiteName": THEIRS}
        if dialing == "ours" else {"sourceSiteId": theirs_id, "destinationSiteId": ours_id})
    [theirs_router] = (await mixed.sim.api.list("pods", THEIRS, label_selector="skupper.io/component=router"))[0]

    ours_backends = await _hello_world(
        mixed, hello_world, backend_in=OURS,
        connector=mixed.ours("connector", "create", "backend", "8080", "--selector", "app=backend"),
        listener=mixed.upstream("listener", "create", "backend", "8080"))
    await _answer_from(mixed, THEIRS, ours_backends, "upstream's frontend answered by our backend Pods")
    theirs_backends = await _hello_world(
        mixed, hello_world, backend_in=THEIRS,
        connector=mixed.upstream("connector", "create", "backend", "8080", "--routing-key", "backend-theirs"),
        listener=mixed.ours("listener", "create", "backend-theirs", "8080", "--host", "backend",
                            "--routing-key", "backend-theirs"))
    await _answer_from(mixed, OURS, theirs_backends, "our frontend answered by upstream's backend Pods")

    last: list[object] = [None]

    async def shown() -> dict[str, list[dict[str, Any]]] | None:
        try:
            last[0] = seen = await _seen(access)
        except (aiohttp.ClientError, TimeoutError) as error:  # the observer not answering yet: not yet
            last[0] = repr(error)
            return None
        # each of upstream's backend Pods once the Connector's tcpConnector for it is there too (bound)
        processes = {p["name"] for p in _named(seen["processes"], siteId=theirs_id, siteName=THEIRS,
                                               binding="bound")}
        pairs = _named(seen["sitepairs"], sourceId=theirs_id, destinationId=ours_id)
        ours_pairs = _named(seen["sitepairs"], sourceId=ours_id, destinationId=theirs_id)
        done = _named(seen["sites"], identity=theirs_id, name=THEIRS) and theirs_backends <= processes and \
            _named(seen["routerlinks"], status="up", **link_named) and \
            pairs and pairs[0]["recordCount"] > 0 and ours_pairs and ours_pairs[0]["recordCount"] > 0
        return seen if done else None
    try:
        seen = await mixed.env.wait_for(shown, 120, "our observer showing upstream's site, its Pods and traffic")
    except AssertionError as failure:
        raise AssertionError(f"{failure}; it showed: {json.dumps(last[0])[:6000]}") from None

    # the two sites by name, each with its router
    sites = {s["name"]: s for s in seen["sites"]}
    assert set(sites) == {OURS, THEIRS}, seen["sites"]
    assert (sites[THEIRS]["identity"], sites[THEIRS]["namespace"], sites[THEIRS]["routerCount"]) == (
        theirs_id, THEIRS, 1), sites[THEIRS]
    assert sites[OURS]["identity"] == ours_id
    [router] = _named(seen["routers"], siteId=theirs_id)
    assert router["name"] == f"0/{THEIRS}-{theirs_router['metadata']['name']}", router
    # the link, up: ours from our site's router to upstream's, or upstream's from its router to ours
    [link] = _named(seen["routerlinks"], **link_named)
    assert (link["sourceSiteName"], link["destinationSiteName"]) == (
        (OURS, THEIRS) if dialing == "ours" else (THEIRS, OURS)), link
    if dialing == "ours":
        assert link["destinationRouterId"] == router["identity"], link
    else:
        assert link["routerId"] == router["identity"], link
    # upstream's backend Pods, serving its Connector's key, bound to our Listener; its own Pods internal
    for pod in theirs_backends:
        [process] = _named(seen["processes"], name=pod)
        assert (process["siteName"], process["role"], process["binding"]) == (THEIRS, "external", "bound"), process
        assert [s.split("@")[0] for s in process["services"]] == ["backend-theirs"], process
    [skupper_router] = _named(seen["processes"], name=theirs_router["metadata"]["name"])
    assert skupper_router["role"] == "internal", skupper_router
    connectors = _named(seen["connectors"], siteName=THEIRS, routingKey="backend-theirs")
    assert {c["processId"] for c in connectors} == {p["identity"] for p in seen["processes"]
                                                    if p["name"] in theirs_backends}, connectors
    # the services are the Listeners' and Connectors' keys only (not the addresses upstream's routers use inside)
    services = {s["name"]: s for s in seen["services"]}
    assert set(services) == {"backend", "backend-theirs"}, sorted(services)
    assert services["backend"]["isBound"] and services["backend-theirs"]["isBound"], services
    # (a)'s connections, from upstream's site to ours
    [pair] = _named(seen["sitepairs"], sourceId=theirs_id, destinationId=ours_id)
    assert (pair["sourceName"], pair["destinationName"]) == (THEIRS, OURS) and pair["recordCount"] >= 1, pair
    # (b)'s connections, from our site to upstream's (skrouterd's connector side names its connector in a
    # co-record of our flow)
    [pair] = _named(seen["sitepairs"], sourceId=ours_id, destinationId=theirs_id)
    assert (pair["sourceName"], pair["destinationName"]) == (OURS, THEIRS) and pair["recordCount"] >= 1, pair
