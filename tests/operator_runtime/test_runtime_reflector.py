"""Reflector cache and controller mapping against a scripted list/watch source."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubesim.sim import KubeSim
from operator_runtime.config import make_api
from operator_runtime.controller import Action, Controller
from operator_runtime.errors import Expired
from operator_runtime.kinds import ResourceInfo
from operator_runtime.objects import object_key
from operator_runtime.projection import KEEP, intern_strings, project
from operator_runtime.reflector import ApiSource, Reflector
from operator_runtime.workqueue import ExponentialBackoff


def obj(name: str, rv: str, namespace: str | None = "ns", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, **extra}


class ScriptedSource:
    """Lists return ``lists`` in turn; each watch plays the next script (a list of events or an exception)."""

    def __init__(self, lists: list[tuple[list[dict[str, Any]], str]], watches: list[Any]) -> None:
        self.lists = lists
        self.watches = watches
        self.watch_versions: list[str] = []
        self.list_calls = 0
        self.idle = asyncio.Event()

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        self.list_calls += 1
        return self.lists.pop(0)

    async def watch(self, resource_version: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        self.watch_versions.append(resource_version)
        if not self.watches:
            self.idle.set()
            await asyncio.Event().wait()
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script
        for event in script:
            yield event


async def run_until_idle(reflector: Reflector, source: ScriptedSource) -> None:
    task = asyncio.create_task(reflector.run())
    await asyncio.wait_for(source.idle.wait(), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_list_then_watch_resumes_from_last_version_and_tracks_bookmarks() -> None:
    source = ScriptedSource(
        lists=[([obj("a", "5")], "10")],
        watches=[
            [("ADDED", obj("b", "11")), ("MODIFIED", obj("a", "12", spec={"x": 1}))],
            [("BOOKMARK", {"metadata": {"resourceVersion": "20"}})],
            [("DELETED", obj("b", "21"))],
        ],
    )
    reflector = Reflector("things", source)
    seen: list[tuple[Any, Any]] = []
    reflector.add_handler(lambda old, new: seen.append(
        (old and old["metadata"]["resourceVersion"], new and new["metadata"]["resourceVersion"])))
    await run_until_idle(reflector, source)
    assert reflector.synced
    assert source.watch_versions == ["10", "12", "20", "21"]
    assert reflector.keys() == ["ns/a"]
    assert reflector.get("ns/a")["spec"] == {"x": 1}  # type: ignore[index]
    assert seen == [(None, "5"), (None, "11"), ("5", "12"), ("11", None)]
    assert source.list_calls == 1


async def test_gone_relists_and_emits_only_the_differences() -> None:
    source = ScriptedSource(
        lists=[([obj("a", "1"), obj("b", "2"), obj("c", "3")], "3"),
               ([obj("a", "1"), obj("b", "7"), obj("d", "8")], "9")],
        watches=[Expired(410, "Expired", "too old")],
    )
    reflector = Reflector("things", source)
    changes: list[tuple[Any, Any]] = []
    reflector.add_handler(lambda old, new: changes.append(
        (old and object_key(old), new and object_key(new))))
    await run_until_idle(reflector, source)
    assert sorted(reflector.keys()) == ["ns/a", "ns/b", "ns/d"]
    after_first_list = changes[3:]
    assert sorted(after_first_list, key=str) == sorted(
        [("ns/c", None), ("ns/b", "ns/b"), (None, "ns/d")], key=str)
    assert source.watch_versions == ["3", "9"]


async def test_errors_back_off_and_retry_without_relisting() -> None:
    source = ScriptedSource(lists=[([], "1")], watches=[RuntimeError("connection reset"),
                                                        [("ADDED", obj("a", "2"))]])
    reflector = Reflector("things", source, backoff=ExponentialBackoff(base=0.001, cap=0.01))
    await run_until_idle(reflector, source)
    assert reflector.errors == 1
    assert source.list_calls == 1
    assert reflector.keys() == ["ns/a"]


async def test_secondary_index_follows_updates_and_deletes() -> None:
    source = ScriptedSource(
        lists=[([obj("l1", "1", spec={"className": "x"}), obj("l2", "2", spec={"className": "x"})], "2")],
        watches=[[("MODIFIED", obj("l1", "3", spec={"className": "y"})), ("DELETED", obj("l2", "4"))]],
    )
    reflector = Reflector("listeners", source)
    reflector.add_index("class", lambda o: [o["spec"]["className"]] if "spec" in o else [])
    await run_until_idle(reflector, source)
    assert reflector.by_index("class", "x") == []
    assert [object_key(o) for o in reflector.by_index("class", "y")] == ["ns/l1"]


async def test_controller_maps_secondary_changes_old_and_new_to_primary_keys() -> None:
    primary_source = ScriptedSource(lists=[([obj("l1", "1"), obj("l2", "2")], "2")], watches=[])
    secondary_source = ScriptedSource(
        lists=[([obj("n", "1", namespace=None, users=["ns/l1"])], "1")],
        watches=[[("MODIFIED", obj("n", "2", namespace=None, users=["ns/l2"]))]],
    )
    primary = Reflector("listeners", primary_source)
    secondary = Reflector("nodes", secondary_source)
    reconciled: list[str] = []
    gate = asyncio.Event()

    async def reconcile(listener: dict[str, Any], context: None) -> Action:
        reconciled.append(object_key(listener))
        if len(reconciled) >= 4:
            gate.set()
        return Action.await_change()

    controller = Controller("test", primary, reconcile, context=None, workers=2)
    controller.watches(secondary, lambda o: o.get("users", []))
    # the secondary watch event must come after the controller started: hold it back until then
    script = secondary_source.watches.pop(0)
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(secondary_source.idle.wait(), 5)
    assert controller.synced
    await asyncio.sleep(0.05)
    assert sorted(reconciled) == ["ns/l1", "ns/l2"]  # one initial pass per primary object
    for kind, o in script:
        secondary._on_watch_event(kind, o)
    await asyncio.wait_for(gate.wait(), 5)
    assert sorted(reconciled[2:]) == ["ns/l1", "ns/l2"]  # node moved from l1 to l2: both reconciled
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_controller_retries_failures_with_backoff_then_succeeds() -> None:
    source = ScriptedSource(lists=[([obj("l1", "1")], "1")], watches=[])
    primary = Reflector("listeners", source)
    attempts: list[str] = []
    done = asyncio.Event()

    async def reconcile(listener: dict[str, Any], context: None) -> Action:
        attempts.append(object_key(listener))
        if len(attempts) < 3:
            raise RuntimeError("API rejected")
        done.set()
        return Action.await_change()

    controller = Controller("test", primary, reconcile, context=None, workers=1)
    controller.queue.backoff.base = 0.01
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(done.wait(), 5)
    assert attempts == ["ns/l1"] * 3
    assert controller.queue.backoff.failures("ns/l1") == 0  # reset after success
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_requeue_runs_the_reconcile_again_after_the_delay_and_await_change_does_not() -> None:
    source = ScriptedSource(lists=[([obj("again", "1"), obj("once", "2")], "2")], watches=[])
    primary = Reflector("listeners", source)
    runs: list[str] = []
    third = asyncio.Event()

    async def reconcile(listener: dict[str, Any], context: None) -> Action:
        runs.append(object_key(listener))
        if runs.count("ns/again") == 3:
            third.set()
        return Action.requeue(0.01) if object_key(listener) == "ns/again" else Action.await_change()

    controller = Controller("test", primary, reconcile, context=None, workers=1)
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(third.wait(), 5)
    assert runs.count("ns/once") == 1
    assert controller.queue.backoff.failures("ns/again") == 0  # a requeue is no failure
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_the_error_policy_decides_what_a_failure_does() -> None:
    source = ScriptedSource(lists=[([obj("broken", "1"), obj("flaky", "2")], "2")], watches=[])
    primary = Reflector("listeners", source)
    runs: list[str] = []
    seen: list[tuple[str, str, str]] = []
    flaky_done = asyncio.Event()

    async def reconcile(listener: dict[str, Any], context: str) -> Action:
        key = object_key(listener)
        runs.append(key)
        if key == "ns/broken":
            raise ValueError("bad spec")
        if runs.count(key) < 3:
            raise ConnectionError("API down")
        flaky_done.set()
        return Action.await_change()

    def error_policy(listener: dict[str, Any], error: Exception, context: str) -> Action:
        seen.append((object_key(listener), type(error).__name__, context))
        return Action.await_change() if isinstance(error, ValueError) else Action.retry()

    controller = Controller("test", primary, reconcile, error_policy, context="ctx", workers=1)
    controller.queue.backoff.base = 0.01
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(flaky_done.wait(), 5)
    assert runs.count("ns/broken") == 1  # waits for a change: never retried
    assert seen.count(("ns/broken", "ValueError", "ctx")) == 1
    assert seen.count(("ns/flaky", "ConnectionError", "ctx")) == 2
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_second_run_is_not_synced_before_it_has_listed_again() -> None:
    """After a restart (e.g. leadership won back) the old cache may be stale: workers must wait for a fresh list."""
    release = asyncio.Event()

    class SlowSecondList(ScriptedSource):
        async def list(self) -> tuple[list[dict[str, Any]], str]:
            if self.list_calls == 1:
                await release.wait()
            return await super().list()

    source = SlowSecondList(lists=[([obj("a", "1")], "1"), ([obj("b", "5")], "5")], watches=[])
    reflector = Reflector("things", source)
    await run_until_idle(reflector, source)
    assert reflector.synced and reflector.keys() == ["ns/a"]

    source.idle.clear()
    task = asyncio.create_task(reflector.run())
    await asyncio.sleep(0.05)
    assert not reflector.synced  # still listing: the old content must not be trusted
    release.set()
    await asyncio.wait_for(reflector.wait_synced(), 5)
    assert reflector.keys() == ["ns/b"]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_api_source_lists_in_pages_into_one_snapshot(kubesim: KubeSim) -> None:
    for i in range(5):
        await kubesim.api.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                "metadata": {"name": f"cm-{i}", "namespace": "default"}}, "default")
    api = make_api(str(kubesim.kubeconfig_path))
    pages: list[str | None] = []
    request = api._request

    async def counting(method: str, url: str, **kwargs: Any) -> Any:
        pages.append((kwargs.get("params") or {}).get("limit"))
        return await request(method, url, **kwargs)

    api._request = counting  # type: ignore[method-assign]
    try:
        source = ApiSource(api, ResourceInfo("v1", "ConfigMap", "configmaps", namespaced=True), namespace="default",
                           page_size=2)
        items, version = await source.list()
    finally:
        await api.close()
    assert sorted(i["metadata"]["name"] for i in items if i["metadata"]["name"].startswith("cm-")) == [
        f"cm-{i}" for i in range(5)]
    assert all(i["kind"] == "ConfigMap" for i in items)
    assert version and len(pages) >= 3 and set(pages) == {"2"}


async def test_transform_applies_to_listed_and_watched_objects_and_indexes_follow_moves() -> None:
    """What the cache stores is the transform's result, for the list, every watch event and a relist after 410;
    an index value naming one object and then several (and one again) always returns exactly its objects."""
    def slice_(name: str, rv: str, service: str, **extra: Any) -> dict[str, Any]:
        item = obj(name, rv, spec={"service": service}, **extra)
        item["metadata"]["managedFields"] = [{"manager": "x"}]
        return item

    source = ScriptedSource(
        lists=[([slice_("a", "1", "web", big="x" * 100)], "5"),
               ([slice_("a", "30", "db"), slice_("c", "30", "db")], "30")],
        watches=[
            [("ADDED", slice_("b", "6", "web", big="y")), ("MODIFIED", slice_("a", "7", "db"))],
            Expired(410, "Expired", "too old"),
        ],
    )
    transform = project({"metadata": {"name": KEEP, "namespace": KEEP, "resourceVersion": KEEP},
                         "spec": {"service": KEEP}})
    reflector = Reflector("slices", source, transform=transform)
    reflector.add_index("service", lambda o: [o["spec"]["service"]])
    by_service: list[tuple[str, list[str]]] = []

    def record(old: Any, new: Any) -> None:
        for value in ("web", "db"):
            by_service.append((value, [object_key(o) for o in reflector.by_index("service", value)]))

    reflector.add_handler(record)
    await run_until_idle(reflector, source)
    for key in reflector.keys():
        stored = reflector.get(key)
        assert stored is not None and "big" not in stored and "managedFields" not in stored["metadata"]
    assert reflector.by_index("service", "web") == []
    assert [object_key(o) for o in reflector.by_index("service", "db")] == ["ns/a", "ns/c"]
    assert by_service[:6] == [("web", ["ns/a"]), ("db", []),  # listed
                              ("web", ["ns/a", "ns/b"]), ("db", []),  # b added: two under "web"
                              ("web", ["ns/b"]), ("db", ["ns/a"])]  # a moved: one each
    assert reflector.get("ns/b") is None  # gone in the relist


def test_projection_keeps_declared_fields_only() -> None:
    keep = project({"metadata": {"name": KEEP, "labels": {"a": KEEP}}, "items": [{"n": KEEP, "c": {"r": KEEP}}],
                    "whole": KEEP})
    source = {"apiVersion": "v1", "kind": "K", "metadata": {"name": "x", "uid": "u", "labels": {"a": "1", "b": "2"}},
              "items": [{"n": "n1", "c": {"r": True, "s": 1}, "drop": 1}, {"c": {}}], "whole": {"deep": [1, {"x": 2}]},
              "gone": {"big": "x"}}
    assert keep(source) == {"apiVersion": "v1", "kind": "K", "metadata": {"name": "x", "labels": {"a": "1"}},
                            "items": [{"n": "n1", "c": {"r": True}}, {"c": {}}], "whole": {"deep": [1, {"x": 2}]}}
    # a value of another shape than declared is kept as sent (the reader then rejects it as it would anyway)
    assert keep({"items": "not-a-list", "metadata": ["odd"]}) == {"items": "not-a-list", "metadata": ["odd"]}
    assert keep(source)["whole"] is not source["whole"]  # the cache owns what it stores
    a, b = intern_strings({"k": "".join(["sha", "red"])}), intern_strings({"k": "".join(["sh", "ared"])})
    assert a["k"] is b["k"]  # equal strings from different objects are one object in memory
    with pytest.raises(ValueError, match="exactly one entry"):
        project({"items": [{"a": KEEP}, {"b": KEEP}]})
    with pytest.raises(ValueError, match="expected KEEP"):
        project({"metadata": "name"})


def test_equal_small_parts_of_cached_objects_are_shared_without_mixing_up_json_types() -> None:
    one = intern_strings({"spec": {"ports": [{"name": "http", "port": 80}], "flag": True},
                          "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    two = intern_strings({"spec": {"ports": [{"name": "http", "port": 80}], "flag": True},
                          "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert one["spec"]["ports"] is two["spec"]["ports"] and one["status"] is two["status"]
    # 1, 1.0 and true are different JSON values; key order is kept
    variants = [intern_strings({"v": value, "a": 1, "b": 2}) for value in (1, 1.0, True, -0.0, 0.0)]
    assert [type(v["v"]) for v in variants] == [int, float, bool, float, float]
    assert str(variants[3]["v"]) == "-0.0" and str(variants[4]["v"]) == "0.0"
    assert list(intern_strings({"b": 1, "a": 2})) == ["b", "a"]
    assert intern_strings({"b": 1, "a": 2}) is not intern_strings({"a": 2, "b": 1})
    # large parts are rebuilt, not shared
    big = {"items": [{"n": i} for i in range(20)]}
    assert intern_strings(big)["items"] is not intern_strings(big)["items"] and intern_strings(big) == big
