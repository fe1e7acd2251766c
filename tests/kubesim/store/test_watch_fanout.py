"""Watch fan-out encodes each event once per wire format, not once per watcher: watchers of one format get
byte-identical lines, selector watchers still see objects enter (ADDED) and leave (DELETED) their selection, and
Table watchers get one-row Tables."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from kubesim.sim import KubeSim
from kubesim.store import watch as watch_module
from kubesim.testing.rawhttp import RawClient

CM = "/api/v1/namespaces/default/configmaps"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


async def _lines(session: aiohttp.ClientSession, c: RawClient, params: dict[str, str], count: int,
                 ready: asyncio.Event, headers: dict[str, str] | None = None) -> list[bytes]:
    out: list[bytes] = []
    async with session.get(c.url + CM, params={"watch": "true", **params},
                           headers={**c._headers(None), **(headers or {})}, ssl=c._ssl) as resp:
        assert resp.status == 200
        ready.set()
        async for line in resp.content:
            if line.strip():
                out.append(line)
            if len(out) == count:
                return out
    return out


async def test_watchers_of_one_format_share_one_encoding_per_event(kubesim: KubeSim,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[Any] = []
    real: Callable[[Any], bytes] = watch_module.dumps

    def counting(obj: Any) -> bytes:
        encoded.append(obj)
        return real(obj)

    monkeypatch.setattr(watch_module, "dumps", counting)
    async with RawClient(kubesim) as c, aiohttp.ClientSession() as session:
        _, seed = await c.post(CM, {"metadata": {"name": "seed"}})
        rv = seed["metadata"]["resourceVersion"]
        kinds = [("plain", {}, None, 5)] * 6 + [("selector", {"labelSelector": "app=x"}, None, 4)] * 3 + \
                [("table", {}, {"Accept": TABLE}, 5)] * 3
        readies = [asyncio.Event() for _ in kinds]
        tasks = [asyncio.create_task(_lines(session, c, {"resourceVersion": rv, **params}, n, ready, headers))
                 for (_, params, headers, n), ready in zip(kinds, readies, strict=True)]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 10)
        encoded.clear()

        await c.post(CM, {"metadata": {"name": "a", "labels": {"app": "x"}}})
        await c.post(CM, {"metadata": {"name": "b", "labels": {"app": "y"}}})
        await c.patch(f"{CM}/a", {"metadata": {"labels": {"app": "y"}}})  # a leaves the selection
        await c.patch(f"{CM}/b", {"metadata": {"labels": {"app": "x"}}})  # b enters it
        await c.delete(f"{CM}/b")
        results = await asyncio.wait_for(asyncio.gather(*tasks), 10)

    by_kind: dict[str, list[list[bytes]]] = {}
    for (kind, *_), lines in zip(kinds, results, strict=True):
        by_kind.setdefault(kind, []).append(lines)
    for kind, streams in by_kind.items():
        assert all(stream == streams[0] for stream in streams), f"{kind} watchers got different bytes"

    def summary(lines: list[bytes]) -> list[tuple[str, str]]:
        events = [json.loads(line) for line in lines]
        return [(e["type"], e["object"]["metadata"].get("name") or e["object"]["rows"][0]["object"]["metadata"]["name"])
                for e in events]

    assert summary(by_kind["plain"][0]) == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("MODIFIED", "b"),
                                            ("DELETED", "b")]
    assert summary(by_kind["selector"][0]) == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b"), ("DELETED", "b")]
    tables = [json.loads(line) for line in by_kind["table"][0]]
    assert all(t["object"]["kind"] == "Table" and len(t["object"]["rows"]) == 1 for t in tables)
    # One encoding per event and format: 5 plain lines (the selector watchers' ADDED a and DELETED b are the same
    # lines), 2 lines only the selector watchers see (a leaving, b entering), 5 Tables: 12 for 12 watchers, where
    # encoding per watcher would have been 6*5 + 3*4 + 3*5 = 57.
    assert len(encoded) == 12
