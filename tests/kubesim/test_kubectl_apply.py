"""kubectl apply against kubesim: client-side three-way apply and server-side apply with field managers.

Every test runs once with the pinned kubectl 1.37.1 and once with the machine's preinstalled kubectl.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def configmap(name: str, data: dict[str, str], namespace: str = "default") -> str:
    body = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in data.items())
    return (
        textwrap.dedent(
            f"""\
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: {name}
          namespace: {namespace}
        data:
        """
        )
        + body
    )


def managers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["manager"]: entry for entry in obj["metadata"].get("managedFields", [])}


async def test_client_side_apply_creates_then_is_a_noop_then_configures(kubectl: Any) -> None:
    created = await kubectl.apply_text(configmap("cm1", {"a": "1", "b": "2"}))
    assert created.stdout.strip() == "configmap/cm1 created"

    first = (await kubectl.run("get", "configmap", "cm1", "-o", "json", "--show-managed-fields")).json()
    meta = first["metadata"]
    assert first["data"] == {"a": "1", "b": "2"}
    assert meta["uid"] and meta["creationTimestamp"] and meta["resourceVersion"]
    assert LAST_APPLIED in meta["annotations"]
    assert managers(first)["kubectl-client-side-apply"]["operation"] == "Update"

    unchanged = await kubectl.apply_text(configmap("cm1", {"a": "1", "b": "2"}))
    assert unchanged.stdout.strip() == "configmap/cm1 unchanged"
    again = (await kubectl.run("get", "configmap", "cm1", "-o", "json", "--show-managed-fields")).json()
    assert again["metadata"]["resourceVersion"] == meta["resourceVersion"], "a no-op apply must not write"

    # Dropping key b from the file removes it (three-way merge against last-applied), a changes.
    configured = await kubectl.apply_text(configmap("cm1", {"a": "3"}))
    assert configured.stdout.strip() == "configmap/cm1 configured"
    changed = (await kubectl.run("get", "configmap", "cm1", "-o", "json", "--show-managed-fields")).json()
    assert changed["data"] == {"a": "3"}
    assert int(changed["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert changed["metadata"]["uid"] == meta["uid"]


async def test_client_side_apply_keeps_fields_set_by_others(kubectl: Any) -> None:
    """A key added by someone else (not in last-applied) survives a re-apply: strategic merge, not replace."""
    await kubectl.apply_text(configmap("cm-shared", {"mine": "1"}))
    await kubectl.run("patch", "configmap", "cm-shared", "--type=merge", "-p", '{"data": {"theirs": "x"}}')
    await kubectl.apply_text(configmap("cm-shared", {"mine": "2"}))
    obj = (await kubectl.run("get", "configmap", "cm-shared", "-o", "json", "--show-managed-fields")).json()
    assert obj["data"] == {"mine": "2", "theirs": "x"}


async def test_client_side_apply_of_deployment_merges_containers_by_name(kubectl: Any) -> None:
    """Strategic merge on apply: an env var added out of band to one container survives a re-apply."""

    def deployment(image: str) -> str:
        return textwrap.dedent(
            f"""\
            apiVersion: apps/v1
            kind: Deployment
            metadata:
              name: web
              namespace: default
            spec:
              replicas: 1
              selector:
                matchLabels: {{app: web}}
              template:
                metadata:
                  labels: {{app: web}}
                spec:
                  containers:
                  - name: main
                    image: {image}
                  - name: sidecar
                    image: busybox
            """
        )

    await kubectl.apply_text(deployment("nginx:1"))
    first = (await kubectl.run("get", "deployment", "web", "-o", "json")).json()
    await kubectl.run(
        "patch",
        "deployment",
        "web",
        "--type=strategic",
        "-p",
        '{"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "env": [{"name": "X", "value": "1"}]}]}}}}',
    )
    result = await kubectl.apply_text(deployment("nginx:2"))
    assert result.stdout.strip() == "deployment.apps/web configured"
    obj = (await kubectl.run("get", "deployment", "web", "-o", "json")).json()
    containers = {c["name"]: c for c in obj["spec"]["template"]["spec"]["containers"]}
    assert [c["name"] for c in obj["spec"]["template"]["spec"]["containers"]] == ["main", "sidecar"]
    assert containers["main"]["image"] == "nginx:2"
    assert containers["sidecar"]["env"] == [{"name": "X", "value": "1"}]
    assert obj["metadata"]["generation"] == first["metadata"]["generation"] + 2


async def test_server_side_apply_creates_and_reports(kubectl: Any) -> None:
    result = await kubectl.apply_text(configmap("ssa1", {"k": "v"}), "--server-side", "--field-manager=alice")
    assert result.stdout.strip() == "configmap/ssa1 serverside-applied"
    obj = (await kubectl.run("get", "configmap", "ssa1", "-o", "json", "--show-managed-fields")).json()
    assert obj["data"] == {"k": "v"}
    entry = managers(obj)["alice"]
    assert entry["operation"] == "Apply"
    assert entry["fieldsType"] == "FieldsV1"
    assert "f:k" in entry["fieldsV1"]["f:data"]
    assert LAST_APPLIED not in obj["metadata"].get("annotations", {})


async def test_server_side_apply_conflict_between_managers_and_force(kubectl: Any) -> None:
    await kubectl.apply_text(
        configmap("ssa2", {"k": "alice", "a": "1"}), "--server-side", "--field-manager=alice"
    )

    conflict = await kubectl.apply_text(
        configmap("ssa2", {"k": "bob"}), "--server-side", "--field-manager=bob", check=False
    )
    assert conflict.returncode != 0
    assert "conflict" in conflict.stderr.lower()
    assert '"alice"' in conflict.stderr and ".data.k" in conflict.stderr, conflict.stderr
    unchanged = (await kubectl.run("get", "configmap", "ssa2", "-o", "json", "--show-managed-fields")).json()
    assert unchanged["data"] == {"k": "alice", "a": "1"}

    await kubectl.apply_text(
        configmap("ssa2", {"k": "bob"}), "--server-side", "--field-manager=bob", "--force-conflicts"
    )
    forced = (await kubectl.run("get", "configmap", "ssa2", "-o", "json", "--show-managed-fields")).json()
    assert forced["data"] == {"k": "bob", "a": "1"}
    owners = managers(forced)
    assert "f:k" in owners["bob"]["fieldsV1"]["f:data"]
    assert "f:k" not in owners["alice"]["fieldsV1"]["f:data"], "a forced apply takes ownership away"
    assert "f:a" in owners["alice"]["fieldsV1"]["f:data"]

    # alice stops applying k: bob still owns it, so it stays. alice stops applying a: nobody owns it, it goes.
    await kubectl.apply_text(configmap("ssa2", {"z": "1"}), "--server-side", "--field-manager=alice")
    final = (await kubectl.run("get", "configmap", "ssa2", "-o", "json", "--show-managed-fields")).json()
    assert final["data"] == {"k": "bob", "z": "1"}


async def test_server_side_apply_same_value_from_two_managers_is_shared_not_a_conflict(kubectl: Any) -> None:
    await kubectl.apply_text(configmap("ssa3", {"k": "same"}), "--server-side", "--field-manager=alice")
    await kubectl.apply_text(configmap("ssa3", {"k": "same"}), "--server-side", "--field-manager=bob")
    obj = (await kubectl.run("get", "configmap", "ssa3", "-o", "json", "--show-managed-fields")).json()
    owners = managers(obj)
    assert "f:k" in owners["alice"]["fieldsV1"]["f:data"]
    assert "f:k" in owners["bob"]["fieldsV1"]["f:data"]
    # Either manager dropping the field leaves it in place because the other still owns it.
    await kubectl.apply_text(configmap("ssa3", {"other": "1"}), "--server-side", "--field-manager=alice")
    after = (await kubectl.run("get", "configmap", "ssa3", "-o", "json", "--show-managed-fields")).json()
    assert after["data"] == {"k": "same", "other": "1"}


async def test_server_side_apply_after_client_side_apply(kubectl: Any) -> None:
    """Migrating an object from client-side to server-side apply keeps it and its data."""
    await kubectl.apply_text(configmap("mig", {"a": "1"}))
    result = await kubectl.apply_text(configmap("mig", {"a": "2"}), "--server-side")
    assert result.stdout.strip() == "configmap/mig serverside-applied"
    obj = (await kubectl.run("get", "configmap", "mig", "-o", "json", "--show-managed-fields")).json()
    assert obj["data"] == {"a": "2"}
    assert "kubectl" in managers(obj)


async def test_apply_into_missing_namespace_is_not_found(kubectl: Any) -> None:
    result = await kubectl.apply_text(configmap("x", {"a": "1"}, namespace="does-not-exist"), check=False)
    assert result.returncode != 0
    assert 'namespaces "does-not-exist" not found' in result.stderr


async def test_apply_with_invalid_name_is_rejected(kubectl: Any) -> None:
    result = await kubectl.apply_text(configmap("Not_Valid", {"a": "1"}), check=False)
    assert result.returncode != 0
    assert "is invalid" in result.stderr and "metadata.name" in result.stderr, result.stderr
