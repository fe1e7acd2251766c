"""Headless Chromium driven over the DevTools protocol (a websocket, aiohttp's client): navigate, evaluate
JavaScript in the page, take a screenshot. Debian's ``chromium`` (``scripts/setup-system --image-tools`` installs
it); started with a fresh profile and background networking off, so it talks to nothing but the page it is given.
A few CDP calls do not justify a browser-automation dependency (Playwright would bring its own Node driver)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from kubesim.patience import patience

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0", "--window-size=1280,1000"]


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise AssertionError("chromium is not installed: scripts/setup-system --image-tools installs it "
                         "(apt-get install chromium)")


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self._ids)
        await self.ws.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            msg = await asyncio.wait_for(self.ws.receive(), patience(30))
            if msg.type != aiohttp.WSMsgType.TEXT:
                raise AssertionError(f"the browser closed the DevTools connection ({msg.type})")
            body = json.loads(msg.data)
            if body.get("id") == call_id:
                if "error" in body:
                    raise AssertionError(f"{method}: {body['error']}")
                return dict(body.get("result") or {})

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression[:80]}: {result['exceptionDetails'].get('text')}")
        return result.get("result", {}).get("value")

    async def navigate(self, url: str) -> None:
        await self.call("Page.enable")
        await self.call("Page.navigate", url=url)

    async def wait_for(self, expression: str, within: float, what: str, show: str = "") -> Any:
        """The first truthy value of ``expression``; on time-out, the error says what ``show`` evaluates to."""
        deadline = time.monotonic() + patience(within)
        last: Any = None
        while time.monotonic() < deadline:
            last = await self.evaluate(expression)
            if last:
                return last
            await asyncio.sleep(0.25)
        shown = await self.evaluate(show) if show else None
        raise AssertionError(f"timed out waiting for {what} (last: {str(last)[:200]}; page: {str(shown)[:500]})")

    async def screenshot(self, path: Path) -> None:
        shot = await self.call("Page.captureScreenshot", format="png")
        data = base64.b64decode(shot["data"])

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        await asyncio.to_thread(write)


@contextlib.asynccontextmanager
async def browser_page() -> AsyncIterator[Page]:
    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir="/tmp"))
    proc = await asyncio.create_subprocess_exec(
        chromium_path(), *FLAGS, f"--user-data-dir={profile}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + patience(30)
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if proc.returncode is not None or time.monotonic() > deadline:
                raise AssertionError("chromium did not open its DevTools port")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
                targets = await resp.json()
            page_ws = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
            async with session.ws_connect(page_ws, max_msg_size=64 * 1024 * 1024) as ws:
                yield Page(ws)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 10)
        shutil.rmtree(profile, ignore_errors=True)
