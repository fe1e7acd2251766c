"""Merge patch, JSON patch and strategic merge patch behaviour as the apiserver applies them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubesim.jsonvalues import json_equal
from kubesim.store.patch import PatchError, json_patch, merge_patch, strategic_merge_patch

# ---------------------------------------------------------------------------------------------------------------
# RFC 7386

MERGE_CASES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), MERGE_CASES)
def test_merge_patch(target: Any, patch: Any, expected: Any) -> None:
    before = copy.deepcopy(target), copy.deepcopy(patch)
    assert merge_patch(target, patch) == expected
    assert (target, patch) == before


def test_merge_patch_result_shares_nothing_with_inputs() -> None:
    target = {"a": {"b": [1]}}
    patch = {"c": {"d": [2]}}
    result = merge_patch(target, patch)
    result["a"]["b"].append(9)
    result["c"]["d"].append(9)
    assert target == {"a": {"b": [1]}} and patch == {"c": {"d": [2]}}


# ---------------------------------------------------------------------------------------------------------------
# RFC 6902

DOC = {"foo": "bar", "list": [1, 2, 3], "obj": {"a/b": 1, "m~n": 2, "nested": {"x": True}}}

JSON_PATCH_CASES: list[tuple[list[dict[str, Any]], Any]] = [
    ([{"op": "add", "path": "/baz", "value": "qux"}], {**DOC, "baz": "qux"}),
    ([{"op": "add", "path": "/list/1", "value": 9}], {**DOC, "list": [1, 9, 2, 3]}),
    ([{"op": "add", "path": "/list/-", "value": 9}], {**DOC, "list": [1, 2, 3, 9]}),
    ([{"op": "add", "path": "/list/3", "value": 9}], {**DOC, "list": [1, 2, 3, 9]}),
    ([{"op": "add", "path": "/foo", "value": None}], {**DOC, "foo": None}),
    ([{"op": "add", "path": "", "value": [1]}], [1]),
    ([{"op": "remove", "path": "/foo"}], {k: v for k, v in DOC.items() if k != "foo"}),
    ([{"op": "remove", "path": "/list/0"}], {**DOC, "list": [2, 3]}),
    ([{"op": "replace", "path": "/foo", "value": {"x": 1}}], {**DOC, "foo": {"x": 1}}),
    ([{"op": "replace", "path": "/list/2", "value": 0}], {**DOC, "list": [1, 2, 0]}),
    ([{"op": "replace", "path": "", "value": "root"}], "root"),
    (
        [{"op": "replace", "path": "/obj/a~1b", "value": 5}, {"op": "remove", "path": "/obj/m~0n"}],
        {**DOC, "obj": {"a/b": 5, "nested": {"x": True}}},
    ),
    (
        [{"op": "move", "path": "/bar", "from": "/foo"}],
        {"bar": "bar", "list": DOC["list"], "obj": DOC["obj"]},
    ),
    ([{"op": "move", "path": "/list/0", "from": "/list/2"}], {**DOC, "list": [3, 1, 2]}),
    ([{"op": "move", "path": "/foo", "from": "/foo"}], DOC),
    ([{"op": "copy", "path": "/list/-", "from": "/obj/nested"}], {**DOC, "list": [1, 2, 3, {"x": True}]}),
    ([{"op": "test", "path": "/obj/nested/x", "value": True}], DOC),
    ([{"op": "test", "path": "/list", "value": [1, 2, 3]}], DOC),
    ([{"op": "test", "path": "/list/0", "value": 1.0}], DOC),
    ([], DOC),
]


@pytest.mark.parametrize(("ops", "expected"), JSON_PATCH_CASES)
def test_json_patch(ops: list[dict[str, Any]], expected: Any) -> None:
    before = copy.deepcopy(DOC)
    assert json_patch(DOC, ops) == expected
    assert before == DOC


JSON_PATCH_ERRORS: list[tuple[Any, str, bool]] = [
    ([{"op": "test", "path": "/foo", "value": "baz"}], "test failed", True),
    ([{"op": "test", "path": "/obj/nested/x", "value": 1}], "test failed", True),  # true is not 1
    ([{"op": "test", "path": "/list", "value": [3, 2, 1]}], "test failed", True),
    ([{"op": "test", "path": "/missing", "value": 1}], "test failed", True),
    ([{"op": "remove", "path": "/missing"}], "does not exist", False),
    ([{"op": "replace", "path": "/missing", "value": 1}], "does not exist", False),
    ([{"op": "add", "path": "/missing/x", "value": 1}], "does not exist", False),
    ([{"op": "add", "path": "/list/4", "value": 1}], "out of bounds", False),
    ([{"op": "add", "path": "/list/01", "value": 1}], "not a valid array index", False),
    ([{"op": "remove", "path": "/list/-"}], "not a valid array index", False),
    ([{"op": "add", "path": "/foo/x", "value": 1}], "parent is not an object or array", False),
    ([{"op": "add", "path": "/foo/x/y", "value": 1}], "cannot descend into a scalar", False),
    ([{"op": "add", "path": "foo", "value": 1}], "must start with '/'", False),
    ([{"op": "add", "path": "/obj/a~2b", "value": 1}], "invalid '~' escape", False),
    ([{"op": "move", "path": "/obj/nested/y", "from": "/obj"}], "its own child", False),
    ([{"op": "copy", "path": "/x", "from": "/nope"}], "does not exist", False),
    ([{"op": "frob", "path": "/x"}], "unknown op", False),
    ([{"op": "add", "path": "/x"}], "missing 'value'", False),
    ([{"op": "move", "path": "/x"}], "missing 'from'", False),
    ([{"op": "add", "value": 1}], "missing 'path'", False),
    ({"op": "add"}, "must be an array", False),
    (["add"], "must be an object", False),
    ([{"op": "remove", "path": ""}], "root", False),
]


@pytest.mark.parametrize(("ops", "fragment", "test_failed"), JSON_PATCH_ERRORS)
def test_json_patch_errors(ops: Any, fragment: str, test_failed: bool) -> None:
    with pytest.raises(PatchError) as info:
        json_patch(DOC, ops)
    assert fragment in str(info.value)
    assert info.value.test_failed is test_failed


def test_json_patch_is_all_or_nothing() -> None:
    target = {"a": 1}
    with pytest.raises(PatchError):
        json_patch(target, [{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/zzz"}])
    assert target == {"a": 1}


def test_json_patch_added_values_are_copies() -> None:
    value = {"deep": [1]}
    result = json_patch(
        {}, [{"op": "add", "path": "/v", "value": value}, {"op": "copy", "from": "/v", "path": "/w"}]
    )
    result["v"]["deep"].append(2)
    assert value == {"deep": [1]} and result["w"] == {"deep": [1]}


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [(1, 1.0, True), (True, 1, False), (0, False, False), ({"a": [1]}, {"a": [1]}, True), ([1, 2], [2, 1], False),
     ("1", 1, False), (None, None, True)],
)  # fmt: skip
def test_json_equal(a: Any, b: Any, equal: bool) -> None:
    assert json_equal(a, b) is equal


# ---------------------------------------------------------------------------------------------------------------
# Strategic merge patch


def deployment(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "finalizers": ["a", "b"]},
        "spec": {"replicas": 1, **spec, "template": {"spec": {"containers": containers}}},
    }


def test_smp_merges_containers_by_name_inside_pod_template() -> None:
    live = deployment([{"name": "app", "image": "app:1", "args": ["x"]}, {"name": "side", "image": "side:1"}])
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "side:2"}]}}}}
    result = strategic_merge_patch(live, patch, "Deployment")
    assert result["spec"]["template"]["spec"]["containers"] == [
        {"name": "app", "image": "app:1", "args": ["x"]},
        {"name": "side", "image": "side:2"},
    ]
    assert live["spec"]["template"]["spec"]["containers"][1]["image"] == "side:1"  # input untouched


def test_smp_appends_new_items_and_merges_nested_keyed_lists() -> None:
    live = {
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "ports": [{"containerPort": 80, "name": "http"}],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "volumeMounts": [{"mountPath": "/data", "name": "data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "imagePullSecrets": [{"name": "reg"}],
            "tolerations": [{"key": "a"}],
        }
    }
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}],
                    "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                    "volumeMounts": [{"mountPath": "/data", "readOnly": True}],
                },
                {"name": "new", "image": "n", "ports": [{"containerPort": 1, "$patch": "delete"}]},
            ],
            "volumes": [{"name": "cfg", "configMap": {"name": "c"}}],
            "imagePullSecrets": [{"name": "other"}],
            "tolerations": [{"key": "b"}],
        }
    }
    result = strategic_merge_patch(live, patch, "Pod")
    app, new = result["spec"]["containers"]
    assert app["ports"] == [{"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 443}]
    assert app["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "3"},
        {"name": "C", "value": "4"},
    ]
    assert app["volumeMounts"] == [{"mountPath": "/data", "name": "data", "readOnly": True}]
    assert new == {"name": "new", "image": "n", "ports": []}
    assert [v["name"] for v in result["spec"]["volumes"]] == ["data", "cfg"]
    assert result["spec"]["imagePullSecrets"] == [{"name": "reg"}, {"name": "other"}]
    assert result["spec"]["tolerations"] == [{"key": "b"}]  # no merge key: replaced


@pytest.mark.parametrize(
    ("kind", "live", "patch", "expected"),
    [
        (
            "Service",
            {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}},
            {"spec": {"ports": [{"port": 443, "nodePort": 30443}]}},
            {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https", "nodePort": 30443}]}},
        ),
        (
            "Service",
            {"spec": {"ports": [{"port": 80}, {"port": 443}]}},
            {"spec": {"ports": [{"port": 80, "$patch": "delete"}]}},
            {"spec": {"ports": [{"port": 443}]}},
        ),
        (
            "Node",
            {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n"}]}},
            {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}},
            {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n"}]}},
        ),
        (
            "Pod",
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]}},
            {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]}},
        ),
        (
            "ConfigMap",
            {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}, {"uid": "2", "name": "b"}]}},
            {"metadata": {"ownerReferences": [{"uid": "2", "controller": True}, {"uid": "3", "name": "c"}]}},
            {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}, {"uid": "2", "name": "b", "controller": True},
                                              {"uid": "3", "name": "c"}]}},
        ),
        (
            "Secret",
            {"metadata": {"finalizers": ["a", "b"]}},
            {"metadata": {"finalizers": ["b", "c"]}},
            {"metadata": {"finalizers": ["a", "b", "c"]}},
        ),
        (
            "Secret",
            {"metadata": {"finalizers": ["a", "b", "c"]}},
            {"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "zz"]}},
            {"metadata": {"finalizers": ["a", "c"]}},
        ),
        (
            "ConfigMap",
            {"data": {"a": "1", "b": "2"}, "metadata": {"labels": {"x": "y"}}},
            {"data": {"a": None, "c": "3"}, "metadata": {"labels": {"x": None}}},
            {"data": {"b": "2", "c": "3"}, "metadata": {"labels": {}}},
        ),
        (
            "Service",
            {"spec": {"selector": {"a": "1", "b": "2"}}},
            {"spec": {"selector": {"$patch": "replace", "c": "3"}}},
            {"spec": {"selector": {"c": "3"}}},
        ),
        (
            "Service",
            {"spec": {"selector": {"a": "1"}, "type": "ClusterIP"}},
            {"spec": {"selector": {"$patch": "delete"}}},
            {"spec": {"selector": {}, "type": "ClusterIP"}},
        ),
        (
            "Service",
            {"spec": {"ports": [{"port": 80}, {"port": 81}]}},
            {"spec": {"ports": [{"port": 90}, {"$patch": "replace"}]}},
            {"spec": {"ports": [{"port": 90}]}},
        ),
        (
            "Service",
            {"spec": {"ports": [{"port": 80}]}},
            {"spec": {"$patch": "merge", "ports": [{"port": 81}]}},
            {"spec": {"ports": [{"port": 80}, {"port": 81}]}},
        ),
        (
            "Pod",
            {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}},
            {"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}},
            {"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}},
        ),
        (
            "Deployment",
            {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}},
            {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}},
            {"spec": {"strategy": {"type": "Recreate"}}},
        ),
        (
            "Pod",
            {"spec": {"containers": [{"name": "a"}]}},
            {"spec": {"containers": [{"name": "b", "env": [{"name": "X", "value": None}], "resources": {"limits": None}}]}},
            {"spec": {"containers": [{"name": "a"}, {"name": "b", "env": [{"name": "X"}], "resources": {}}]}},
        ),
        (
            "CronJob",
            {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}]}}}}}},
            {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "2"}]}}}}}},
            {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "2"}]}}}}}},
        ),
        (
            "StatefulSet",
            {"spec": {"template": {"spec": {"initContainers": [{"name": "i", "image": "1"}]}}}},
            {"spec": {"template": {"spec": {"initContainers": [{"name": "j", "image": "2"}]}}}},
            {"spec": {"template": {"spec": {"initContainers": [{"name": "i", "image": "1"}, {"name": "j", "image": "2"}]}}}},
        ),
        (
            "Listener",  # custom resource: merge patch, lists replaced, directives are plain keys
            {"spec": {"ports": [{"name": "a", "port": 1}], "className": "x"}},
            {"spec": {"ports": [{"name": "b", "port": 2}], "className": None}},
            {"spec": {"ports": [{"name": "b", "port": 2}]}},
        ),
    ],
)  # fmt: skip
def test_strategic_merge_patch_table(kind: str, live: Any, patch: Any, expected: Any) -> None:
    before = copy.deepcopy(live), copy.deepcopy(patch)
    assert strategic_merge_patch(live, patch, kind) == expected
    assert (live, patch) == before


def test_smp_set_element_order_reorders_and_is_removed() -> None:
    live = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}, {"name": "c"}]}}
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "d"}],
            "containers": [{"name": "a", "image": "2"}, {"name": "d", "image": "d"}],
        }
    }
    result = strategic_merge_patch(live, patch, "Pod")
    # "b" is not in the order list: it keeps its place before the items that followed it on the server
    # (the new item "d" has no server position and so comes after it).
    assert [c["name"] for c in result["spec"]["containers"]] == ["b", "c", "a", "d"]
    assert result["spec"]["containers"][2] == {"name": "a", "image": "2"}
    assert not any(k.startswith("$") for k in result["spec"])


def test_smp_set_element_order_full_list_gives_exact_order() -> None:
    live = {"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}}}
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "b"}, {"name": "new"}, {"name": "a"}],
                    "containers": [{"name": "new", "image": "x"}],
                }
            }
        }
    }
    result = strategic_merge_patch(live, patch, "Deployment")
    assert [c["name"] for c in result["spec"]["template"]["spec"]["containers"]] == ["b", "new", "a"]


def test_smp_set_element_order_for_primitive_list() -> None:
    live = {"metadata": {"finalizers": ["a", "b"]}}
    patch = {"metadata": {"$setElementOrder/finalizers": ["c", "b", "a"], "finalizers": ["c"]}}
    assert strategic_merge_patch(live, patch, "ConfigMap") == {"metadata": {"finalizers": ["c", "b", "a"]}}


def test_smp_set_element_order_env_by_name() -> None:
    live = {
        "spec": {
            "containers": [{"name": "app", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]
        }
    }
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "$setElementOrder/env": [{"name": "B"}, {"name": "A"}],
                    "env": [{"name": "A", "value": "9"}],
                }
            ]
        }
    }
    env = strategic_merge_patch(live, patch, "Pod")["spec"]["containers"][0]["env"]
    assert env == [{"name": "B", "value": "2"}, {"name": "A", "value": "9"}]


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        ({"spec": {"containers": [{"image": "x"}]}}, "does not contain merge key 'name'"),
        ({"spec": {"containers": ["x"]}}, "merges objects by 'name'"),
        ({"spec": {"$patch": "explode"}}, "unknown $patch directive"),
        ({"spec": {"containers": [{"name": "a", "$patch": "explode"}]}}, "unknown $patch directive"),
        ({"spec": {"$frobnicate": 1}}, "unknown directive"),
        ({"spec": {"$retainKeys": ["a"], "b": 1}}, "does not list patched field 'b'"),
        ({"spec": {"$retainKeys": "a"}}, "must be a list of strings"),
        ({"metadata": {"finalizers": [{"a": 1}]}}, "holds scalars"),
        (["not", "an", "object"], "must be a JSON object"),
    ],
)
def test_smp_rejects_malformed_patches(patch: Any, fragment: str) -> None:
    with pytest.raises(PatchError) as info:
        strategic_merge_patch({"spec": {"containers": [{"name": "a"}]}}, patch, "Pod")
    assert fragment in str(info.value)


def test_smp_top_level_replace_directive() -> None:
    result = strategic_merge_patch({"a": 1, "b": 2}, {"$patch": "replace", "c": 3}, "ConfigMap")
    assert result == {"c": 3}


def test_smp_patch_on_missing_target_builds_object_without_directives() -> None:
    patch = {
        "metadata": {"finalizers": ["x"]},
        "spec": {"ports": [{"port": 1, "$patch": "merge"}, {"$patch": "merge"}]},
    }
    assert strategic_merge_patch(None, patch, "Service") == {
        "metadata": {"finalizers": ["x"]},
        "spec": {"ports": [{"port": 1}]},
    }
