"""Watch over HTTP: from a resourceVersion, from 0, selectors, bookmarks, timeoutSeconds, 410 Expired."""

from __future__ import annotations

import asyncio
from typing import Any

from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient

CM = "/api/v1/namespaces/default/configmaps"


async def collect(c: RawClient, path: str, params: dict[str, str], n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async for ev in c.watch(path, params):
        out.append(ev)
        if len(out) == n:
            break
    return out


async def test_watch_from_resource_version_sees_only_later_events(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, a = await c.post(CM, {"metadata": {"name": "a"}})
        rv = a["metadata"]["resourceVersion"]
        await c.patch(f"{CM}/a", {"data": {"k": "v"}})
        await c.post(CM, {"metadata": {"name": "b"}})
        await c.delete(f"{CM}/a")
        events = await collect(c, CM, {"resourceVersion": rv}, 3)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("MODIFIED", "a"),
            ("ADDED", "b"),
            ("DELETED", "a"),
        ]
        assert events[0]["object"]["data"] == {"k": "v"}
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        assert rvs == sorted(rvs) and rvs[0] > int(rv)


async def test_watch_from_zero_sends_current_state_then_live_events(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CM, {"metadata": {"name": "a"}})

        async def later() -> None:
            await asyncio.sleep(0.05)
            await c.post(CM, {"metadata": {"name": "b"}})

        task = asyncio.create_task(later())
        events = await collect(c, CM, {"resourceVersion": "0"}, 2)
        await task
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "a"),
            ("ADDED", "b"),
        ]


async def test_object_leaving_label_selector_is_deleted_for_the_watcher(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, a = await c.post(CM, {"metadata": {"name": "a", "labels": {"app": "x"}}})
        rv = a["metadata"]["resourceVersion"]
        await c.patch(f"{CM}/a", {"metadata": {"labels": {"app": "y"}}})
        await c.patch(f"{CM}/a", {"metadata": {"labels": {"app": "x"}}})
        events = await collect(c, CM, {"resourceVersion": rv, "labelSelector": "app=x"}, 2)
        assert [e["type"] for e in events] == ["DELETED", "ADDED"]


async def test_timeout_seconds_ends_the_stream(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        events = [e async for e in c.watch(CM, {"timeoutSeconds": "1"})]
        assert events == []


async def test_bookmarks_carry_the_current_resource_version(tmp_path: Any) -> None:
    async with KubeSim(kubeconfig_path=tmp_path / "kc", bookmark_interval=0.05) as sim, RawClient(sim) as c:
        _, a = await c.post(CM, {"metadata": {"name": "a"}})
        events = await collect(
            c, CM, {"resourceVersion": a["metadata"]["resourceVersion"], "allowWatchBookmarks": "true"}, 1
        )
        assert events[0]["type"] == "BOOKMARK"
        assert events[0]["object"]["kind"] == "ConfigMap"
        assert events[0]["object"]["metadata"]["resourceVersion"] == a["metadata"]["resourceVersion"]


async def test_too_old_resource_version_is_an_expired_error_event(tmp_path: Any) -> None:
    async with KubeSim(kubeconfig_path=tmp_path / "kc", watch_window=3) as sim, RawClient(sim) as c:
        _, first = await c.post(CM, {"metadata": {"name": "a"}})
        for i in range(5):
            await c.patch(f"{CM}/a", {"data": {"i": str(i)}})
        # As the apiserver's watch cache answers: 200 and a single ERROR event carrying the 410 Status.
        events = [e async for e in c.watch(CM, {"resourceVersion": first["metadata"]["resourceVersion"]})]
        assert len(events) == 1 and events[0]["type"] == "ERROR"
        assert events[0]["object"]["reason"] == "Expired" and events[0]["object"]["code"] == 410


async def test_open_watch_gets_error_event_when_expired(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:

        async def expire() -> None:
            await asyncio.sleep(0.05)
            status, _ = await c.post("/kubesim/expire-watches", {})
            assert status == 200

        task = asyncio.create_task(expire())
        events = [e async for e in c.watch(CM, {"resourceVersion": str(kubesim.store.revision)})]
        await task
        assert len(events) == 1 and events[0]["type"] == "ERROR"
        assert events[0]["object"]["code"] == 410 and events[0]["object"]["kind"] == "Status"


async def test_watch_single_object_by_field_selector(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, a = await c.post(CM, {"metadata": {"name": "a"}})
        await c.post(CM, {"metadata": {"name": "b"}})
        await c.delete(f"{CM}/a")
        events = await collect(
            c,
            CM,
            {"resourceVersion": a["metadata"]["resourceVersion"], "fieldSelector": "metadata.name=a"},
            1,
        )
        assert events[0]["type"] == "DELETED" and events[0]["object"]["metadata"]["name"] == "a"


async def test_watch_as_table_sends_one_row_tables(kubesim: KubeSim) -> None:
    svc = "/api/v1/namespaces/default/services"
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    async with RawClient(kubesim) as c:
        _, s = await c.post(svc, {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
        assert c.session is not None
        params = {"watch": "1", "resourceVersion": "0", "timeoutSeconds": "1"}
        async with c.session.get(
            c.url + svc,
            params=params,
            headers={"Authorization": f"Bearer {c.token}", "Accept": accept},
            ssl=c._ssl,
        ) as resp:
            lines = [line async for line in resp.content if line.strip()]
        import json

        ev = json.loads(lines[0])
        assert ev["type"] == "ADDED" and ev["object"]["kind"] == "Table"
        assert ev["object"]["columnDefinitions"][1]["name"] == "Type"
        assert ev["object"]["rows"][0]["cells"][:3] == ["s", "ClusterIP", s["spec"]["clusterIP"]]


async def test_send_initial_events_ends_with_a_marked_bookmark(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CM, {"metadata": {"name": "a"}})
        params = {
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
        }
        events = await collect(c, CM, params, 2)
        assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "a"
        assert events[1]["type"] == "BOOKMARK"
        assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
