"""Discovery, version, health and auth as kubectl and lightkube need them."""

from __future__ import annotations

from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient


async def test_core_discovery_has_v1_group_version_and_builtin_kinds(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, api = await c.get("/api")
        assert status == 200 and api["kind"] == "APIVersions" and api["versions"] == ["v1"]
        status, v1 = await c.get("/api/v1/")
        assert status == 200
        assert v1["kind"] == "APIResourceList" and v1["groupVersion"] == "v1"
        names = {r["name"]: r for r in v1["resources"]}
        for plural in (
            "namespaces",
            "nodes",
            "pods",
            "services",
            "endpoints",
            "configmaps",
            "secrets",
            "serviceaccounts",
            "events",
            "persistentvolumes",
            "persistentvolumeclaims",
        ):
            assert plural in names, plural
        assert names["pods"]["namespaced"] is True and names["pods"]["kind"] == "Pod"
        assert names["nodes"]["namespaced"] is False
        assert "watch" in names["pods"]["verbs"]
        assert "pods/status" in names


async def test_group_discovery_lists_builtin_groups(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, apis = await c.get("/apis/")
        assert status == 200 and apis["kind"] == "APIGroupList"
        groups = {g["name"]: g for g in apis["groups"]}
        for g in (
            "apps",
            "storage.k8s.io",
            "discovery.k8s.io",
            "events.k8s.io",
            "coordination.k8s.io",
            "rbac.authorization.k8s.io",
            "apiextensions.k8s.io",
        ):
            assert groups[g]["preferredVersion"]["groupVersion"] == f"{g}/v1"
        status, apps = await c.get("/apis/apps/v1")
        assert status == 200 and apps["groupVersion"] == "apps/v1"
        assert {r["name"] for r in apps["resources"]} >= {
            "statefulsets",
            "deployments",
            "daemonsets",
            "deployments/scale",
        }
        status, storage = await c.get("/apis/storage.k8s.io/v1/")
        assert {r["name"] for r in storage["resources"]} >= {"storageclasses", "csidrivers", "csinodes"}
        status, body = await c.get("/apis/nope.example.com/v1")
        assert status == 404 and body["kind"] == "Status" and body["reason"] == "NotFound"


async def test_version_and_health_need_no_token(kubesim: KubeSim) -> None:
    async with RawClient(kubesim, token="") as c:
        status, version = await c.get("/version/")
        assert status == 200 and version["major"] == "1"
        for path in ("/healthz", "/readyz", "/livez"):
            status, body = await c.get(path)
            assert status == 200 and body == "ok"


async def test_missing_or_wrong_token_is_401_status(kubesim: KubeSim) -> None:
    for token in ("", "wrong"):
        async with RawClient(kubesim, token=token) as c:
            status, body = await c.get("/api/v1/namespaces")
            assert status == 401
            assert body["kind"] == "Status" and body["reason"] == "Unauthorized" and body["code"] == 401


async def test_openapi_v3_root_points_at_group_version_documents(kubesim: KubeSim) -> None:
    async with RawClient(kubesim) as c:
        status, root = await c.get("/openapi/v3")
        assert status == 200
        url = root["paths"]["api/v1"]["serverRelativeURL"]
        status, doc = await c.get(url.split("?")[0])
        assert status == 200
        patch = doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]
        assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
        assert any(p["name"] == "fieldValidation" for p in patch["parameters"])
        assert "apis/apps/v1" in root["paths"]


async def test_authorizer_hook_denies_with_403(kubesim: KubeSim) -> None:
    from kubesim.auth.authn import RequestAttributes

    class NoSecrets:
        def authorize(self, attrs: RequestAttributes) -> str | None:
            return "secrets are off limits" if attrs.resource == "secrets" else None

    kubesim.server.authorizer = NoSecrets()
    async with RawClient(kubesim) as c:
        status, body = await c.get("/api/v1/namespaces/default/secrets")
        assert status == 403 and body["reason"] == "Forbidden" and "secrets are off limits" in body["message"]
        assert (await c.get("/api/v1/namespaces/default/configmaps"))[0] == 200


async def test_cluster_role_authorizer_enforces_rules(kubesim: KubeSim) -> None:
    from kubesim.auth.rbac import ClusterRoleAuthorizer

    rules = [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["open"]},
    ]
    authorizer = ClusterRoleAuthorizer(rules, kubesim.store)
    kubesim.server.authorizer = authorizer
    cfg = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}}
    async with RawClient(kubesim) as c:
        assert (await c.get("/api/v1/namespaces/default/configmaps"))[0] == 200
        status, body = await c.patch(
            "/api/v1/namespaces/default/configmaps/new",
            cfg,
            "application/apply-patch+yaml",
            params={"fieldManager": "m"},
        )
        assert status == 403 and "create" in body["message"], "an apply that creates needs create too"
        assert (await c.get("/api/v1/namespaces/default/secrets/open"))[0] == 404
        assert (await c.get("/api/v1/namespaces/default/secrets/closed"))[0] == 403
    assert ("create", "", "configmaps", "new") in authorizer.denied
    assert ("list", "", "configmaps") in authorizer.used


async def test_self_subject_access_review_asks_the_authorizer(kubesim: KubeSim) -> None:
    from kubesim.auth.rbac import ClusterRoleAuthorizer

    kubesim.server.authorizer = ClusterRoleAuthorizer(
        [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    )
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

    def review(verb: str, resource: str) -> dict[str, object]:
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": "default"}},
        }

    async with RawClient(kubesim) as c:
        status, yes = await c.post(path, review("list", "pods"))
        assert status == 201 and yes["status"]["allowed"] is True
        _, no = await c.post(path, review("delete", "pods"))
        assert no["status"]["allowed"] is False and "delete" in no["status"]["reason"]
        assert (await c.get(path))[0] == 405
