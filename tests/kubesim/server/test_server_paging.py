"""Paged LISTs (`limit`/`continue`) over HTTP: every page is read at the first page's revision, as etcd serves
them; a revision that left the retained window is 410 Expired with an inconsistent continuation; bad tokens are 400.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient

CM = "/api/v1/namespaces/default/configmaps"
TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


def cm(name: str, ns: str = "default", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data,
    }


def names(page: dict[str, Any]) -> list[str]:
    return [i["metadata"]["name"] for i in page["items"]]


async def rest_of(c: RawClient, path: str, cont: str, params: dict[str, str]) -> list[dict[str, Any]]:
    """Every later page for `cont` (asserting each is a 200 List)."""
    pages = []
    while cont:
        status, page = await c.get(path, params={**params, "continue": cont})
        assert status == 200, page
        pages.append(page)
        cont = page["metadata"].get("continue", "")
    return pages


async def test_later_pages_are_read_at_the_first_pages_revision(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        created = {}
        for i in range(6):
            _, obj = await c.post(CM, cm(f"c{i}", v=str(i)))
            created[obj["metadata"]["name"]] = obj
        status, first = await c.get(CM, params={"limit": "2"})
        assert status == 200 and names(first) == ["c0", "c1"]
        rv = first["metadata"]["resourceVersion"]
        assert first["metadata"]["remainingItemCount"] == 4
        # Writes after the first page: a create inside the unread range, a late create, updates, deletes.
        await c.post(CM, cm("c1a"))
        await c.post(CM, cm("c9-late"))
        await c.patch(f"{CM}/c3", {"data": {"v": "changed"}})
        await c.delete(f"{CM}/c4")
        await c.delete(f"{CM}/c0")
        pages = await rest_of(c, CM, first["metadata"]["continue"], {"limit": "2"})
        assert [names(p) for p in pages] == [["c2", "c3"], ["c4", "c5"]]
        assert {p["metadata"]["resourceVersion"] for p in pages} == {rv}
        assert (
            pages[0]["metadata"]["remainingItemCount"] == 2
            and "remainingItemCount" not in pages[1]["metadata"]
        )
        served = {i["metadata"]["name"]: i for p in pages for i in p["items"]}
        assert served["c3"] == created["c3"], (
            "the object as it was at the first page, resourceVersion included"
        )
        assert served["c4"] == created["c4"]
        _, fresh = await c.get(CM)
        assert names(fresh) == ["c1", "c1a", "c2", "c3", "c5", "c9-late"], "a new list sees the writes"
        assert int(fresh["metadata"]["resourceVersion"]) > int(rv)


async def test_cluster_wide_pages_are_a_snapshot_across_namespaces(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        for ns in ("a", "b"):
            await c.post("/api/v1/namespaces", {"metadata": {"name": ns}})
            for i in range(2):
                await c.post(f"/api/v1/namespaces/{ns}/configmaps", cm(f"m{i}", ns))
        _, first = await c.get("/api/v1/configmaps", params={"limit": "1"})
        assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in first["items"]] == [("a", "m0")]
        await c.post("/api/v1/namespaces/a/configmaps", cm("m5", "a"))
        await c.post("/api/v1/namespaces", {"metadata": {"name": "aa"}})
        await c.post("/api/v1/namespaces/aa/configmaps", cm("x", "aa"))
        await c.delete("/api/v1/namespaces/b/configmaps/m1")
        pages = await rest_of(c, "/api/v1/configmaps", first["metadata"]["continue"], {"limit": "1"})
        seen = [(i["metadata"]["namespace"], i["metadata"]["name"]) for p in pages for i in p["items"]]
        assert seen == [("a", "m1"), ("b", "m0"), ("b", "m1")]


async def test_selector_pages_use_the_snapshot_and_omit_the_remaining_count(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        for i in range(4):
            body = cm(f"s{i}")
            body["metadata"]["labels"] = {"team": "red" if i != 2 else "blue"}
            await c.post(CM, body)
        params = {"limit": "1", "labelSelector": "team=red"}
        _, first = await c.get(CM, params=params)
        assert names(first) == ["s0"] and "remainingItemCount" not in first["metadata"]
        # s1 leaves the selection and s2 enters it after the first page: the snapshot still has the old labels.
        await c.patch(f"{CM}/s1", {"metadata": {"labels": {"team": "blue"}}})
        await c.patch(f"{CM}/s2", {"metadata": {"labels": {"team": "red"}}})
        pages = await rest_of(c, CM, first["metadata"]["continue"], params)
        assert [n for p in pages for n in names(p)] == ["s1", "s3"]
        assert all(p["items"][0]["metadata"]["labels"] == {"team": "red"} for p in pages)


async def test_continue_after_compaction_is_410_with_an_inconsistent_continuation(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        for i in range(4):
            await c.post(CM, cm(f"c{i}"))
        _, first = await c.get(CM, params={"limit": "2"})
        token = first["metadata"]["continue"]
        await c.post(CM, cm("c2a"))
        await c.delete(f"{CM}/c3")
        status, _ = await c.post("/kubesim/compact", {})
        assert status == 200
        status, body = await c.get(CM, params={"limit": "2", "continue": token})
        assert status == 410
        assert body["kind"] == "Status" and body["reason"] == "Expired" and body["code"] == 410
        assert body["message"] == TOO_OLD
        inconsistent = body["metadata"]["continue"]
        assert inconsistent and inconsistent != token
        # The offered token continues after the same key, at the current state (c2a appears, c3 is gone).
        pages = await rest_of(c, CM, inconsistent, {"limit": "1"})
        assert [n for p in pages for n in names(p)] == ["c2", "c2a"]
        assert len({p["metadata"]["resourceVersion"] for p in pages}) == 1
        assert int(pages[0]["metadata"]["resourceVersion"]) == kubesim.store.revision


async def test_compaction_without_later_writes_keeps_the_token_valid(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        for i in range(3):
            await c.post(CM, cm(f"c{i}"))
        _, first = await c.get(CM, params={"limit": "2"})
        await c.post("/kubesim/compact", {})  # the first page's revision is still the current one
        pages = await rest_of(c, CM, first["metadata"]["continue"], {"limit": "2"})
        assert [names(p) for p in pages] == [["c2"]]


async def test_continue_older_than_the_retained_window_is_410(tmp_path: Path) -> None:
    async with KubeSim(kubeconfig_path=tmp_path / "kc", watch_window=3) as sim, RawClient(sim) as c:
        for i in range(3):
            await c.post(CM, cm(f"c{i}"))
        _, first = await c.get(CM, params={"limit": "1"})
        await c.patch(f"{CM}/c1", {"data": {"k": "1"}})
        pages = await rest_of(c, CM, first["metadata"]["continue"], {"limit": "1"})
        assert [n for p in pages for n in names(p)] == ["c1", "c2"], "one write: still inside the window"
        assert "k" not in (pages[0]["items"][0].get("data") or {})
        for i in range(4):
            await c.patch(f"{CM}/c2", {"data": {"i": str(i)}})
        status, body = await c.get(CM, params={"limit": "1", "continue": first["metadata"]["continue"]})
        assert status == 410 and body["reason"] == "Expired" and body["metadata"]["continue"]


def _token(data: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode()


async def test_garbage_continue_tokens_are_400_bad_request(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        for i in range(3):
            await c.post(CM, cm(f"c{i}"))
        _, first = await c.get(CM, params={"limit": "1"})
        good = json.loads(base64.urlsafe_b64decode(first["metadata"]["continue"] + "=="))
        future = dict(good, rv=kubesim.store.revision + 100)
        bad = [
            "not a token!",
            base64.urlsafe_b64encode(b"\xff\xfe").decode(),
            _token(["a", "list"]),
            _token(dict(good, v="other/v9")),
            _token(dict(good, rv=0)),
            _token(dict(good, rv="12")),
            _token(future),
            _token(dict(good, start="c0")),
            _token(dict(good, start=["default", ""])),
        ]
        for token in bad:
            status, body = await c.get(CM, params={"limit": "1", "continue": token})
            assert status == 400, (token, body)
            assert body["reason"] == "BadRequest" and body["message"].startswith(
                "continue key is not valid: "
            )
        status, _ = await c.get(CM, params={"limit": "1", "continue": first["metadata"]["continue"]})
        assert status == 200, "the server's own token still works"


async def test_table_pages_carry_the_snapshot_and_remaining_count(kubesim: KubeSim) -> None:
    """What `kubectl get --chunk-size` asks for: Tables, paged with the same tokens."""
    table = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    async with RawClient(kubesim) as c:
        for i in range(3):
            await c.post(CM, cm(f"c{i}"))
        _, first = await c.get(CM, params={"limit": "2"}, headers=table)
        assert first["kind"] == "Table" and [r["cells"][0] for r in first["rows"]] == ["c0", "c1"]
        assert first["metadata"]["remainingItemCount"] == 1
        await c.delete(f"{CM}/c2")
        status, last = await c.get(
            CM, params={"limit": "2", "continue": first["metadata"]["continue"]}, headers=table
        )
        assert status == 200 and [r["cells"][0] for r in last["rows"]] == ["c2"]
        assert last["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


async def test_events_api_pages_are_a_snapshot_of_the_shared_core_events(kubesim: KubeSim) -> None:
    """events.k8s.io/v1 is a view of core Events: its pages are read at the first page's revision too."""
    core = "/api/v1/namespaces/default/events"
    new = "/apis/events.k8s.io/v1/namespaces/default/events"
    async with RawClient(kubesim) as c:
        for i in range(3):
            event = {
                "metadata": {"name": f"e{i}"},
                "involvedObject": {"kind": "ConfigMap", "name": "cm", "namespace": "default"},
                "reason": "Made",
                "message": f"event {i}",
                "type": "Normal",
            }
            status, body = await c.post(core, event)
            assert status == 201, body
        _, first = await c.get(new, params={"limit": "1"})
        assert first["apiVersion"] == "events.k8s.io/v1" and names(first) == ["e0"]
        await c.patch(f"{core}/e1", {"message": "rewritten"})
        await c.delete(f"{core}/e2")
        pages = await rest_of(c, new, first["metadata"]["continue"], {"limit": "1"})
        assert [(i["metadata"]["name"], i["note"]) for p in pages for i in p["items"]] == [
            ("e1", "event 1"),
            ("e2", "event 2"),
        ]
