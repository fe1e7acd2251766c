"""ServiceAccount tokens and RBAC: kubesim authenticates the tokens it issues as the ServiceAccount and allows
exactly what the stored Roles, ClusterRoles and bindings grant it (the admin token stays unrestricted); Pods get the
token volume the ServiceAccount admission plugin adds."""

from __future__ import annotations

from typing import Any

from kubesim.auth.rbac import RbacAuthorizer
from kubesim.auth.serviceaccounts import TOKEN_MOUNT_PATH
from kubesim.sim import KubeSim
from kubesim.testing.rawhttp import RawClient

RBAC = "rbac.authorization.k8s.io"


def obj(kind: str, name: str, namespace: str | None = None, api_version: str = "v1", **fields: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **fields}


async def grant(kubesim: KubeSim) -> None:
    """ServiceAccount ops/robot: may read ConfigMaps in ops (Role) and get Nodes everywhere (ClusterRole);
    the group of every ServiceAccount of ops may list Secrets in ops."""
    api = kubesim.api
    await api.create("namespaces", obj("Namespace", "ops"))
    await api.create("serviceaccounts", obj("ServiceAccount", "robot", "ops"), "ops")
    await api.create(f"roles.{RBAC}", obj("Role", "read-config", "ops", f"{RBAC}/v1", rules=[
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]), "ops")
    await api.create(f"rolebindings.{RBAC}", obj("RoleBinding", "robot-config", "ops", f"{RBAC}/v1",
                     roleRef={"apiGroup": RBAC, "kind": "Role", "name": "read-config"},
                     subjects=[{"kind": "ServiceAccount", "name": "robot", "namespace": "ops"}]), "ops")
    await api.create(f"clusterroles.{RBAC}", obj("ClusterRole", "node-reader", api_version=f"{RBAC}/v1", rules=[
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"], "resourceNames": ["n1"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]))
    await api.create(f"clusterrolebindings.{RBAC}", obj("ClusterRoleBinding", "robot-nodes",
                     api_version=f"{RBAC}/v1", roleRef={"apiGroup": RBAC, "kind": "ClusterRole", "name": "node-reader"},
                     subjects=[{"kind": "ServiceAccount", "name": "robot", "namespace": "ops"}]))
    # a ClusterRole granted in one namespace only, to a group
    await api.create(f"rolebindings.{RBAC}", obj("RoleBinding", "ops-accounts-secrets", "ops", f"{RBAC}/v1",
                     roleRef={"apiGroup": RBAC, "kind": "ClusterRole", "name": "node-reader"},
                     subjects=[{"kind": "Group", "name": "system:serviceaccounts:ops"}]), "ops")
    for name in ("n1", "n2"):
        await api.create("nodes", obj("Node", name))


async def test_a_service_account_token_is_allowed_exactly_what_its_bindings_grant(kubesim: KubeSim) -> None:
    await grant(kubesim)
    token = kubesim.server.service_accounts.issue("ops", "robot")
    async with RawClient(kubesim, token=token) as robot:
        assert (await robot.get("/api/v1/namespaces/ops/configmaps"))[0] == 200
        status, body = await robot.get("/api/v1/namespaces/default/configmaps")
        assert status == 403
        assert body["message"] == ('configmaps is forbidden: User "system:serviceaccount:ops:robot" cannot list '
                                   'resource "configmaps" in API group "" in the namespace "default": '
                                   "no RBAC policy matched")
        assert (await robot.get("/api/v1/nodes/n1"))[0] == 200
        assert (await robot.get("/api/v1/nodes/n2"))[0] == 403  # resourceNames
        assert (await robot.get("/api/v1/nodes"))[0] == 403  # list is not granted
        assert (await robot.delete("/api/v1/nodes/n1"))[0] == 403
        assert (await robot.get("/api/v1/secrets"))[0] == 200  # ClusterRoleBinding: everywhere
        status, _ = await robot.post("/api/v1/namespaces/ops/configmaps", obj("ConfigMap", "x", "ops"))
        assert status == 403
    authorizer = kubesim.server.authorizer
    assert isinstance(authorizer, RbacAuthorizer)
    user = "system:serviceaccount:ops:robot"
    assert authorizer.used[user] == {("list", "", "configmaps"), ("get", "", "nodes"), ("list", "", "secrets")}
    assert authorizer.denied_for(user) == [
        ("list", "", "configmaps", "default", None), ("get", "", "nodes", None, "n2"), ("list", "", "nodes", None, None),
        ("delete", "", "nodes", None, "n1"), ("create", "", "configmaps", "ops", None)]
    # The admin token is not restricted and not recorded.
    async with RawClient(kubesim) as admin:
        assert (await admin.delete("/api/v1/nodes/n2"))[0] == 200
    assert "kubesim-admin" not in authorizer.used


async def test_group_subjects_and_a_service_account_without_bindings(kubesim: KubeSim) -> None:
    await grant(kubesim)
    await kubesim.api.create("serviceaccounts", obj("ServiceAccount", "other", "ops"), "ops")
    token = kubesim.server.service_accounts.issue("ops", "other")
    async with RawClient(kubesim, token=token) as other:
        # only the group binding in ops applies: secrets in ops, nothing else
        assert (await other.get("/api/v1/namespaces/ops/secrets"))[0] == 200
        assert (await other.get("/api/v1/namespaces/default/secrets"))[0] == 403
        assert (await other.get("/api/v1/namespaces/ops/configmaps"))[0] == 403


async def test_tokens_end_with_their_service_account_and_their_pod(kubesim: KubeSim) -> None:
    await grant(kubesim)
    api = kubesim.api
    pod = await api.create("pods", obj("Pod", "p", "ops", spec={"serviceAccountName": "robot",
                                                                "containers": [{"name": "c", "image": "pause"}]}), "ops")
    bound = kubesim.server.service_accounts.issue("ops", "robot", pod_name="p", pod_uid=pod["metadata"]["uid"])
    unbound = kubesim.server.service_accounts.issue("ops", "robot")
    async with RawClient(kubesim, token=bound) as client:
        assert (await client.get("/api/v1/nodes/n1"))[0] == 200
    await api.delete("pods", "p", "ops")
    async with RawClient(kubesim, token=bound) as client:
        assert (await client.get("/api/v1/nodes/n1"))[0] == 401
    async with RawClient(kubesim, token=unbound) as client:
        assert (await client.get("/api/v1/nodes/n1"))[0] == 200
    await api.delete("serviceaccounts", "robot", "ops")
    async with RawClient(kubesim, token=unbound) as client:
        assert (await client.get("/api/v1/nodes/n1"))[0] == 401
    # A recreated ServiceAccount of the same name is another identity: old tokens stay invalid.
    await api.create("serviceaccounts", obj("ServiceAccount", "robot", "ops"), "ops")
    async with RawClient(kubesim, token=unbound) as client:
        assert (await client.get("/api/v1/nodes/n1"))[0] == 401


async def test_kubectl_create_token_and_auth_can_i_as_the_service_account(kubesim: KubeSim, kubectl: Any) -> None:
    await grant(kubesim)
    created = await kubectl.run("create", "token", "robot", "-n", "ops", "--duration", "20m")
    token = created.stdout.strip()
    assert token
    allowed = await kubectl.run("--token", token, "auth", "can-i", "get", "configmaps", "-n", "ops", check=False)
    assert allowed.stdout.strip() == "yes"
    refused = await kubectl.run("--token", token, "get", "configmaps", "-n", "default", check=False)
    assert refused.returncode != 0
    assert 'User "system:serviceaccount:ops:robot" cannot list resource "configmaps"' in refused.stderr
    missing = await kubectl.run("create", "token", "nobody", "-n", "ops", check=False)
    assert missing.returncode != 0 and 'serviceaccounts "nobody" not found' in missing.stderr
    short = await kubectl.run("create", "token", "robot", "-n", "ops", "--duration", "1m", check=False)
    assert short.returncode != 0 and "expirationSeconds" in short.stderr


async def test_pods_get_the_token_volume_unless_automount_is_off(kubesim: KubeSim) -> None:
    api = kubesim.api
    await api.create("serviceaccounts", obj("ServiceAccount", "quiet", "default",
                                            automountServiceAccountToken=False), "default")
    containers = [{"name": "a", "image": "pause"}, {"name": "b", "image": "pause", "volumeMounts": [
        {"name": "own", "mountPath": TOKEN_MOUNT_PATH}]}]
    pod = await api.create("pods", obj("Pod", "p", "default", spec={
        "containers": containers, "volumes": [{"name": "own", "emptyDir": {}}]}), "default")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    (token_volume,) = [name for name in volumes if name.startswith("kube-api-access-")]
    sources = volumes[token_volume]["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    assert sources[2]["downwardAPI"]["items"][0]["path"] == "namespace"
    mounts = {c["name"]: c.get("volumeMounts") for c in pod["spec"]["containers"]}
    assert mounts["a"] == [{"name": token_volume, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH}]
    assert mounts["b"] == [{"name": "own", "mountPath": TOKEN_MOUNT_PATH}]  # its own mount there wins
    for spec in ({"serviceAccountName": "quiet"}, {"automountServiceAccountToken": False}):
        name = f"p{len(spec)}-{next(iter(spec)).lower()}"
        quiet = await api.create("pods", obj("Pod", name, "default", spec={
            **spec, "containers": [{"name": "a", "image": "pause"}]}), "default")
        assert "volumes" not in quiet["spec"] and "volumeMounts" not in quiet["spec"]["containers"][0]


async def test_resource_names_allow_a_list_or_watch_of_that_one_object(kubesim: KubeSim) -> None:
    """As the apiserver's RequestInfo: a list or watch with ``fieldSelector=metadata.name=<name>`` is authorized as
    a request for that name, so a Role by ``resourceNames`` can let a component watch exactly its objects."""
    api = kubesim.api
    await api.create("namespaces", obj("Namespace", "apps"))
    await api.create("serviceaccounts", obj("ServiceAccount", "watcher", "apps"), "apps")
    await api.create(f"roles.{RBAC}", obj("Role", "one-secret", "apps", f"{RBAC}/v1", rules=[
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"], "resourceNames": ["mine"]}]),
        "apps")
    await api.create(f"rolebindings.{RBAC}", obj("RoleBinding", "one-secret", "apps", f"{RBAC}/v1",
                     roleRef={"apiGroup": RBAC, "kind": "Role", "name": "one-secret"},
                     subjects=[{"kind": "ServiceAccount", "name": "watcher", "namespace": "apps"}]), "apps")
    for name in ("mine", "theirs"):
        await api.create("secrets", obj("Secret", name, "apps"), "apps")
    token = kubesim.server.service_accounts.issue("apps", "watcher")
    base = "/api/v1/namespaces/apps/secrets"
    async with RawClient(kubesim, token=token) as watcher:
        status, body = await watcher.get(f"{base}?fieldSelector=metadata.name%3Dmine")
        assert status == 200 and [i["metadata"]["name"] for i in body["items"]] == ["mine"]
        assert (await watcher.get(f"{base}/mine"))[0] == 200
        assert (await watcher.get(f"{base}?fieldSelector=metadata.name%3Dtheirs"))[0] == 403
        assert (await watcher.get(f"{base}/theirs"))[0] == 403
        assert (await watcher.get(base))[0] == 403                                  # the whole collection
        assert (await watcher.get(f"{base}?fieldSelector=metadata.name!%3Dtheirs"))[0] == 403
