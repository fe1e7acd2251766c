"""core/v1 and events.k8s.io/v1 Events are the same objects, as in the apiserver."""

from __future__ import annotations

import asyncio

from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient

NEW = "/apis/events.k8s.io/v1/namespaces/default/events"
CORE = "/api/v1/namespaces/default/events"


def new_event(name: str) -> dict[str, object]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "example.com/ctl",
        "reportingInstance": "ctl-1",
        "action": "Reconcile",
        "reason": "Created",
        "type": "Normal",
        "note": "made a thing",
        "regarding": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "cm",
            "namespace": "default",
            "uid": "u1",
        },
    }


async def test_event_written_through_events_api_is_listed_by_core_api(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, made = await c.post(NEW, new_event("e1"))
        assert status == 201 and made["note"] == "made a thing" and made["apiVersion"] == "events.k8s.io/v1"
        status, core = await c.get(f"{CORE}/e1")
        assert status == 200 and core["apiVersion"] == "v1"
        assert core["message"] == "made a thing" and core["involvedObject"]["name"] == "cm"
        assert core["reportingComponent"] == "example.com/ctl"
        # kubectl describe selects a target's events with these field selectors
        _, lst = await c.get(
            CORE, params={"fieldSelector": "involvedObject.name=cm,involvedObject.kind=ConfigMap"}
        )
        assert [e["metadata"]["name"] for e in lst["items"]] == ["e1"]
        _, lst = await c.get(NEW, params={"fieldSelector": "regarding.name=cm"})
        assert [e["note"] for e in lst["items"]] == ["made a thing"]
        status, patched = await c.patch(
            f"{NEW}/e1", {"series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}}
        )
        assert status == 200 and patched["series"]["count"] == 2 and patched["regarding"]["name"] == "cm"
        status, _ = await c.delete(f"{CORE}/e1")
        assert status == 200 and (await c.get(f"{NEW}/e1"))[0] == 404


async def test_watch_through_events_api_sees_core_writes(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:

        async def write() -> None:
            await asyncio.sleep(0.05)
            await c.post(
                CORE,
                {
                    "metadata": {"name": "k"},
                    "message": "from kubelet",
                    "reason": "Pulled",
                    "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
                },
            )

        task = asyncio.create_task(write())
        async for ev in c.watch(NEW, {"resourceVersion": str(kubesim.store.revision)}):
            assert ev["type"] == "ADDED" and ev["object"]["note"] == "from kubelet"
            assert (
                ev["object"]["regarding"]["kind"] == "Pod"
                and ev["object"]["apiVersion"] == "events.k8s.io/v1"
            )
            break
        await task
