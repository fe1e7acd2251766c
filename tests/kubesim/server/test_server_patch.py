"""PATCH content types over HTTP: merge, JSON patch (failed test -> 422), strategic merge, apply; dry run."""

from __future__ import annotations

from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient

CM = "/api/v1/namespaces/default/configmaps"
DEP = "/apis/apps/v1/namespaces/default/deployments"


def deployment() -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "containers": [{"name": "main", "image": "nginx:1"}, {"name": "side", "image": "busybox"}]
                },
            },
        },
    }


async def test_json_patch_and_failed_test_op(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CM, {"metadata": {"name": "a"}, "data": {"x": "1"}})
        status, obj = await c.patch(
            f"{CM}/a",
            [
                {"op": "test", "path": "/data/x", "value": "1"},
                {"op": "replace", "path": "/data/x", "value": "2"},
            ],
            "application/json-patch+json",
        )
        assert status == 200 and obj["data"] == {"x": "2"}
        status, body = await c.patch(
            f"{CM}/a", [{"op": "test", "path": "/data/x", "value": "1"}], "application/json-patch+json"
        )
        assert status == 422 and body["kind"] == "Status"
        _, now = await c.get(f"{CM}/a")
        assert now["data"] == {"x": "2"}


async def test_merge_patch_with_stale_resource_version_conflicts(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, a = await c.post(CM, {"metadata": {"name": "a"}})
        await c.patch(f"{CM}/a", {"data": {"k": "1"}})
        status, body = await c.patch(
            f"{CM}/a", {"metadata": {"resourceVersion": a["metadata"]["resourceVersion"]}, "data": {"k": "2"}}
        )
        assert status == 409 and body["reason"] == "Conflict"


async def test_strategic_merge_patch_merges_containers_by_name(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, _ = await c.post(DEP, deployment())
        assert status == 201
        patch = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:2"}]}}}}
        status, d = await c.patch(f"{DEP}/d", patch, "application/strategic-merge-patch+json")
        assert status == 200
        images = {x["name"]: x["image"] for x in d["spec"]["template"]["spec"]["containers"]}
        assert images == {"main": "nginx:2", "side": "busybox"}


async def test_strategic_merge_patch_is_415_for_custom_resources_and_unknown_types(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CM, {"metadata": {"name": "a"}})
        status, body = await c.patch(f"{CM}/a", {"data": {}}, "text/plain")
        assert status == 415 and body["reason"] == "UnsupportedMediaType"


async def test_apply_creates_then_conflicts_and_force_case_insensitive(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        cfg = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"a": "1"}}
        status, obj = await c.patch(
            f"{CM}/s", cfg, "application/apply-patch+yaml", params={"fieldManager": "one"}
        )
        assert status == 201 and obj["data"] == {"a": "1"}
        cfg["data"] = {"a": "2"}
        status, body = await c.patch(
            f"{CM}/s", cfg, "application/apply-patch+yaml", params={"fieldManager": "two", "force": "false"}
        )
        assert status == 409 and body["reason"] == "Conflict" and '"one"' in body["message"]
        assert body["details"]["causes"][0]["field"] == ".data.a"
        status, obj = await c.patch(
            f"{CM}/s", cfg, "application/apply-patch+yaml", params={"fieldManager": "two", "force": "True"}
        )
        assert status == 200 and obj["data"] == {"a": "2"}
        status, body = await c.patch(f"{CM}/s", cfg, "application/apply-patch+yaml")
        assert status == 400


async def test_apply_yaml_body_and_dropped_field_is_removed(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        yaml_body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\ndata:\n  a: '1'\n  b: '2'\n"
        status, obj = await c.patch(
            f"{CM}/y", yaml_body, "application/apply-patch+yaml", params={"fieldManager": "m"}
        )
        assert status == 201 and obj["data"] == {"a": "1", "b": "2"}
        yaml_body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\ndata:\n  a: '1'\n"
        status, obj = await c.patch(
            f"{CM}/y", yaml_body, "application/apply-patch+yaml", params={"fieldManager": "m"}
        )
        assert status == 200 and obj["data"] == {"a": "1"}


async def test_dry_run_writes_nothing(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, obj = await c.post(CM, {"metadata": {"name": "dry"}}, params={"dryRun": "All"})
        assert status == 201 and obj["metadata"]["name"] == "dry"
        assert (await c.get(f"{CM}/dry"))[0] == 404


async def test_hostile_bodies_are_400_and_write_nothing(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        bomb = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\na: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b]\n"
        status, body = await c.patch(
            f"{CM}/bomb", bomb, "application/apply-patch+yaml", params={"fieldManager": "m"}
        )
        assert status == 400 and "aliases" in body["message"]
        deep = '{"metadata": {"name": "deep"}, "data": ' + "[" * 100_000 + "]" * 100_000 + "}"
        status, body = await c.post(CM, deep)
        assert status == 400 and body["reason"] == "BadRequest"
        for name in ("bomb", "deep"):
            assert (await c.get(f"{CM}/{name}"))[0] == 404
