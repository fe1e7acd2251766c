"""Table rendering and OpenAPI documents: what ``kubectl get`` and kubectl's validation discovery would receive."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kubesim.registry.openapi import ResourceInfo, openapi_v3_group_version, openapi_v3_hash, openapi_v3_root
from kubesim.table.cells import human_duration
from kubesim.table.jsonpath import JSONPathError, evaluate_json_path, parse_json_path
from kubesim.table.printers import builtin_columns
from kubesim.table.render import render_table, table_version

NOW = datetime(2026, 1, 10, 12, 0, 0, tzinfo=UTC)


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cells(table: dict[str, Any]) -> list[list[Any]]:
    return [row["cells"] for row in table["rows"]]


def headers(table: dict[str, Any]) -> list[str]:
    return [c["name"] for c in table["columnDefinitions"]]


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (182, "3m2s"),
        (599, "9m59s"),
        (600, "10m"),
        (179 * 60 + 59, "179m"),
        (3 * 3600, "3h"),
        (4 * 3600 + 10 * 60, "4h10m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (2 * 86400, "2d"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (8 * 86400, "8d"),
        (400 * 86400, "400d"),
        (2 * 365 * 86400, "2y"),
        (2 * 365 * 86400 + 10 * 86400, "2y10d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: float, expected: str) -> None:
    assert human_duration(seconds) == expected


@pytest.mark.parametrize(
    ("accept", "version"),
    [
        ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", "v1"),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json", "v1beta1"),
        ("application/json; as=Table; g=meta.k8s.io; v=v1", "v1"),
        ("application/json", None),
        ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io", None),
        ("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io", None),
        ("application/json;as=Table;v=v2;g=meta.k8s.io", None),
        ("", None),
        (None, None),
    ],
)
def test_accept_header(accept: str | None, version: str | None) -> None:
    assert table_version(accept) == version


OBJ = {
    "metadata": {"name": "x", "labels": {"app.kubernetes.io/name": "web", "plain": "p"}},
    "spec": {"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}], "replicas": 3},
    "status": {
        "conditions": [{"type": "Available", "status": "False"}, {"type": "Ready", "status": "True", "count": 2}],
        "ingress": [{"ip": "10.0.0.1"}],
    },
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".spec.replicas", [3]),
        ("{.spec.replicas}", [3]),
        ("$.spec.replicas", [3]),
        (".spec.ports[0].port", [80]),
        (".spec.ports[-1].name", ["https"]),
        (".spec.ports[*].port", [80, 443]),
        (".spec.ports[5].port", []),
        (".spec.missing.deeper", []),
        (".metadata.labels.app\\.kubernetes\\.io/name", ["web"]),
        (".metadata.labels['app.kubernetes.io/name']", ["web"]),
        ('.status.conditions[?(@.type=="Ready")].status', ["True"]),
        (".status.conditions[?(@.type!='Ready')].type", ["Available"]),
        (".status.conditions[?(@.count==2)].type", ["Ready"]),
        (".status.conditions[?(@.count)].type", ["Ready"]),
        (".status.ingress[0].ip", ["10.0.0.1"]),
    ],
)
def test_json_path(path: str, expected: list[Any]) -> None:
    assert evaluate_json_path(parse_json_path(path), OBJ) == expected


@pytest.mark.parametrize("path", ["..spec", "spec.x", ".a[0:2]", ".a[0,1]", ".a[", ".a[?(@.x > 1)]"])
def test_json_path_unsupported(path: str) -> None:
    with pytest.raises(JSONPathError):
        parse_json_path(path)


def item(name: str, age_seconds: float, **extra: Any) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "default", "creationTimestamp": ts(age_seconds), "uid": f"uid-{name}"}
    return {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": metadata, **extra}


def test_default_columns_are_name_and_age() -> None:
    table = render_table(
        [item("a", 5), item("b", 3 * 60 + 2)], columns=None, now=NOW, list_meta={"resourceVersion": "42"}
    )
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "42"}
    assert headers(table) == ["Name", "Age"]
    assert table["columnDefinitions"][0]["format"] == "name"
    assert table["columnDefinitions"][1]["type"] == "date"
    assert cells(table) == [["a", "5s"], ["b", "3m2s"]]


def test_empty_printer_columns_mean_default_columns() -> None:
    table = render_table([item("a", 4 * 3600)], columns=[], now=NOW, list_meta={})
    assert headers(table) == ["Name", "Age"]
    assert cells(table) == [["a", "4h"]]


def test_naive_now_is_taken_as_utc() -> None:
    table = render_table([item("a", 30)], columns=None, now=NOW.replace(tzinfo=None), list_meta={})
    assert cells(table) == [["a", "30s"]]


CRD_COLUMNS: list[dict[str, Any]] = [
    {"name": "Class", "type": "string", "jsonPath": ".spec.className"},
    {"name": "Ports", "type": "string", "jsonPath": ".spec.ports[*].port", "priority": 1},
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
    {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"},
    {"name": "Enabled", "type": "boolean", "jsonPath": ".spec.enabled"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Since", "type": "date", "jsonPath": ".status.since", "description": "when"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def test_crd_printer_columns() -> None:
    full = item(
        "l1",
        90,
        spec={"className": "external", "ports": [{"port": 80}, {"port": 443}], "replicas": 2.0, "ratio": 1, "enabled": False},
        status={"conditions": [{"type": "Ready", "status": "True"}], "since": ts(3 * 86400)},
    )
    empty = item("l2", 10, spec={"replicas": "not-a-number", "enabled": "yes"}, status={"since": "garbage"})
    table = render_table([full, empty], columns=CRD_COLUMNS, now=NOW, list_meta={})
    assert headers(table) == ["Name", "Class", "Ports", "Replicas", "Ratio", "Enabled", "Ready", "Since", "Age"]
    ports_def = table["columnDefinitions"][2]
    assert ports_def == {"name": "Ports", "type": "string", "format": "", "description": "", "priority": 1}
    assert table["columnDefinitions"][7]["description"] == "when"
    assert "jsonPath" not in table["columnDefinitions"][1]
    assert cells(table) == [
        ["l1", "external", "80", 2, 1.0, False, "True", "3d", "90s"],
        ["l2", None, None, None, None, None, None, "<invalid>", "10s"],
    ]


def test_unsupported_json_path_gives_empty_cells() -> None:
    table = render_table([item("a", 1)], columns=[{"name": "X", "type": "string", "jsonPath": "..x"}], now=NOW, list_meta={})
    assert cells(table) == [["a", None]]


def test_string_column_prints_non_strings_like_go() -> None:
    columns = [
        {"name": "N", "type": "string", "jsonPath": ".spec.n"},
        {"name": "M", "type": "string", "jsonPath": ".spec.m"},
        {"name": "L", "type": "string", "jsonPath": ".spec.l"},
        {"name": "B", "type": "string", "jsonPath": ".spec.b"},
    ]
    o = item("a", 1, spec={"n": 1e6, "m": {"b": 1.5, "a": "x"}, "l": ["p", 2], "b": True})
    assert cells(render_table([o], columns=columns, now=NOW, list_meta={})) == [["a", "1e+06", "map[a:x b:1.5]", "[p 2]", "true"]]


@pytest.mark.parametrize(
    ("include", "expected"),
    [
        ("None", None),
        (
            "Metadata",
            {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "a", "namespace": "default", "creationTimestamp": ts(1), "uid": "uid-a"},
            },
        ),
        ("", "metadata"),
    ],
)
def test_include_object(include: str, expected: Any) -> None:
    table = render_table([item("a", 1)], columns=None, include_object=include, now=NOW, list_meta={})
    got = table["rows"][0]["object"]
    if expected == "metadata":
        assert got["kind"] == "PartialObjectMetadata"
    else:
        assert got == expected


def test_include_object_full_and_v1beta1() -> None:
    o = item("a", 1, spec={"x": 1})
    table = render_table([o], columns=None, include_object="Object", now=NOW, list_meta={}, api_version="meta.k8s.io/v1beta1")
    assert table["apiVersion"] == "meta.k8s.io/v1beta1"
    assert table["rows"][0]["object"] == o
    meta_table = render_table([o], columns=None, now=NOW, list_meta={}, api_version="meta.k8s.io/v1beta1")
    assert meta_table["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"


def test_bad_include_object_rejected() -> None:
    with pytest.raises(ValueError, match="includeObject"):
        render_table([], columns=None, include_object="Everything", now=NOW, list_meta={})


# --------------------------------------------------------------------------------------------------------------
# built-in printers


def builtin_table(group: str, kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return render_table(items, columns=builtin_columns(group, kind), now=NOW, list_meta={})


def pod(name: str, **parts: Any) -> dict[str, Any]:
    spec = parts.pop("spec", {"containers": [{"name": "app"}, {"name": "side"}]})
    return {"kind": "Pod", "metadata": {"name": name, "creationTimestamp": ts(60), **parts.pop("metadata", {})}, "spec": spec, **parts}


RUNNING = {"running": {"startedAt": ts(50)}}

POD_CASES: list[tuple[str, dict[str, Any], list[Any]]] = [
    ("pending unscheduled", pod("p", status={"phase": "Pending"}), ["p", "0/2", "Pending", "0", "60s", "<none>", "<none>", "<none>", "<none>"]),
    (
        "running and ready with a restart",
        pod(
            "p",
            spec={"containers": [{"name": "app"}, {"name": "side"}], "nodeName": "n1"},
            status={
                "phase": "Running",
                "podIP": "10.1.0.5",
                "containerStatuses": [
                    {"name": "app", "ready": True, "state": RUNNING, "restartCount": 1, "lastState": {"terminated": {"finishedAt": ts(300)}}},
                    {"name": "side", "ready": False, "state": RUNNING, "restartCount": 0},
                ],
            },
        ),
        ["p", "1/2", "Running", "1 (5m ago)", "60s", "10.1.0.5", "n1", "<none>", "<none>"],
    ),
    (
        "waiting reason wins",
        pod("p", status={"phase": "Pending", "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}),
        ["p", "0/2", "ImagePullBackOff", "0", "60s", "<none>", "<none>", "<none>", "<none>"],
    ),
    (
        "terminated with exit code",
        pod("p", status={"phase": "Failed", "containerStatuses": [{"name": "app", "state": {"terminated": {"exitCode": 2}}}]}),
        ["p", "0/2", "ExitCode:2", "0", "60s", "<none>", "<none>", "<none>", "<none>"],
    ),
    (
        "init container running",
        pod(
            "p",
            spec={"initContainers": [{"name": "i1"}, {"name": "i2"}], "containers": [{"name": "app"}]},
            status={"phase": "Pending", "initContainerStatuses": [{"name": "i1", "state": {"terminated": {"exitCode": 0}}}, {"name": "i2", "state": RUNNING}]},
        ),
        ["p", "0/1", "Init:1/2", "0", "60s", "<none>", "<none>", "<none>", "<none>"],
    ),
    (
        "init container crashing",
        pod(
            "p",
            spec={"initContainers": [{"name": "i1"}], "containers": [{"name": "app"}]},
            status={"phase": "Pending", "initContainerStatuses": [{"name": "i1", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
        ),
        ["p", "0/1", "Init:CrashLoopBackOff", "3", "60s", "<none>", "<none>", "<none>", "<none>"],
    ),
    (
        "terminating",
        pod("p", metadata={"deletionTimestamp": ts(1)}, status={"phase": "Running"}),
        ["p", "0/2", "Terminating", "0", "60s", "<none>", "<none>", "<none>", "<none>"],
    ),
    (
        "readiness gates",
        pod(
            "p",
            spec={"containers": [{"name": "app"}], "readinessGates": [{"conditionType": "a"}, {"conditionType": "b"}]},
            status={"phase": "Running", "conditions": [{"type": "a", "status": "True"}, {"type": "b", "status": "False"}]},
        ),
        ["p", "0/1", "Running", "0", "60s", "<none>", "<none>", "<none>", "1/2"],
    ),
]


@pytest.mark.parametrize(("p", "expected"), [c[1:] for c in POD_CASES], ids=[c[0] for c in POD_CASES])
def test_pod_table(p: dict[str, Any], expected: list[Any]) -> None:
    table = builtin_table("", "Pod", [p])
    assert headers(table) == ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
    assert [c["priority"] for c in table["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert cells(table) == [expected]


def svc(name: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kind": "Service", "metadata": {"name": name, "creationTimestamp": ts(7200)}, "spec": spec, "status": status or {}}


SERVICE_CASES: list[tuple[str, dict[str, Any], list[Any]]] = [
    (
        "cluster ip",
        svc("s", {"type": "ClusterIP", "clusterIP": "10.96.0.10", "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}], "selector": {"b": "2", "a": "1"}}),
        ["s", "ClusterIP", "10.96.0.10", "<none>", "53/UDP,53/TCP", "120m", "a=1,b=2"],
    ),
    ("headless no ports", svc("s", {"clusterIP": "None"}), ["s", "ClusterIP", "None", "<none>", "<none>", "120m", "<none>"]),
    (
        "node port",
        svc("s", {"type": "NodePort", "clusterIP": "10.96.0.11", "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}),
        ["s", "NodePort", "10.96.0.11", "<none>", "80:30080/TCP", "120m", "<none>"],
    ),
    (
        "load balancer pending",
        svc("s", {"type": "LoadBalancer", "clusterIP": "10.96.0.12", "ports": [{"port": 443, "nodePort": 31443}]}),
        ["s", "LoadBalancer", "10.96.0.12", "<pending>", "443:31443/TCP", "120m", "<none>"],
    ),
    (
        "load balancer with ingress",
        svc("s", {"type": "LoadBalancer", "clusterIP": "10.96.0.12", "ports": [{"port": 443}]}, {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}, {"hostname": "lb.example.com"}]}}),
        ["s", "LoadBalancer", "10.96.0.12", "1.2.3.4,lb.example.com", "443/TCP", "120m", "<none>"],
    ),
    (
        "external name",
        svc("s", {"type": "ExternalName", "externalName": "db.example.com"}),
        ["s", "ExternalName", "<none>", "db.example.com", "<none>", "120m", "<none>"],
    ),
]


@pytest.mark.parametrize(("s", "expected"), [c[1:] for c in SERVICE_CASES], ids=[c[0] for c in SERVICE_CASES])
def test_service_table(s: dict[str, Any], expected: list[Any]) -> None:
    table = builtin_table("", "Service", [s])
    assert headers(table) == ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"]
    assert cells(table) == [expected]


def test_node_table() -> None:
    ready = {
        "metadata": {"name": "n1", "creationTimestamp": ts(3 * 86400), "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/worker": ""}},
        "spec": {},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
            "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "192.168.1.10"}],
            "nodeInfo": {"kubeletVersion": "v1.33.1", "osImage": "Debian", "kernelVersion": "6.1", "containerRuntimeVersion": "containerd://2.0"},
        },
    }
    cordoned_unready = {
        "metadata": {"name": "n2", "creationTimestamp": ts(60)},
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
    }
    unknown = {"metadata": {"name": "n3", "creationTimestamp": ts(60)}}
    table = builtin_table("", "Node", [ready, cordoned_unready, unknown])
    assert headers(table) == ["Name", "Status", "Roles", "Age", "Version", "Internal-IP", "External-IP", "OS-Image", "Kernel-Version", "Container-Runtime"]
    assert cells(table) == [
        ["n1", "Ready", "control-plane,worker", "3d", "v1.33.1", "192.168.1.10", "<none>", "Debian", "6.1", "containerd://2.0"],
        ["n2", "NotReady,SchedulingDisabled", "<none>", "60s", "", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"],
        ["n3", "Unknown", "<none>", "60s", "", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"],
    ]


def test_pvc_table() -> None:
    bound = {
        "metadata": {"name": "c1", "creationTimestamp": ts(30)},
        "spec": {"volumeName": "pv-1", "storageClassName": "listeners.stackable.tech", "volumeMode": "Filesystem"},
        "status": {"phase": "Bound", "capacity": {"storage": "1"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"]},
    }
    pending = {"metadata": {"name": "c2", "creationTimestamp": ts(30), "deletionTimestamp": ts(1)}, "spec": {}, "status": {"phase": "Pending"}}
    table = builtin_table("", "PersistentVolumeClaim", [bound, pending])
    assert headers(table) == ["Name", "Status", "Volume", "Capacity", "Access Modes", "StorageClass", "VolumeAttributesClass", "Age", "VolumeMode"]
    assert cells(table) == [
        ["c1", "Bound", "pv-1", "1", "RWO,RWX", "listeners.stackable.tech", "<unset>", "30s", "Filesystem"],
        ["c2", "Terminating", "", "", "", "<unset>", "<unset>", "30s", "<unset>"],
    ]


def test_pv_table() -> None:
    pv = {
        "metadata": {"name": "pv-1", "creationTimestamp": ts(30)},
        "spec": {
            "capacity": {"storage": "1"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {"namespace": "default", "name": "c1"},
            "storageClassName": "sc",
        },
        "status": {"phase": "Bound"},
    }
    table = builtin_table("", "PersistentVolume", [pv])
    assert headers(table) == ["Name", "Capacity", "Access Modes", "Reclaim Policy", "Status", "Claim", "StorageClass", "VolumeAttributesClass", "Reason", "Age", "VolumeMode"]
    assert cells(table) == [["pv-1", "1", "RWO", "Delete", "Bound", "default/c1", "sc", "<unset>", "", "30s", "<unset>"]]


def test_other_builtin_tables() -> None:
    cm = {"metadata": {"name": "cm", "creationTimestamp": ts(5)}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}}
    assert cells(builtin_table("", "ConfigMap", [cm])) == [["cm", 3, "5s"]]
    sts = {
        "metadata": {"name": "web", "creationTimestamp": ts(5)},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}},
        "status": {"readyReplicas": 2},
    }
    assert cells(builtin_table("apps", "StatefulSet", [sts])) == [["web", "2/3", "5s", "app", "nginx:1"]]
    dep = {
        "metadata": {"name": "d", "creationTimestamp": ts(5)},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}},
        "status": {"readyReplicas": 2, "updatedReplicas": 2, "availableReplicas": 1},
    }
    assert cells(builtin_table("apps", "Deployment", [dep])) == [["d", "2/2", 2, 1, "5s", "", "", "app=d,tier in (a,b)"]]
    sc = {"metadata": {"name": "sc", "creationTimestamp": ts(5)}, "provisioner": "listeners.stackable.tech"}
    assert cells(builtin_table("storage.k8s.io", "StorageClass", [sc])) == [["sc", "listeners.stackable.tech", "Delete", "Immediate", False, "5s"]]
    assert builtin_columns("", "Endpoints") is None
    assert builtin_columns("example.com", "Pod") is None


# --------------------------------------------------------------------------------------------------------------
# OpenAPI v3


def test_openapi_root_paths() -> None:
    root = openapi_v3_root(["v1", "listeners.stackable.tech/v1alpha1"], hashes={"v1": "ABC"})
    assert set(root["paths"]) == {"api/v1", "apis/listeners.stackable.tech/v1alpha1"}
    assert root["paths"]["api/v1"] == {"serverRelativeURL": "/openapi/v3/api/v1?hash=ABC"}
    url = root["paths"]["apis/listeners.stackable.tech/v1alpha1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/listeners.stackable.tech/v1alpha1?hash=")
    assert len(url.split("hash=")[1]) == 128


LISTENER = ResourceInfo("listeners.stackable.tech", "v1alpha1", "Listener", "listeners", True)
LISTENER_CLASS = ResourceInfo("listeners.stackable.tech", "v1alpha1", "ListenerClass", "listenerclasses", False)


def test_openapi_group_version_paths_carry_gvk_and_field_validation() -> None:
    doc = openapi_v3_group_version("listeners.stackable.tech", "v1alpha1", [LISTENER, LISTENER_CLASS])
    assert doc["openapi"].startswith("3.")
    item_path = "/apis/listeners.stackable.tech/v1alpha1/namespaces/{namespace}/listeners/{name}"
    cluster_item = "/apis/listeners.stackable.tech/v1alpha1/listenerclasses/{name}"
    assert set(doc["paths"]) == {
        "/apis/listeners.stackable.tech/v1alpha1/namespaces/{namespace}/listeners",
        item_path,
        "/apis/listeners.stackable.tech/v1alpha1/listenerclasses",
        cluster_item,
    }
    patch = doc["paths"][item_path]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "listeners.stackable.tech", "version": "v1alpha1", "kind": "Listener"}
    assert {"name": "fieldValidation", "in": "query"}.items() <= next(p for p in patch["parameters"] if p["name"] == "fieldValidation").items()
    # No strategic merge patch is advertised: kubectl then sends a merge patch for custom resources (and uses its
    # compiled-in types for built-ins) instead of computing a patch from schemas these documents do not carry.
    assert set(patch["requestBody"]["content"]) == {
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
    }
    assert doc["paths"][cluster_item]["patch"]["x-kubernetes-group-version-kind"]["kind"] == "ListenerClass"
    assert [p["name"] for p in doc["paths"][cluster_item]["parameters"]] == ["name"]
    assert [p["name"] for p in doc["paths"][item_path]["parameters"]] == ["name", "namespace"]
    assert "components" not in doc


def test_openapi_core_group_uses_api_prefix() -> None:
    doc = openapi_v3_group_version("", "v1", [ResourceInfo("", "v1", "ConfigMap", "configmaps", True)])
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}


def test_openapi_publishes_crd_schema_and_hash_changes_with_content() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object"}}}
    with_schema = ResourceInfo("listeners.stackable.tech", "v1alpha1", "Listener", "listeners", True, schema=schema)
    doc = openapi_v3_group_version("listeners.stackable.tech", "v1alpha1", [with_schema])
    published = doc["components"]["schemas"]["tech.stackable.listeners.v1alpha1.Listener"]
    assert published["x-kubernetes-group-version-kind"] == [{"group": "listeners.stackable.tech", "version": "v1alpha1", "kind": "Listener"}]
    assert set(published["properties"]) == {"apiVersion", "kind", "metadata", "spec"}
    assert schema == {"type": "object", "properties": {"spec": {"type": "object"}}}, "input schema must not change"
    ref = doc["paths"]["/apis/listeners.stackable.tech/v1alpha1/namespaces/{namespace}/listeners/{name}"]["get"]
    assert ref["responses"]["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/tech.stackable.listeners.v1alpha1.Listener"}
    plain = openapi_v3_group_version("listeners.stackable.tech", "v1alpha1", [LISTENER])
    assert openapi_v3_hash(doc) != openapi_v3_hash(plain)
    assert openapi_v3_hash(plain) == openapi_v3_hash(openapi_v3_group_version("listeners.stackable.tech", "v1alpha1", [LISTENER]))
