"""Helpers for tests that talk raw HTTP to a running kubesim (status codes and bodies, not a client's view)."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import aiohttp

from kubesim.sim import KubeSim


class RawClient:
    """Minimal aiohttp client with the sim's token and CA; every call returns `(status, parsed JSON body)`."""

    def __init__(self, sim: KubeSim, *, token: str | None = None) -> None:
        self.sim = sim
        self.url = sim.url
        self.token = sim.token if token is None else token
        self._ssl: ssl.SSLContext | bool = False
        if sim.ca_pem is not None:
            self._ssl = ssl.create_default_context(cadata=sim.ca_pem.decode())
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> RawClient:
        self.session = aiohttp.ClientSession()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.session is not None:
            await self.session.close()

    def _headers(self, extra: dict[str, str] | None) -> dict[str, str]:
        h = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        h.update(extra or {})
        return h

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        assert self.session is not None
        data = None
        h = self._headers(headers)
        if body is not None:
            data = body if isinstance(body, bytes | str) else json.dumps(body)
            h["Content-Type"] = content_type
        async with self.session.request(
            method, self.url + path, data=data, params=params, headers=h, ssl=self._ssl
        ) as resp:
            raw = await resp.read()
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = raw.decode(errors="replace")
            return resp.status, parsed

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        return await self.request("POST", path, body, **kw)

    async def put(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        return await self.request("PUT", path, body, **kw)

    async def patch(
        self, path: str, body: Any, content_type: str = "application/merge-patch+json", **kw: Any
    ) -> tuple[int, Any]:
        return await self.request("PATCH", path, body, content_type=content_type, **kw)

    async def delete(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.request("DELETE", path, body, **kw)

    async def watch(self, path: str, params: dict[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Yield watch events (parsed lines) until the server ends the stream."""
        assert self.session is not None
        q = dict(params or {})
        q.setdefault("watch", "true")
        async with self.session.get(
            self.url + path, params=q, headers=self._headers(None), ssl=self._ssl
        ) as resp:
            if resp.status != 200:
                raise AssertionError(f"watch answered {resp.status}: {await resp.text()}")
            async for line in resp.content:
                if line.strip():
                    yield json.loads(line)
