"""CRUD over HTTP: status codes, Status bodies, server-set metadata, optimistic concurrency."""

from __future__ import annotations

from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient

CM = "/api/v1/namespaces/default/configmaps"


def cm(name: str, **data: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def test_create_returns_201_with_server_metadata(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, obj = await c.post(CM, cm("a", x="1"))
        assert status == 201
        meta = obj["metadata"]
        assert meta["namespace"] == "default" and meta["uid"] and meta["creationTimestamp"].endswith("Z")
        assert int(meta["resourceVersion"]) > 0 and "generation" not in meta, "ConfigMaps have no generation"
        status, got = await c.get(f"{CM}/a")
        assert status == 200 and got == obj


async def test_duplicate_create_is_409_already_exists(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CM, cm("a"))
        status, body = await c.post(CM, cm("a"))
        assert status == 409 and body["reason"] == "AlreadyExists" and body["details"]["name"] == "a"
        assert body["message"] == 'configmaps "a" already exists'


async def test_get_missing_is_404_not_found_status(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, body = await c.get(f"{CM}/nope")
        assert status == 404
        assert body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": 'configmaps "nope" not found',
            "reason": "NotFound",
            "code": 404,
            "details": {"name": "nope", "kind": "configmaps"},
        }


async def test_resource_versions_are_global_and_increasing(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, a = await c.post(CM, cm("a"))
        _, b = await c.post("/api/v1/namespaces/kube-system/configmaps", cm("b"))
        _, a2 = await c.put(f"{CM}/a", dict(a, data={"k": "v"}))
        rvs = [int(o["metadata"]["resourceVersion"]) for o in (a, b, a2)]
        assert rvs == sorted(rvs) and len(set(rvs)) == 3


async def test_put_with_stale_resource_version_is_409_conflict(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, a = await c.post(CM, cm("a"))
        status, a2 = await c.put(f"{CM}/a", dict(a, data={"v": "2"}))
        assert status == 200 and a2["data"] == {"v": "2"}
        status, body = await c.put(f"{CM}/a", dict(a, data={"v": "3"}))
        assert status == 409 and body["reason"] == "Conflict"
        assert "the object has been modified" in body["message"]
        _, now = await c.get(f"{CM}/a")
        assert now["data"] == {"v": "2"}


async def test_put_keeps_uid_and_creation_timestamp(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, a = await c.post(CM, cm("a"))
        body = cm("a", v="1")
        body["metadata"]["uid"] = a["metadata"]["uid"]  # type: ignore[index]
        status, a2 = await c.put(f"{CM}/a", body)
        assert status == 200
        assert a2["metadata"]["creationTimestamp"] == a["metadata"]["creationTimestamp"]
        assert a2["metadata"]["uid"] == a["metadata"]["uid"]


async def test_noop_put_does_not_bump_resource_version(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        _, a = await c.post(CM, cm("a", x="1"))
        status, same = await c.put(f"{CM}/a", a)
        assert status == 200 and same["metadata"]["resourceVersion"] == a["metadata"]["resourceVersion"]


async def test_generation_bumps_only_on_spec_changes(kubesim: KubeSim) -> None:
    dep = "/apis/apps/v1/namespaces/default/deployments"
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    }
    async with RawClient(kubesim) as c:
        status, d = await c.post(dep, body)
        assert status == 201 and d["metadata"]["generation"] == 1
        _, d = await c.patch(f"{dep}/d", {"metadata": {"labels": {"x": "y"}}})
        assert d["metadata"]["generation"] == 1
        _, d = await c.patch(f"{dep}/d/status", {"status": {"replicas": 1}})
        assert d["metadata"]["generation"] == 1 and d["status"] == {"replicas": 1}
        _, d = await c.patch(f"{dep}/d", {"spec": {"replicas": 3}})
        assert d["metadata"]["generation"] == 2


async def test_generate_name(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, a = await c.post(CM, {"metadata": {"generateName": "gen-"}})
        assert status == 201 and a["metadata"]["name"].startswith("gen-") and len(a["metadata"]["name"]) == 9


async def test_delete_then_get_is_404(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CM, cm("a"))
        status, body = await c.delete(f"{CM}/a", {"kind": "DeleteOptions", "apiVersion": "v1"})
        assert status == 200 and body["kind"] == "Status" and body["status"] == "Success"
        status, _ = await c.get(f"{CM}/a")
        assert status == 404
        status, body = await c.delete(f"{CM}/a")
        assert status == 404 and body["reason"] == "NotFound"


async def test_invalid_name_is_422_with_causes(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, body = await c.post(CM, cm("Not_Valid"))
        assert status == 422 and body["reason"] == "Invalid"
        assert body["details"]["causes"][0]["field"] == "metadata.name"


async def test_unknown_namespace_is_404_and_bad_json_is_400(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, body = await c.post("/api/v1/namespaces/missing/configmaps", cm("a"))
        assert status == 404 and body["message"] == 'namespaces "missing" not found'
        status, body = await c.post(CM, "{not json")
        assert status == 400 and body["reason"] == "BadRequest"


async def test_list_has_kind_api_version_and_resource_version(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CM, cm("b"))
        await c.post(CM, cm("a"))
        status, lst = await c.get(CM, params={"limit": "500"})
        assert status == 200
        assert lst["kind"] == "ConfigMapList" and lst["apiVersion"] == "v1"
        assert int(lst["metadata"]["resourceVersion"]) >= max(
            int(i["metadata"]["resourceVersion"]) for i in lst["items"]
        )
        assert [i["metadata"]["name"] for i in lst["items"]] == ["a", "b"]
        status, all_ns = await c.get("/api/v1/configmaps")
        assert status == 200 and len(all_ns["items"]) == 2


async def test_label_and_field_selectors(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        for name, labels in (("a", {"app": "x", "tier": "web"}), ("b", {"app": "y"}), ("c", {})):
            await c.post(CM, {"metadata": {"name": name, "labels": labels}})

        async def names(**params: str) -> list[str]:
            status, lst = await c.get(CM, params=params)
            assert status == 200, lst
            return [i["metadata"]["name"] for i in lst["items"]]

        assert await names(labelSelector="app=x") == ["a"]
        assert await names(labelSelector="app in (x,y)") == ["a", "b"]
        assert await names(labelSelector="app notin (x)") == ["b", "c"]
        assert await names(labelSelector="!app") == ["c"]
        assert await names(labelSelector="app,tier!=db") == ["a", "b"]
        assert await names(fieldSelector="metadata.name=b") == ["b"]
        assert await names(fieldSelector="metadata.namespace!=default") == []
        status, body = await c.get(CM, params={"labelSelector": "app in (x"})
        assert status == 400 and body["reason"] == "BadRequest"
        status, body = await c.get(CM, params={"fieldSelector": "spec.nodeName=n1"})
        assert status == 400


async def test_limit_and_continue_page_through_all_items(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        for i in range(5):
            await c.post(CM, cm(f"c{i}"))
        seen: list[str] = []
        params = {"limit": "2"}
        while True:
            _, page = await c.get(CM, params=params)
            seen += [i["metadata"]["name"] for i in page["items"]]
            cont = page["metadata"].get("continue")
            if not cont:
                break
            assert page["metadata"]["remainingItemCount"] > 0
            params = {"limit": "2", "continue": cont}
        assert seen == [f"c{i}" for i in range(5)]


async def test_status_subresource_is_separate(kubesim: KubeSim) -> None:
    pods = "/api/v1/namespaces/default/pods"
    pod = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    }
    async with RawClient(kubesim) as c:
        status, p = await c.post(pods, pod)
        assert status == 201 and p["status"]["phase"] == "Pending", "create resets status"
        _, p = await c.put(f"{pods}/p/status", dict(p, status={"phase": "Running"}, spec={"containers": []}))
        assert p["status"] == {"phase": "Running"} and p["spec"]["containers"][0]["name"] == "c"
        _, p = await c.patch(f"{pods}/p", {"status": {"phase": "Failed"}, "metadata": {"labels": {"a": "b"}}})
        assert p["status"] == {"phase": "Running"} and p["metadata"]["labels"] == {"a": "b"}
        _, lst = await c.get(pods, params={"fieldSelector": "status.phase=Running"})
        assert [i["metadata"]["name"] for i in lst["items"]] == ["p"]


async def test_cluster_scoped_kinds_have_no_namespace(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, node = await c.post("/api/v1/nodes", {"metadata": {"name": "n1", "namespace": "x"}})
        assert status == 201 and "namespace" not in node["metadata"]
        status, _ = await c.get("/api/v1/namespaces/default/nodes/n1")
        assert status == 404
        status, lst = await c.get("/api/v1/nodes")
        assert [n["metadata"]["name"] for n in lst["items"]] == ["n1"]


async def test_scale_subresource_of_deployments(kubesim: KubeSim) -> None:
    dep = "/apis/apps/v1/namespaces/default/deployments"
    body = {
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    }
    async with RawClient(kubesim) as c:
        await c.post(dep, body)
        status, scale = await c.get(f"{dep}/d/scale")
        assert status == 200 and scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2
        assert scale["status"]["selector"] == "a=b"
        status, scale = await c.patch(f"{dep}/d/scale", {"spec": {"replicas": 5}})
        assert status == 200 and scale["spec"]["replicas"] == 5
        _, d = await c.get(f"{dep}/d")
        assert d["spec"]["replicas"] == 5 and d["metadata"]["generation"] == 2
        status, _ = await c.patch(f"{dep}/d/scale", {"spec": {"replicas": -1}})
        assert status == 422


async def test_the_selector_of_a_deployment_is_immutable(kubesim: KubeSim) -> None:
    """As Kubernetes (apps/v1 ValidateDeploymentUpdate): a changed ``spec.selector`` is refused, by an update, a
    merge patch and a server-side apply alike; the rest of the spec still changes."""
    dep = "/apis/apps/v1/namespaces/default/deployments"
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b", "c": "d"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    }
    async with RawClient(kubesim) as c:
        assert (await c.post(dep, body))[0] == 201
        status, refused = await c.patch(f"{dep}/d", {"spec": {"selector": {"matchLabels": {"c": "d"}}}})
        assert status == 422 and refused["reason"] == "Invalid"
        assert "spec.selector" in refused["message"] and "field is immutable" in refused["message"]
        _, live = await c.get(f"{dep}/d")
        live["spec"]["selector"] = {"matchLabels": {"a": "b", "c": "d"}}
        assert (await c.put(f"{dep}/d", live))[0] == 422
        applied = {**body, "spec": {**body["spec"], "selector": {"matchLabels": {"c": "d"}}}}
        status, _ = await c.patch(
            f"{dep}/d",
            applied,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": "t", "force": "true"},
        )
        assert status == 422
        # the same selector, the template's labels changed: accepted
        status, changed = await c.patch(f"{dep}/d", {"spec": {"template": {"metadata": {"labels": {"e": "f"}}}}})
        assert status == 200 and changed["spec"]["selector"] == {"matchLabels": {"a": "b"}}
