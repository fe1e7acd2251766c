"""kubectl delete against kubesim: `--wait` with finalizers, cascading policies, namespace deletion."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(
    check: Callable[[], Awaitable[bool]], within: float = 15.0, what: str = "condition"
) -> None:
    """Poll a client-visible condition (tests only: production code watches instead)."""
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} did not hold within {within}s")
        await asyncio.sleep(0.1)


async def get_json(kubectl: Any, *args: str) -> dict[str, Any] | None:
    result = await kubectl.run("get", *args, "-o", "json", check=False)
    if result.returncode != 0:
        assert "NotFound" in result.stderr or "not found" in result.stderr, result.stderr
        return None
    value: dict[str, Any] = result.json()
    return value


async def test_delete_waits_for_finalizers(kubectl: Any) -> None:
    await kubectl.make("Namespace", "fin")
    await kubectl.apply_text(
        textwrap.dedent(
            """\
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: held
              namespace: fin
              finalizers: [example.com/hold]
            data: {a: "1"}
            """
        )
    )
    deleter = await kubectl.spawn("delete", "configmap", "held", "-n", "fin", "--wait=true", "--timeout=60s")

    async def terminating() -> bool:
        obj = await get_json(kubectl, "configmap", "held", "-n", "fin")
        return obj is not None and "deletionTimestamp" in obj["metadata"]

    await eventually(terminating, what="deletionTimestamp set")
    obj = await get_json(kubectl, "configmap", "held", "-n", "fin")
    assert obj is not None and obj["metadata"]["finalizers"] == ["example.com/hold"]
    await asyncio.sleep(0.5)
    assert deleter.returncode is None, "delete --wait must block while a finalizer holds the object"

    # Ordinary writes other than finalizer removal are still accepted while terminating.
    await kubectl.run("annotate", "configmap", "held", "-n", "fin", "seen=yes")
    await kubectl.run(
        "patch",
        "configmap",
        "held",
        "-n",
        "fin",
        "--type=json",
        "-p",
        json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]),
    )
    out, err = await asyncio.wait_for(deleter.communicate(), 30)
    assert deleter.returncode == 0, err.decode()
    assert 'configmap "held" deleted' in out.decode()
    assert await get_json(kubectl, "configmap", "held", "-n", "fin") is None


async def test_delete_without_finalizers_is_immediate(kubectl: Any) -> None:
    await kubectl.make("ConfigMap", "gone", "default", data={"a": "1"})
    result = await kubectl.run("delete", "configmap", "gone", "--wait=true", "--timeout=30s")
    assert result.stdout.startswith('configmap "gone" deleted')  # 1.37 adds "from default namespace"
    assert await get_json(kubectl, "configmap", "gone") is None
    again = await kubectl.run("delete", "configmap", "gone", check=False)
    assert again.returncode != 0 and 'configmaps "gone" not found' in again.stderr


def owned_configmap(name: str, owner: dict[str, Any], namespace: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": owner["metadata"]["name"],
                        "uid": owner["metadata"]["uid"],
                    }
                ],
            },
        }
    )


async def test_delete_cascade_background_and_orphan(kubectl: Any) -> None:
    await kubectl.make("Namespace", "gc")
    for parent in ("p-bg", "p-orphan"):
        await kubectl.make("ConfigMap", parent, "gc")
        owner = await get_json(kubectl, "configmap", parent, "-n", "gc")
        assert owner is not None
        await kubectl.apply_text(owned_configmap(f"{parent}-child", owner, "gc"))

    await kubectl.run("delete", "configmap", "p-bg", "-n", "gc", "--cascade=background", "--wait=true")

    async def child_gone() -> bool:
        return await get_json(kubectl, "configmap", "p-bg-child", "-n", "gc") is None

    await eventually(child_gone, what="background GC of the dependent")

    await kubectl.run("delete", "configmap", "p-orphan", "-n", "gc", "--cascade=orphan", "--wait=true")
    orphan = await get_json(kubectl, "configmap", "p-orphan-child", "-n", "gc")
    assert orphan is not None, "--cascade=orphan must keep the dependent"
    assert not orphan["metadata"].get("ownerReferences"), "orphaning removes the owner reference"


async def test_delete_cascade_foreground_removes_dependents_first(kubectl: Any) -> None:
    await kubectl.make("Namespace", "fg")
    await kubectl.make("ConfigMap", "owner", "fg")
    owner = await get_json(kubectl, "configmap", "owner", "-n", "fg")
    assert owner is not None
    child = json.loads(owned_configmap("child", owner, "fg"))
    child["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = True
    child["metadata"]["finalizers"] = ["example.com/hold"]
    await kubectl.apply_text(json.dumps(child))

    deleter = await kubectl.spawn(
        "delete", "configmap", "owner", "-n", "fg", "--cascade=foreground", "--timeout=60s"
    )

    async def owner_in_foreground_deletion() -> bool:
        obj = await get_json(kubectl, "configmap", "owner", "-n", "fg")
        return obj is not None and "foregroundDeletion" in obj["metadata"].get("finalizers", [])

    await eventually(owner_in_foreground_deletion, what="owner carries the foregroundDeletion finalizer")

    async def child_terminating() -> bool:
        obj = await get_json(kubectl, "configmap", "child", "-n", "fg")
        return obj is not None and "deletionTimestamp" in obj["metadata"]

    await eventually(child_terminating, what="dependent marked for deletion")
    assert await get_json(kubectl, "configmap", "owner", "-n", "fg") is not None, (
        "a blocking dependent keeps the owner"
    )

    await kubectl.run(
        "patch", "configmap", "child", "-n", "fg", "--type=merge", "-p", '{"metadata": {"finalizers": null}}'
    )

    async def owner_gone() -> bool:
        return await get_json(kubectl, "configmap", "owner", "-n", "fg") is None

    await eventually(owner_gone, what="owner deleted once its dependent is gone")
    _, err = await asyncio.wait_for(deleter.communicate(), 30)
    assert deleter.returncode == 0, err.decode()


async def test_namespace_deletion_removes_contents_and_blocks_new_objects(kubectl: Any) -> None:
    await kubectl.make("Namespace", "doomed")
    await kubectl.make("ConfigMap", "plain", "doomed")
    await kubectl.make("Secret", "s", "doomed", stringData={"a": "b"})
    await kubectl.apply_text(
        textwrap.dedent(
            """\
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: held, namespace: doomed, finalizers: [example.com/hold]}
            """
        )
    )
    await kubectl.run("delete", "namespace", "doomed", "--wait=false")

    async def terminating() -> bool:
        ns = await get_json(kubectl, "namespace", "doomed")
        return ns is not None and ns.get("status", {}).get("phase") == "Terminating"

    await eventually(terminating, what="namespace phase Terminating")
    ns = await get_json(kubectl, "namespace", "doomed")
    assert ns is not None and "deletionTimestamp" in ns["metadata"]

    refused = await kubectl.make("ConfigMap", "late", "doomed", check=False)
    assert refused.returncode != 0
    assert "Forbidden" in refused.stderr and "being terminated" in refused.stderr, refused.stderr

    async def plain_gone() -> bool:
        return await get_json(kubectl, "configmap", "plain", "-n", "doomed") is None

    await eventually(plain_gone, what="namespace contents deleted")
    assert await get_json(kubectl, "secret", "s", "-n", "doomed") is None
    assert await get_json(kubectl, "namespace", "doomed") is not None, (
        "a finalizer inside keeps the namespace"
    )

    await kubectl.run(
        "patch",
        "configmap",
        "held",
        "-n",
        "doomed",
        "--type=merge",
        "-p",
        '{"metadata": {"finalizers": null}}',
    )

    async def namespace_gone() -> bool:
        return await get_json(kubectl, "namespace", "doomed") is None

    await eventually(namespace_gone, what="namespace removed after its contents")


async def test_delete_namespace_with_wait(kubectl: Any) -> None:
    await kubectl.make("Namespace", "quick")
    await kubectl.make("ConfigMap", "c", "quick")
    result = await kubectl.run("delete", "namespace", "quick", "--wait=true", "--timeout=60s")
    assert result.stdout.startswith('namespace "quick" deleted')
    assert await get_json(kubectl, "namespace", "quick") is None
    listed = (await kubectl.run("get", "configmaps", "-A", "-o", "json")).json()
    assert all(item["metadata"]["namespace"] != "quick" for item in listed["items"])


async def test_immortal_namespaces_cannot_be_deleted(kubectl: Any) -> None:
    for name in ("default", "kube-system", "kube-public"):
        refused = await kubectl.run("delete", "namespace", name, "--wait=false", check=False)
        assert refused.returncode != 0, f"namespace {name} must not be deletable"
        assert "Forbidden" in refused.stderr and "may not be deleted" in refused.stderr, refused.stderr
        ns = await get_json(kubectl, "namespace", name)
        assert ns is not None and "deletionTimestamp" not in ns["metadata"]
