"""CustomResourceDefinitions registered live: discovery, Established, scope, status subresource, schema, Table."""

from __future__ import annotations

from typing import Any

from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def crd(scope: str = "Namespaced") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gizmos.example.com"},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "shortNames": ["gz"]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {
                                        "size": {"type": "integer"},
                                        "mode": {
                                            "type": "string",
                                            "enum": ["fast", "slow"],
                                            "default": "fast",
                                        },
                                    },
                                },
                                "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
                            },
                        }
                    },
                }
            ],
        },
    }


def gizmo(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Gizmo", "metadata": {"name": name}, "spec": spec}


async def test_crd_is_established_and_discoverable(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, created = await c.post(CRDS, crd())
        assert status == 201
        conditions = {x["type"]: x["status"] for x in created["status"]["conditions"]}
        assert conditions["Established"] == "True" and conditions["NamesAccepted"] == "True"
        _, groups = await c.get("/apis")
        assert any(g["name"] == "example.com" for g in groups["groups"])
        status, rl = await c.get("/apis/example.com/v1")
        assert status == 200
        entry = next(r for r in rl["resources"] if r["name"] == "gizmos")
        assert entry["kind"] == "Gizmo" and entry["namespaced"] is True and entry["shortNames"] == ["gz"]
        assert any(r["name"] == "gizmos/status" for r in rl["resources"])


async def test_custom_objects_are_defaulted_validated_and_status_is_separate(kubesim: KubeSim) -> None:
    path = "/apis/example.com/v1/namespaces/default/gizmos"
    async with RawClient(kubesim) as c:
        await c.post(CRDS, crd())
        status, g = await c.post(path, dict(gizmo("g", {"size": 2, "junk": 1}), status={"phase": "X"}))
        assert status == 201
        assert g["spec"] == {"size": 2, "mode": "fast"} and "status" not in g
        status, body = await c.post(path, gizmo("bad", {"mode": "warp"}))
        assert status == 422 and body["reason"] == "Invalid"
        fields = {x["field"] for x in body["details"]["causes"]}
        assert {"spec.size", "spec.mode"} <= fields
        status, g = await c.patch(f"{path}/g/status", {"status": {"phase": "Ready"}, "spec": {"size": 9}})
        assert status == 200 and g["status"] == {"phase": "Ready"} and g["spec"]["size"] == 2
        status, g = await c.patch(f"{path}/g", {"spec": {"size": 3}, "status": {"phase": "Nope"}})
        assert g["status"] == {"phase": "Ready"} and g["metadata"]["generation"] == 2


async def test_table_uses_printer_columns(kubesim: KubeSim) -> None:
    path = "/apis/example.com/v1/namespaces/default/gizmos"
    async with RawClient(kubesim) as c:
        await c.post(CRDS, crd())
        await c.post(path, gizmo("g", {"size": 5}))
        status, table = await c.get(
            path, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
        )
        assert status == 200 and table["kind"] == "Table"
        assert [col["name"] for col in table["columnDefinitions"]] == ["Name", "Size"]
        assert table["rows"][0]["cells"] == ["g", 5]


async def test_cluster_scoped_crd_and_deletion_unregisters(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CRDS, crd("Cluster"))
        status, g = await c.post("/apis/example.com/v1/gizmos", gizmo("g", {"size": 1}))
        assert status == 201 and "namespace" not in g["metadata"]
        assert (await c.get("/apis/example.com/v1/namespaces/default/gizmos"))[0] == 404
        await c.delete(f"{CRDS}/gizmos.example.com")
        assert (await c.get("/apis/example.com/v1/gizmos"))[0] == 404
        assert (await c.get("/apis/example.com/v1"))[0] == 404


async def test_invalid_crd_is_rejected(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        bad = crd()
        bad["metadata"]["name"] = "wrong.example.com"
        status, body = await c.post(CRDS, bad)
        assert status == 422 and any(x["field"] == "metadata.name" for x in body["details"]["causes"])


async def test_field_validation_strict_rejects_and_warn_reports_unknown_fields(kubesim: KubeSim) -> None:
    path = "/apis/example.com/v1/namespaces/default/gizmos"
    async with RawClient(kubesim) as c:
        await c.post(CRDS, crd())
        status, body = await c.post(
            path, gizmo("s", {"size": 1, "bogus": 1}), params={"fieldValidation": "Strict"}
        )
        assert status == 400 and 'unknown field "spec.bogus"' in body["message"]
        assert (await c.get(f"{path}/s"))[0] == 404
        assert c.session is not None
        async with c.session.post(
            c.url + path,
            params={"fieldValidation": "Warn"},
            json=gizmo("w", {"size": 1, "bogus": 1}),
            headers={"Authorization": f"Bearer {c.token}"},
            ssl=c._ssl,
        ) as resp:
            assert resp.status == 201 and "spec.bogus" in resp.headers["Warning"]
            assert (await resp.json())["spec"] == {"size": 1, "mode": "fast"}


async def test_put_of_a_custom_object_needs_a_resource_version(kubesim: KubeSim) -> None:
    path = "/apis/example.com/v1/namespaces/default/gizmos"
    async with RawClient(kubesim) as c:
        await c.post(CRDS, crd())
        _, g = await c.post(path, gizmo("g", {"size": 1}))
        status, body = await c.put(f"{path}/g", gizmo("g", {"size": 2}))
        assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.resourceVersion"
        status, g2 = await c.put(f"{path}/g", dict(gizmo("g", {"size": 2}), metadata=g["metadata"]))
        assert status == 200 and g2["spec"]["size"] == 2


async def test_crd_scope_is_immutable_and_new_columns_apply_at_once(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        await c.post(CRDS, crd())
        status, body = await c.patch(f"{CRDS}/gizmos.example.com", {"spec": {"scope": "Cluster"}})
        assert status == 422 and body["details"]["causes"][0]["field"] == "spec.scope"
        _, current = await c.get(f"{CRDS}/gizmos.example.com")
        current["spec"]["versions"][0]["additionalPrinterColumns"].append(
            {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"}
        )
        status, _ = await c.put(f"{CRDS}/gizmos.example.com", current)
        assert status == 200
        path = "/apis/example.com/v1/namespaces/default/gizmos"
        await c.post(path, gizmo("g", {"size": 5}))
        _, table = await c.get(path, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
        assert [col["name"] for col in table["columnDefinitions"]] == ["Name", "Size", "Mode"]
        assert table["rows"][0]["cells"] == ["g", 5, "fast"]
