"""Fault injection through the admin endpoint and the Python API (off by default)."""

from __future__ import annotations

from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient

CM = "/api/v1/namespaces/default/configmaps"


async def test_faults_are_off_by_default_and_admin_needs_token(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, faults = await c.get("/kubesim/faults")
        assert status == 200 and faults["errors"] == [] and faults["latency_ms"] == 0
    async with RawClient(kubesim, token="") as anon:
        assert (await anon.get("/kubesim/faults"))[0] == 401


async def test_error_rate_429_with_retry_after_for_chosen_verb_and_resource(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        rule = {"rate": 1.0, "code": 429, "verbs": ["create"], "resources": ["configmaps"], "retry_after": 3}
        status, _ = await c.put("/kubesim/faults", {"errors": [rule]})
        assert status == 200
        assert c.session is not None
        async with c.session.post(
            c.url + CM,
            json={"metadata": {"name": "a"}},
            headers={"Authorization": f"Bearer {c.token}"},
            ssl=c._ssl,
        ) as resp:
            assert resp.status == 429 and resp.headers["Retry-After"] == "3"
            body = await resp.json()
            assert body["reason"] == "TooManyRequests"
        assert (await c.post("/api/v1/namespaces/default/secrets", {"metadata": {"name": "s"}}))[0] == 201
        assert (await c.get(CM))[0] == 200
        await c.delete("/kubesim/faults")
        assert (await c.post(CM, {"metadata": {"name": "a"}}))[0] == 201


async def test_500_and_409_faults_from_python_api(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        kubesim.faults.update({"errors": [{"rate": 1.0, "code": 500, "verbs": ["get"]}]})
        status, body = await c.get(f"{CM}/x")
        assert status == 500 and body["reason"] == "InternalError"
        kubesim.faults.update({"errors": [{"rate": 1.0, "code": 409, "verbs": ["update", "patch"]}]})
        await c.post(CM, {"metadata": {"name": "a"}})
        status, body = await c.patch(f"{CM}/a", {"data": {"k": "v"}})
        assert status == 409 and body["reason"] == "Conflict"
        status, body = await c.put("/kubesim/faults", {"errors": [{"rate": 2, "code": 418}]})
        assert status == 400


async def test_watch_cut_after_n_events_and_forced_expiry(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CM, {"metadata": {"name": "a"}})
        await c.post(CM, {"metadata": {"name": "b"}})
        await c.patch("/kubesim/faults", {"watch_max_events": 1})
        events = [e async for e in c.watch(CM, {"resourceVersion": "0"})]
        assert len(events) == 1
        await c.put("/kubesim/faults", {"expire_next_watch": True})
        events = [e async for e in c.watch(CM, {"resourceVersion": "0"})]
        assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410
        _, faults = await c.get("/kubesim/faults")
        assert faults["expire_next_watch"] is False


async def test_watch_cut_after_seconds(kubesim: KubeSim) -> None:
    kubesim.faults.update({"watch_max_seconds": 0.2})
    async with RawClient(kubesim) as c:
        events = [e async for e in c.watch(CM, {"resourceVersion": str(kubesim.store.revision)})]
        assert events == []
