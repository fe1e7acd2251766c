"""kubectl get against kubesim: JSON/YAML output, set-based label selectors, tables, and `get -w`."""

from __future__ import annotations

import asyncio
from typing import Any


async def make_namespace(kubectl: Any, name: str) -> None:
    await kubectl.make("Namespace", name)


async def names(kubectl: Any, *args: str) -> set[str]:
    listed = (await kubectl.run("get", *args, "-o", "json")).json()
    assert listed["kind"] == "List"
    return {item["metadata"]["name"] for item in listed["items"]}


async def test_get_output_json_and_yaml(kubectl: Any) -> None:
    await make_namespace(kubectl, "out")
    await kubectl.make("ConfigMap", "c1", "out", data={"k": "v"})

    single = (await kubectl.run("get", "configmap", "c1", "-n", "out", "-o", "yaml")).yaml()
    assert single["apiVersion"] == "v1"
    assert single["kind"] == "ConfigMap"
    assert single["data"] == {"k": "v"}
    assert single["metadata"]["namespace"] == "out"
    assert single["metadata"]["uid"]

    listed = (await kubectl.run("get", "configmaps", "-n", "out", "-o", "json")).json()
    assert listed["kind"] == "List"
    item = next(i for i in listed["items"] if i["metadata"]["name"] == "c1")
    assert item["kind"] == "ConfigMap" and item["apiVersion"] == "v1"

    missing = await kubectl.run("get", "configmap", "nope", "-n", "out", check=False)
    assert missing.returncode != 0
    assert 'configmaps "nope" not found' in missing.stderr


async def test_get_with_set_based_label_selectors(kubectl: Any) -> None:
    await make_namespace(kubectl, "sel")
    labels = {
        "prod": "env=prod,tier=web",
        "dev": "env=dev,tier=db",
        "staging": "env=staging",
        "plain": "",
    }
    for name, label in labels.items():
        await kubectl.make("ConfigMap", name, "sel")
        if label:
            await kubectl.run("label", "configmap", name, "-n", "sel", *label.split(","))

    async def select(selector: str) -> set[str]:
        return await names(kubectl, "configmaps", "-n", "sel", "-l", selector)

    # kube-root-ca.crt may or may not exist in kubesim; the selectors below never match it except `!env`
    # and `env notin`, so those results are compared without it.
    assert await select("env in (prod,dev)") == {"prod", "dev"}
    assert await select("env=prod") == {"prod"}
    assert await select("env==prod,tier=web") == {"prod"}
    assert await select("env,tier") == {"prod", "dev"}
    assert await select("env") == {"prod", "dev", "staging"}
    assert (await select("!env")) - {"kube-root-ca.crt"} == {"plain"}
    assert (await select("env notin (prod,staging)")) - {"kube-root-ca.crt"} == {"dev", "plain"}
    assert (await select("env!=dev")) - {"kube-root-ca.crt"} == {"prod", "staging", "plain"}
    assert await select("env in (prod,dev),tier notin (db)") == {"prod"}
    assert await select("env in (nothing)") == set()

    bad = await kubectl.run("get", "configmaps", "-n", "sel", "-l", "env in prod", check=False)
    assert bad.returncode != 0


async def test_get_field_selector_metadata_name(kubectl: Any) -> None:
    await make_namespace(kubectl, "fs")
    for name in ("a", "b"):
        await kubectl.make("ConfigMap", name, "fs")
    assert await names(kubectl, "configmaps", "-n", "fs", "--field-selector", "metadata.name=a") == {"a"}
    assert (await names(kubectl, "configmaps", "-n", "fs", "--field-selector", "metadata.name!=a")) - {
        "kube-root-ca.crt"
    } == {"b"}
    everywhere = (
        await kubectl.run(
            "get", "configmaps", "-A", "--field-selector", "metadata.namespace=fs", "-o", "json"
        )
    ).json()
    assert {i["metadata"]["namespace"] for i in everywhere["items"]} == {"fs"}


async def test_get_builtins_prints_a_table(kubectl: Any) -> None:
    """The server renders Tables with the kind's columns, as kubectl shows them on a real cluster."""
    await make_namespace(kubectl, "tbl")
    await kubectl.make("ConfigMap", "first", "tbl", data={"a": "1", "b": "2"})
    await kubectl.make("Secret", "s1", "tbl", stringData={"a": "1"})
    await kubectl.make("Service", "svc", "tbl", spec={"selector": {"app": "x"}, "ports": [{"port": 80}]})

    configmaps = (await kubectl.run("get", "configmaps", "-n", "tbl")).stdout
    assert configmaps.splitlines()[0].split() == ["NAME", "DATA", "AGE"], configmaps
    rows = {r["NAME"]: r for r in kubectl.table(configmaps)}
    assert rows["first"]["DATA"] == "2" and rows["first"]["AGE"]

    secrets = kubectl.table((await kubectl.run("get", "secrets", "-n", "tbl")).stdout)
    assert {(r["NAME"], r["TYPE"], r["DATA"]) for r in secrets} >= {("s1", "Opaque", "1")}

    services = (await kubectl.run("get", "services", "-n", "tbl")).stdout
    assert services.splitlines()[0].split() == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    [svc] = kubectl.table(services)
    assert (svc["TYPE"], svc["EXTERNAL-IP"], svc["PORT(S)"]) == ("ClusterIP", "<none>", "80/TCP")

    namespaces = {r["NAME"]: r for r in kubectl.table((await kubectl.run("get", "namespaces")).stdout)}
    assert namespaces["tbl"]["STATUS"] == "Active" and namespaces["default"]["STATUS"] == "Active"

    empty = await kubectl.run("get", "statefulsets", "-n", "tbl")
    assert "No resources found in tbl namespace." in empty.stderr


async def test_get_watch_prints_events_after_changes(kubectl: Any) -> None:
    await make_namespace(kubectl, "w")
    await kubectl.make("ConfigMap", "existing", "w", data={"a": "1"})

    watcher = await kubectl.spawn(
        "get", "configmaps", "-n", "w", "-l", "app=demo", "--watch", "--output-watch-events", "-o", "json"
    )
    await kubectl.run("label", "configmap", "existing", "-n", "w", "app=demo")
    # The label change brings `existing` into the selector. Whether kubectl's initial list or its watch sees it
    # first, it is ADDED: an object entering a watch's selector is an ADDED event on a real apiserver.
    first = (await kubectl.read_json(watcher.stdout, 1))[0]
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "existing")

    await kubectl.make("ConfigMap", "fresh", "w")
    await kubectl.run("label", "configmap", "fresh", "-n", "w", "app=demo")
    await kubectl.run("annotate", "configmap", "existing", "-n", "w", "note=changed")
    await kubectl.run("label", "configmap", "existing", "-n", "w", "app-")  # leaves the selector
    await kubectl.run("delete", "configmap", "fresh", "-n", "w")

    events = await kubectl.read_json(watcher.stdout, 4)
    seen = [(e["type"], e["object"]["metadata"]["name"]) for e in events]
    assert seen == [
        ("ADDED", "fresh"),
        ("MODIFIED", "existing"),
        ("DELETED", "existing"),
        ("DELETED", "fresh"),
    ]
    assert events[1]["object"]["metadata"]["annotations"]["note"] == "changed"
    assert watcher.returncode is None, "kubectl get -w must keep running"


async def test_get_watch_table_output_prints_new_rows(kubectl: Any) -> None:
    await make_namespace(kubectl, "wt")
    await kubectl.make("ConfigMap", "before", "wt")
    watcher = await kubectl.spawn("get", "configmaps", "-n", "wt", "-w")
    lines = await kubectl.read_until(watcher.stdout, lambda line: line.startswith("before"))
    assert lines[0].split()[0] == "NAME"

    await kubectl.make("ConfigMap", "after", "wt")
    await kubectl.read_until(watcher.stdout, lambda line: line.startswith("after "))
    await asyncio.sleep(0)
    assert watcher.returncode is None


async def test_get_watch_of_services_keeps_the_service_columns(kubectl: Any) -> None:
    await make_namespace(kubectl, "ws")
    port = {"ports": [{"port": 80}], "selector": {"app": "a"}}
    await kubectl.make("Service", "first", "ws", spec=port)
    watcher = await kubectl.spawn("get", "services", "-n", "ws", "-w")
    lines = await kubectl.read_until(watcher.stdout, lambda line: line.startswith("first"))
    assert lines[0].split()[:3] == ["NAME", "TYPE", "CLUSTER-IP"], lines

    await kubectl.make("Service", "second", "ws", spec=port)
    lines = await kubectl.read_until(watcher.stdout, lambda line: line.startswith("second"))
    assert lines[-1].split()[1] == "ClusterIP", f"watch rows are Table rows with the same columns: {lines}"


async def test_events_and_daemonsets_print_the_apiservers_columns(kubectl: Any) -> None:
    """``kubectl get events`` (also with a field selector) and ``get daemonsets`` print the real apiserver's
    columns, not just NAME and AGE."""
    await make_namespace(kubectl, "cols")
    await kubectl.apply_text("""
apiVersion: v1
kind: Event
metadata: {name: web.1, namespace: cols}
involvedObject: {kind: Pod, name: web, namespace: cols}
reason: Unhealthy
type: Warning
message: "Readiness probe failed: HTTP probe failed with statuscode: 503"
source: {component: kubelet, host: node-1}
count: 3
firstTimestamp: "2026-01-01T00:00:00Z"
lastTimestamp: "2026-01-01T00:00:00Z"
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: cols}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      nodeSelector: {kubernetes.io/os: linux}
      containers: [{name: agent, image: registry.k8s.io/pause:3.10}]
""")
    for args in (("get", "events", "-n", "cols"),
                 ("get", "events", "-n", "cols", "--field-selector", "involvedObject.name=web")):
        header, row = (await kubectl.run(*args)).stdout.splitlines()[:2]
        assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        assert row.split()[1:4] == ["Warning", "Unhealthy", "pod/web"]
        assert row.endswith("Readiness probe failed: HTTP probe failed with statuscode: 503")
    header = (await kubectl.run("get", "daemonsets", "-n", "cols")).stdout.splitlines()[0]
    assert header.split() == ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE", "SELECTOR",
                              "AGE"]
    row = (await kubectl.run("get", "daemonsets", "-n", "cols")).stdout.splitlines()[1]
    assert row.split()[0] == "agent" and "kubernetes.io/os=linux" in row
