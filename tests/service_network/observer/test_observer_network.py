"""The network observer on three real routers (West - Middle - East): it reads West's router alone, and its API
lists the three sites, both links, the service, East's process, and the exact number of connections and HTTP
requests a client in West sent to East's backend (the reports cross the links); its metrics carry upstream's
names; a restarted router's counts carry on; the console's files are served from the observer itself."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from router_support import free_port, wait_until

from service_network.observer.server import serve

OK, FAIL = 20, 3


class HttpBackend:
    """An HTTP/1.1 server on a loopback address: ``/ok`` answers 200, ``/fail`` 503."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.port = free_port(host)
        self.served = 0
        self.runner: web.AppRunner | None = None

    async def start(self) -> HttpBackend:
        async def ok(_: web.Request) -> web.Response:
            self.served += 1
            return web.Response(text="ok\n")

        async def fail(_: web.Request) -> web.Response:
            self.served += 1
            return web.Response(status=503, text="unavailable\n")

        app = web.Application()
        app.router.add_get("/ok", ok)
        app.router.add_get("/fail", fail)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, self.host, self.port).start()
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@contextlib.asynccontextmanager
async def observer_of(router_url: str) -> AsyncIterator[str]:
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(router_url, "127.0.0.1", 0, interval=0.5, ready=bound.set_result))
    try:
        port = await asyncio.wait_for(bound, 30)
        yield f"http://127.0.0.1:{port}"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def get(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as resp:
        assert resp.status == 200, f"{url}: {resp.status}"
        return await resp.json()


def with_metrics(router: Any) -> str:
    port = free_port(router.host)
    router.doc["router"]["metrics"] = {"host": router.host, "port": port}
    return f"http://{router.host}:{port}"


@pytest.fixture
async def three_sites(net: Any) -> AsyncIterator[tuple[Any, Any, Any, HttpBackend, int, str]]:
    west, middle, east = (net.router(n) for n in ("west", "middle", "east"))
    backend = await HttpBackend(east.host).start()
    east.doc["connectors"].append({"name": "backend", "routingKey": "backend", "port": backend.port,
                                   "targets": [{"host": backend.host, "name": "backend-east-0"}]})
    port = west.listen("backend")
    west.link_to(middle)
    middle.link_to(east)
    url = with_metrics(west)
    for r in (east, middle, west):
        await r.start()
    await wait_until(lambda: "backend" in west.routes(), within=15, what="West's route to the backend")
    try:
        yield west, middle, east, backend, port, url
    finally:
        await backend.stop()


async def send_requests(host: str, port: int) -> None:
    """OK + FAIL requests, each on its own connection, then OK more over one kept-alive connection."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        for path in ["/ok"] * OK + ["/fail"] * FAIL:
            async with s.get(f"http://{host}:{port}{path}") as resp:
                await resp.read()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as s:
        for _ in range(OK):
            async with s.get(f"http://{host}:{port}/ok") as resp:
                assert resp.status == 200
                await resp.read()


async def test_the_observer_of_one_router_sees_the_whole_network_and_counts_exactly(three_sites):  # type: ignore[no-untyped-def]
    west, _middle, _east, backend, port, router_url = three_sites
    await send_requests(west.host, port)
    assert backend.served == 2 * OK + FAIL
    connections = OK + FAIL + 1
    async with observer_of(router_url) as base, aiohttp.ClientSession() as s:
        api = f"{base}/api/v2alpha1"

        async def counted() -> Any:
            t = await get(s, f"{api}/internal/traffic")
            svc = t.get("services", {}).get("backend", {})
            pairs = (await get(s, f"{api}/sitepairs"))["results"]
            done = (svc.get("requests") == {"2xx": 2 * OK, "5xx": FAIL} and svc.get("opened") == connections
                    and svc.get("closed") == connections and [p["recordCount"] for p in pairs] == [connections])
            return (t, pairs) if done else None

        traffic, pairs = await wait_until(counted, within=20, what="the observer to count the client's traffic")
        assert traffic["error"] is None
        assert traffic["services"]["backend"]["methods"] == {"GET": 2 * OK + FAIL}
        assert (pairs[0]["sourceName"], pairs[0]["destinationName"]) == ("west", "east")

        sites = (await get(s, f"{api}/sites"))
        assert sites["count"] == 3 and sites["timeRangeCount"] == 3
        assert sorted(x["name"] for x in sites["results"]) == ["east", "middle", "west"]
        links = (await get(s, f"{api}/routerlinks"))["results"]
        assert sorted((x["sourceSiteName"], x["destinationSiteName"], x["status"], x["cost"]) for x in links) == [
            ("middle", "east", "up", 1), ("west", "middle", "up", 1)]


        async def links_carried() -> bool:
            found = (await get(s, f"{api}/routerlinks"))["results"]
            return len(found) == 2 and all(x["octetCount"] > 0 and x["octetReverseCount"] > 0 for x in found)

        # the client's bytes crossed both links, each way (link counters are refreshed every second)
        await wait_until(links_carried, within=10, what="both links' byte counts")
        [service] = (await get(s, f"{api}/services"))["results"]
        assert service["name"] == "backend" and service["isBound"] and service["observedApplicationProtocols"] == [
            "http1"]
        procs = (await get(s, f"{api}/services/{service['identity']}/processes"))["results"]
        assert [(p["name"], p["siteName"]) for p in procs] == [("backend-east-0", "east")]
        one = await get(s, f"{api}/processes/{procs[0]['identity']}")
        assert one["results"]["name"] == "backend-east-0"
        conns = (await get(s, f"{api}/connections?routingKey=backend"))["results"]
        assert len(conns) == connections
        assert all(c["traceSites"] == ["west", "east"] and c["destProcessName"] == "backend-east-0" for c in conns)
        async with s.get(f"{api}/sites/nope") as resp:
            assert resp.status == 404 and (await resp.json())["code"] == "ErrNotFound"
        async with s.get(f"{api}/sites?nope=1") as resp:
            assert resp.status == 400

        async with s.get(f"{base}/metrics") as resp:
            text = await resp.text()
        requests = [line for line in text.splitlines() if line.startswith("skupper_requests_total{")]
        assert sum(float(line.rsplit(" ", 1)[1]) for line in requests) == 2 * OK + FAIL
        opened = [line for line in text.splitlines() if line.startswith("skupper_connections_opened_total{")]
        assert len(opened) == 1 and float(opened[0].rsplit(" ", 1)[1]) == connections
        assert 'source_site_name="west"' in opened[0] and 'dest_process_name="backend-east-0"' in opened[0]

        async with s.get(f"{base}/") as resp:
            page = await resp.text()
            assert resp.status == 200 and resp.headers["Content-Security-Policy"] == "default-src 'self'"
        assert '<script type="module" src="/console/console.js">' in page and "http" not in page.split("<body>")[1]
        async with s.get(f"{base}/console/console.js") as resp:
            assert resp.status == 200 and resp.content_type == "text/javascript"


async def test_counts_carry_on_when_a_router_restarts(three_sites):  # type: ignore[no-untyped-def]
    west, _middle, east, backend, port, router_url = three_sites
    async with observer_of(router_url) as base, aiohttp.ClientSession() as s:
        api = f"{base}/api/v2alpha1"

        async def pair_count(n: int) -> bool:
            pairs = (await get(s, f"{api}/sitepairs"))["results"]
            return [p["recordCount"] for p in pairs] == [n]

        await send_requests(west.host, port)
        first = OK + FAIL + 1
        await wait_until(lambda: pair_count(first), within=20, what="the first round counted")
        await east.stop()
        await east.start()
        served = backend.served

        async def through() -> bool:
            """One request on its own connection; whether it reached East's backend."""
            with contextlib.suppress(aiohttp.ClientError):
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as c, \
                        c.get(f"http://{west.host}:{port}/ok") as resp:
                    return resp.status == 200
            return False

        await wait_until(through, within=30, what="a client through to East after its restart")
        probes = backend.served - served    # connections that reached the restarted East
        await send_requests(west.host, port)
        # East's counters began again at 0; the observer adds the two instances
        await wait_until(lambda: pair_count(2 * first + probes), within=20, what="both rounds counted")


async def test_an_unreachable_router_is_an_error_the_api_reports() -> None:
    port = free_port("127.0.0.1")
    async with observer_of(f"http://127.0.0.1:{port}") as base, aiohttp.ClientSession() as s:
        await asyncio.sleep(1)
        traffic = await get(s, f"{base}/api/v2alpha1/internal/traffic")
        assert traffic["error"] and traffic["polls"] == 0
        assert (await get(s, f"{base}/api/v2alpha1/sites")) == {"results": [], "count": 0, "timeRangeCount": 0}


async def test_the_console_draws_the_network_and_its_traffic_rises_in_a_browser(three_sites):  # type: ignore[no-untyped-def]
    from browser_support import browser_page

    west, _middle, _east, _backend, port, router_url = three_sites
    async with observer_of(router_url) as base, browser_page() as page:
        await page.navigate(f"{base}/")
        await page.wait_for("document.querySelectorAll('#topology .site').length === 3", 30, "three sites drawn")
        await page.wait_for("document.querySelectorAll('#topology .link.up').length === 2", 30, "two links up")
        drawn = await page.evaluate("[...document.querySelectorAll('#topology .site')].map(g => g.dataset.site)")
        assert sorted(drawn) == ["east", "middle", "west"]
        links = await page.evaluate(
            "[...document.querySelectorAll('#topology .link')].map(g => g.dataset.source + '>' + g.dataset.destination)")
        assert sorted(links) == ["middle>east", "west>middle"]
        before = int(await page.wait_for("document.getElementById('total-connections').dataset.value", 30,
                                         "the traffic figure"))
        client = asyncio.create_task(send_requests(west.host, port))
        try:
            rising = (f"Number(document.getElementById('total-connections').dataset.value) > {before} && "
                      "document.getElementById('conn-rate').textContent !== '0' && "
                      "document.querySelector('#services tr[data-service=backend]') !== null")
            await page.wait_for(rising, 30, "the traffic figure to rise while the client runs", show=FIGURES)
            await client
            total = OK + FAIL + 1
            await page.wait_for(f"document.getElementById('total-connections').dataset.value === '{before + total}'",
                                30, "every connection counted")
            five = await page.evaluate("document.querySelector('#services tr[data-service=backend] td.error')"
                                       "?.textContent")
            assert five == str(FAIL)   # the 5xx answers, in red
            await page.screenshot(artifacts() / "console.png")
        finally:
            client.cancel()
            with contextlib.suppress(BaseException):
                await client


FIGURES = ("JSON.stringify({status: document.getElementById('status').textContent, polls: document.body.dataset.polls, "
           "figures: [...document.querySelectorAll('.figure')].map(f => f.textContent.trim())})")


def artifacts() -> Any:
    """Where tests keep what a person may want to look at afterwards ($TEST_ARTIFACTS, default test-artifacts/)."""
    import os
    from pathlib import Path

    return Path(os.environ.get("TEST_ARTIFACTS") or Path(__file__).resolve().parents[3] / "test-artifacts")
