"""Headless Chromium driven over the DevTools protocol (a websocket, aiohttp's client): navigate, evaluate
JavaScript in the page, take a screenshot. Debian's ``chromium`` (``scripts/setup-system --image-tools`` installs
it); started with a fresh profile and background networking off, so it talks to nothing but the page it is given;
a CA it should trust goes into the profile's NSS database, as a person imports one (never an
``--ignore-certificate-errors``).
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

from kubesim.testing.patience import patience

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
        """Open ``url``; an AssertionError with Chromium's reason when the page cannot be loaded (a TLS handshake
        refused, an untrusted certificate: ``net::ERR_...``)."""
        await self.call("Page.enable")
        result = await self.call("Page.navigate", url=url)
        if result.get("errorText"):
            raise AssertionError(f"chromium could not open {url}: {result['errorText']}")

    async def basic_auth(self, user: str, password: str) -> None:
        """Send ``user`` and ``password`` with every request of the page (HTTP basic authentication)."""
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        await self.call("Network.enable")
        await self.call("Network.setExtraHTTPHeaders", headers={"Authorization": f"Basic {token}"})

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


async def trust_ca(home: Path, ca_pem: str) -> None:
    """Make ``ca_pem`` a trusted CA for servers in the NSS database of ``home`` (``~/.pki/nssdb``, where Chromium
    on Linux reads the CAs a user added: what "Manage certificates, Authorities, Import" does), with NSS's
    ``certutil`` (Debian's libnss3-tools; scripts/setup-system --image-tools installs it)."""
    certutil = shutil.which("certutil")
    if certutil is None:
        raise AssertionError("certutil is not installed: scripts/setup-system --image-tools installs it "
                             "(apt-get install libnss3-tools)")
    database = home / ".pki" / "nssdb"
    database.mkdir(parents=True, exist_ok=True)
    (home / "ca.pem").write_text(ca_pem)
    for args in (["-N", "--empty-password"], ["-A", "-t", "C,,", "-n", "trusted-ca", "-i", str(home / "ca.pem")]):
        proc = await asyncio.create_subprocess_exec(certutil, "-d", f"sql:{database}", *args,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert proc.returncode == 0, f"certutil {args[0]}: {(out + err).decode()[:500]}"


@contextlib.asynccontextmanager
async def browser_page(*, trusted_ca: str | None = None, host_rules: str | None = None) -> AsyncIterator[Page]:
    """A page of a fresh headless Chromium; ``trusted_ca``: a CA (PEM) its profile trusts, as a person who imported
    it; ``host_rules``: Chromium's ``--host-resolver-rules`` (``MAP name address``: what an /etc/hosts line does)."""
    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir="/tmp"))
    env = dict(os.environ)
    flags = list(FLAGS)
    if trusted_ca is not None:
        home = profile / "home"
        await trust_ca(home, trusted_ca)
        env["HOME"] = str(home)
    if host_rules:
        flags.append(f"--host-resolver-rules={host_rules}")
    proc = await asyncio.create_subprocess_exec(
        chromium_path(), *flags, f"--user-data-dir={profile / 'data'}", "about:blank", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
    try:
        port_file = profile / "data" / "DevToolsActivePort"
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
