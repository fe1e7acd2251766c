"""Server-side apply and managedFields, checked against the apiserver's observable behaviour."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from kubesim.ssa.apply import ApplyConflict, apply
from kubesim.ssa.builtin_types import builtin_list_keys
from kubesim.ssa.fieldsv1 import decode_fields_v1, encode_fields_v1, format_path
from kubesim.ssa.listtypes import ATOMIC, ListType
from kubesim.ssa.update import record_update

CM_KEYS = builtin_list_keys("v1", "ConfigMap")
SVC_KEYS = builtin_list_keys("v1", "Service")
DEPLOY_KEYS = builtin_list_keys("apps/v1", "Deployment")


def cm(data: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "ns", **meta},
    }
    if data is not None:
        obj["data"] = data
    return obj


def svc(ports: list[Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": ports, **spec},
    }


def entries(obj: dict[str, Any]) -> dict[tuple[str, str, str | None], dict[str, Any]]:
    return {
        (e["manager"], e["operation"], e.get("subresource")): e
        for e in obj["metadata"].get("managedFields", [])
    }


def fields(
    obj: dict[str, Any], manager: str, operation: str = "Apply", subresource: str | None = None
) -> Any:
    return entries(obj)[(manager, operation, subresource)]["fieldsV1"]


def do_apply(live: dict[str, Any] | None, config: dict[str, Any], manager: str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("force", False)
    kw.setdefault("list_keys", CM_KEYS)
    kw.setdefault("now", "2026-01-01T00:00:00Z")
    return apply(live, config, manager=manager, **kw)


# ---------------------------------------------------------------------------------------------------------------
# Creating and the managedFields entry


def test_apply_creates_object_with_managed_fields_entry() -> None:
    config = cm({"k": "v"}, labels={"app": "x"})
    obj = do_apply(None, config, "alice")
    assert obj["data"] == {"k": "v"} and obj["metadata"]["labels"] == {"app": "x"}
    assert obj["metadata"]["managedFields"] == [
        {
            "manager": "alice",
            "operation": "Apply",
            "apiVersion": "v1",
            "time": "2026-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:app": {}}}},
        }
    ]
    assert "managedFields" not in config["metadata"], "input not mutated"


def test_identity_fields_are_not_owned() -> None:
    live = cm({"a": "1"}, uid="u1", resourceVersion="5", creationTimestamp="t", generation=3)
    obj = do_apply(live, cm({"a": "1"}, uid="u1", resourceVersion="5"), "alice")
    assert fields(obj, "alice") == {"f:data": {"f:a": {}}}


def test_service_ports_are_list_map_items_with_defaulted_protocol_key() -> None:
    obj = do_apply(None, svc([{"port": 80, "name": "http"}], type="ClusterIP"), "op", list_keys=SVC_KEYS)
    assert fields(obj, "op") == {
        "f:spec": {
            "f:ports": {'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:name": {}, "f:port": {}}},
            "f:type": {},
        }
    }
    # A live item carrying the defaulted protocol is the same item.
    live = copy.deepcopy(obj)
    live["spec"]["ports"][0]["protocol"] = "TCP"
    again = do_apply(live, svc([{"port": 80, "name": "web"}], type="ClusterIP"), "op", list_keys=SVC_KEYS)
    assert again["spec"]["ports"] == [{"port": 80, "name": "web", "protocol": "TCP"}]


def test_reapplying_the_same_config_changes_nothing_not_even_the_time() -> None:
    first = do_apply(None, cm({"k": "v"}), "alice", now="T1")
    second = do_apply(first, cm({"k": "v"}), "alice", now="T2")
    assert second == first


# ---------------------------------------------------------------------------------------------------------------
# Removing fields a manager stops applying


def test_field_dropped_by_its_only_owner_is_removed() -> None:
    obj = do_apply(None, cm({"a": "1", "b": "2"}, labels={"x": "1", "y": "2"}), "alice")
    obj = do_apply(obj, cm({"a": "1"}, labels={"x": "1"}), "alice")
    assert obj["data"] == {"a": "1"} and obj["metadata"]["labels"] == {"x": "1"}
    assert fields(obj, "alice") == {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}


def test_dropping_every_key_of_a_map_removes_the_map() -> None:
    obj = do_apply(None, cm({"a": "1"}), "alice")
    obj = do_apply(obj, cm(labels={"l": "1"}), "alice")
    assert "data" not in obj
    assert obj["metadata"]["labels"] == {"l": "1"}


def test_field_dropped_by_one_of_two_owners_stays() -> None:
    obj = do_apply(None, cm({"k": "same"}), "alice")
    obj = do_apply(obj, cm({"k": "same"}), "bob")  # same value: shared, no conflict
    assert fields(obj, "alice") == fields(obj, "bob") == {"f:data": {"f:k": {}}}
    obj = do_apply(obj, cm({"other": "1"}), "alice")
    assert obj["data"] == {"k": "same", "other": "1"}
    assert fields(obj, "alice") == {"f:data": {"f:other": {}}}
    assert fields(obj, "bob") == {"f:data": {"f:k": {}}}


def test_fields_nobody_manages_are_left_alone() -> None:
    live = cm({"unmanaged": "x"})
    obj = do_apply(live, cm({"a": "1"}), "alice")
    obj = do_apply(obj, cm({"b": "1"}), "alice")
    assert obj["data"] == {"unmanaged": "x", "b": "1"}


def test_null_in_config_deletes_the_field() -> None:
    obj = do_apply(cm({"a": "1", "b": "2"}), {**cm({"a": None})}, "alice")
    assert obj["data"] == {"b": "2"}


# ---------------------------------------------------------------------------------------------------------------
# Conflicts


def test_conflict_names_manager_and_field_and_changes_nothing() -> None:
    live = do_apply(None, cm({"k": "alice", "a": "1"}), "alice")
    before = copy.deepcopy(live)
    with pytest.raises(ApplyConflict) as info:
        do_apply(live, cm({"k": "bob"}), "bob")
    assert str(info.value) == 'Apply failed with 1 conflict: conflict with "alice": .data.k'
    assert info.value.conflicts == [("alice", ".data.k")]
    assert info.value.causes == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".data.k"}
    ]
    assert live == before


def test_conflicts_with_several_managers_are_grouped_by_manager() -> None:
    live = do_apply(None, cm({"a": "1", "b": "1"}), "alice")
    live = do_apply(live, cm({"c": "1"}), "carol")
    with pytest.raises(ApplyConflict) as info:
        do_apply(live, cm({"a": "2", "b": "2", "c": "2"}), "bob")
    assert str(info.value) == (
        'Apply failed with 3 conflicts: conflicts with "alice":\n- .data.a\n- .data.b\n'
        'conflicts with "carol":\n- .data.c'
    )
    assert sorted(info.value.conflicts) == [("alice", ".data.a"), ("alice", ".data.b"), ("carol", ".data.c")]


def test_force_moves_ownership_to_the_applier() -> None:
    live = do_apply(None, cm({"k": "alice", "a": "1"}), "alice", now="T1")
    obj = do_apply(live, cm({"k": "bob"}), "bob", force=True, now="T2")
    assert obj["data"] == {"k": "bob", "a": "1"}
    assert fields(obj, "bob") == {"f:data": {"f:k": {}}}
    assert fields(obj, "alice") == {"f:data": {"f:a": {}}}
    assert entries(obj)[("alice", "Apply", None)]["time"] == "T1"
    # alice no longer owns k: dropping it from her config keeps bob's value; dropping a removes it.
    obj = do_apply(obj, cm({"z": "1"}), "alice")
    assert obj["data"] == {"k": "bob", "z": "1"}


def test_force_that_takes_every_field_removes_the_losers_entry() -> None:
    live = do_apply(None, cm({"k": "alice"}), "alice")
    obj = do_apply(live, cm({"k": "bob"}), "bob", force=True)
    assert set(entries(obj)) == {("bob", "Apply", None)}


def test_conflict_with_update_manager_is_described_like_the_apiserver() -> None:
    old = cm({"k": "1"})
    new = cm({"k": "2"})
    record_update(old, new, "kubectl-edit", "Update", None, CM_KEYS, now="2026-02-03T04:05:06Z")
    with pytest.raises(ApplyConflict) as info:
        do_apply(new, cm({"k": "3"}), "alice")
    assert str(info.value) == (
        'Apply failed with 1 conflict: conflict with "kubectl-edit" using v1 at 2026-02-03T04:05:06Z: .data.k'
    )


def test_atomic_list_owned_by_another_manager_conflicts_unless_equal() -> None:
    def deploy(args: list[str]) -> dict[str, Any]:
        container = {"name": "app", "image": "i", "args": args}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": [container]}}},
        }

    live = do_apply(None, deploy(["a"]), "alice", list_keys=DEPLOY_KEYS)
    shared = do_apply(live, deploy(["a"]), "bob", list_keys=DEPLOY_KEYS)
    assert (
        "f:args"
        in fields(shared, "bob")["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"app"}']
    )
    with pytest.raises(ApplyConflict) as info:
        do_apply(live, deploy(["b"]), "bob", list_keys=DEPLOY_KEYS)
    assert info.value.conflicts == [("alice", '.spec.template.spec.containers[name="app"].args')]


# ---------------------------------------------------------------------------------------------------------------
# Lists


def test_list_map_items_merge_by_key_across_two_managers() -> None:
    obj = do_apply(None, svc([{"port": 80, "name": "http"}]), "alice", list_keys=SVC_KEYS)
    obj = do_apply(obj, svc([{"port": 443, "name": "https"}]), "bob", list_keys=SVC_KEYS)
    assert obj["spec"]["ports"] == [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]
    assert list(fields(obj, "bob")["f:spec"]["f:ports"]) == ['k:{"port":443,"protocol":"TCP"}']
    # alice stops applying her port: only her item goes.
    obj = do_apply(obj, svc([], type="ClusterIP"), "alice", list_keys=SVC_KEYS)
    assert obj["spec"]["ports"] == [{"port": 443, "name": "https"}]
    assert obj["spec"]["type"] == "ClusterIP"


def test_list_map_item_fields_owned_per_manager() -> None:
    obj = do_apply(None, svc([{"port": 80, "name": "http"}]), "alice", list_keys=SVC_KEYS)
    obj = do_apply(obj, svc([{"port": 80, "nodePort": 30080}]), "bob", list_keys=SVC_KEYS)
    assert obj["spec"]["ports"] == [{"port": 80, "name": "http", "nodePort": 30080}]
    obj = do_apply(obj, svc([]), "alice", list_keys=SVC_KEYS)
    # bob still owns the item (and its key and nodePort): it survives without alice's name.
    assert obj["spec"]["ports"] == [{"port": 80, "nodePort": 30080}]


def test_list_map_merge_keeps_live_only_items_in_place_and_follows_applied_order() -> None:
    live = svc([{"port": 1}, {"port": 2}, {"port": 3}])
    obj = do_apply(
        live, svc([{"port": 3, "name": "c"}, {"port": 1, "name": "a"}]), "alice", list_keys=SVC_KEYS
    )
    assert [p["port"] for p in obj["spec"]["ports"]] == [3, 1, 2]
    assert obj["spec"]["ports"][0] == {"port": 3, "name": "c"}


def test_containers_merge_by_name_and_nested_env_by_name() -> None:
    def deploy(containers: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": containers}}},
        }

    obj = do_apply(None, deploy([{"name": "app", "image": "a:1"}]), "alice", list_keys=DEPLOY_KEYS)
    obj = do_apply(
        obj,
        deploy([{"name": "app", "env": [{"name": "X", "value": "1"}]}]),
        "injector",
        list_keys=DEPLOY_KEYS,
    )
    obj = do_apply(obj, deploy([{"name": "app", "image": "a:2"}]), "alice", list_keys=DEPLOY_KEYS)
    assert obj["spec"]["template"]["spec"]["containers"] == [
        {"name": "app", "image": "a:2", "env": [{"name": "X", "value": "1"}]}
    ]
    env_fields = fields(obj, "injector")["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"app"}']
    assert env_fields == {
        ".": {},
        "f:env": {'k:{"name":"X"}': {".": {}, "f:name": {}, "f:value": {}}},
        "f:name": {},
    }


def test_set_lists_merge_by_value() -> None:
    obj = do_apply(None, cm(finalizers=["a", "b"]), "alice")
    obj = do_apply(obj, cm(finalizers=["b", "c"]), "bob")
    assert obj["metadata"]["finalizers"] == ["a", "b", "c"]
    assert fields(obj, "bob") == {"f:metadata": {"f:finalizers": {'v:"b"': {}, 'v:"c"': {}}}}
    obj = do_apply(obj, cm({"x": "1"}), "alice")
    assert obj["metadata"]["finalizers"] == ["b", "c"], "alice's a goes, the shared b stays"


def test_atomic_lists_and_scalars_are_replaced() -> None:
    keys = builtin_list_keys("Pod")
    live = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"tolerations": [{"key": "a"}]},
    }
    obj = do_apply(
        live, {**live, "spec": {"tolerations": [{"key": "b"}], "priority": 3}}, "alice", list_keys=keys
    )
    assert obj["spec"] == {"tolerations": [{"key": "b"}], "priority": 3}
    assert fields(obj, "alice") == {"f:spec": {"f:priority": {}, "f:tolerations": {}}}


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        (svc([{"name": "no-port"}]), "missing key field 'port'"),
        (svc([{"port": 1}, {"port": 1}]), "duplicate entries"),
        (svc(["x"]), "list items must be objects"),
        ({**cm(), "metadata": {"name": "c", "finalizers": [{"a": 1}]}}, "set list may only hold scalars"),
        ({**cm(), "metadata": {"name": "c", "finalizers": ["a", "a"]}}, "duplicate set entry"),
        ({**cm(), "metadata": {"name": "c", "managedFields": []}}, "managedFields must be nil"),
    ],
)
def test_malformed_apply_configurations_are_rejected(config: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        do_apply(None, config, "alice", list_keys=SVC_KEYS)
    assert fragment in str(info.value)


# ---------------------------------------------------------------------------------------------------------------
# Subresources


def test_status_subresource_apply_only_touches_status_and_has_its_own_entry() -> None:
    live = do_apply(None, {**svc([{"port": 80}]), "status": {}}, "op", list_keys=SVC_KEYS)
    config = {**svc([{"port": 9999}]), "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    obj = do_apply(live, config, "op", subresource="status", list_keys=SVC_KEYS)
    assert obj["spec"]["ports"] == [{"port": 80}], "spec in a status apply is ignored"
    assert obj["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    status_entry = entries(obj)[("op", "Apply", "status")]
    assert status_entry["subresource"] == "status"
    assert status_entry["fieldsV1"] == {
        "f:status": {"f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}, "f:type": {}}}}
    }
    assert "f:status" not in fields(obj, "op")
    # The main-resource entry is independent: re-applying the spec does not drop the status.
    again = do_apply(obj, svc([{"port": 80}]), "op", list_keys=SVC_KEYS)
    assert again["status"] == obj["status"]


def test_main_resource_apply_can_ignore_status() -> None:
    config = {**cm({"a": "1"}), "status": {"phase": "x"}}
    obj = do_apply(None, config, "alice", ignore_fields=[("status",)])
    assert "status" not in obj
    assert fields(obj, "alice") == {"f:data": {"f:a": {}}}


# ---------------------------------------------------------------------------------------------------------------
# Non-apply writes


def test_record_update_on_create_owns_everything_set() -> None:
    new = cm({"a": "1"}, labels={"l": "v"})
    record_update(None, new, "kubectl-create", "Create", None, CM_KEYS, now="T")
    assert new["metadata"]["managedFields"] == [
        {
            "manager": "kubectl-create",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "T",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:l": {}}}},
        }
    ]


def test_record_update_takes_changed_fields_and_drops_removed_ones_from_everyone() -> None:
    obj = do_apply(None, cm({"a": "1", "b": "1", "c": "1"}), "alice", now="T0")
    new = copy.deepcopy(obj)
    new["data"] = {"a": "2", "c": "1", "d": "1"}  # a changed, b removed, d added
    record_update(obj, new, "editor", list_keys=CM_KEYS, now="T1")
    assert fields(new, "alice") == {"f:data": {"f:c": {}}}, "an update takes the fields it changes"
    assert fields(new, "editor", "Update") == {"f:data": {"f:a": {}, "f:d": {}}}
    assert entries(new)[("editor", "Update", None)]["time"] == "T1"
    with pytest.raises(ApplyConflict) as info:
        do_apply(new, cm({"a": "1", "c": "1"}), "alice")
    assert info.value.conflicts == [("editor", ".data.a")]


def test_record_update_without_changes_adds_no_entry() -> None:
    obj = do_apply(None, cm({"a": "1"}), "alice")
    new = copy.deepcopy(obj)
    record_update(obj, new, "noop", list_keys=CM_KEYS, now="T9")
    assert new == obj


def test_record_update_on_status_subresource_is_a_separate_entry() -> None:
    old = {**cm(), "status": {"phase": "Pending"}}
    new = {**cm(), "status": {"phase": "Running"}}
    record_update(old, new, "kubelet", "Update", "status", CM_KEYS, now="T")
    entry = entries(new)[("kubelet", "Update", "status")]
    assert entry["subresource"] == "status" and entry["fieldsV1"] == {"f:status": {"f:phase": {}}}


def test_client_sent_managed_fields_replace_recorded_ones() -> None:
    """kubectl migrates client-side-apply ownership to its server-side manager by patching managedFields."""
    old = cm({"a": "1"})
    record_update(None, old, "kubectl-client-side-apply", list_keys=CM_KEYS, now="T")
    migrated = copy.deepcopy(old)
    migrated["metadata"]["managedFields"] = [
        {
            "manager": "kubectl",
            "operation": "Apply",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {}}},
        }
    ]
    record_update(old, migrated, "kubectl", list_keys=CM_KEYS, now="T2")
    assert set(entries(migrated)) == {("kubectl", "Apply", None)}
    obj = do_apply(migrated, cm({"a": "2"}), "kubectl")  # no conflict after migration
    assert obj["data"] == {"a": "2"}


def test_managed_fields_reset_with_single_empty_entry() -> None:
    old = do_apply(None, cm({"a": "1"}), "alice")
    new = copy.deepcopy(old)
    new["metadata"]["managedFields"] = [{}]
    record_update(old, new, "resetter", list_keys=CM_KEYS)
    assert "managedFields" not in new["metadata"]


@pytest.mark.parametrize(
    ("managed", "fragment"),
    [
        ("nope", "must be a list"),
        ([{"manager": "m", "operation": "Delete"}], "operation must be Apply or Update"),
        ([{"manager": "m", "operation": "Update", "fieldsV1": {"x:y": {}}}], "invalid field element"),
        ([{"manager": "m", "operation": "Update", "fieldsV1": {"k:notjson": {}}}], "invalid JSON"),
        ([{"manager": "m", "operation": "Update", "fieldsType": "FieldsV2"}], "fieldsType"),
    ],
)
def test_invalid_client_sent_managed_fields_are_rejected(managed: Any, fragment: str) -> None:
    new = cm({"a": "1"})
    new["metadata"]["managedFields"] = managed
    with pytest.raises(ValueError) as info:
        record_update(cm({"a": "0"}), new, "m", list_keys=CM_KEYS)
    assert fragment in str(info.value)


def test_record_update_rejects_apply_operation() -> None:
    with pytest.raises(ValueError, match="non-apply"):
        record_update(None, cm(), "m", "Apply")


# ---------------------------------------------------------------------------------------------------------------
# FieldsV1 and list types


def test_fields_v1_round_trip_and_canonical_keys() -> None:
    tree = {
        "f:metadata": {"f:finalizers": {".": {}, 'v:"x"': {}}},
        "f:spec": {"f:ports": {'k:{"protocol": "TCP", "port": 80}': {".": {}, "f:port": {}}}},
    }
    paths = decode_fields_v1(tree)
    assert ("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}') in paths
    assert ("f:metadata", "f:finalizers") in paths
    encoded = encode_fields_v1(paths)
    assert encoded["f:spec"]["f:ports"] == {'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}}}
    assert decode_fields_v1(encoded) == paths


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (("f:spec", "f:replicas"), ".spec.replicas"),
        (
            ("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}', "f:name"),
            '.spec.ports[port=80,protocol="TCP"].name',
        ),
        (("f:metadata", "f:finalizers", 'v:"a"'), '.metadata.finalizers[="a"]'),
        (("f:x", "i:3"), ".x[3]"),
    ],
)
def test_format_path(path: tuple[str, ...], text: str) -> None:
    assert format_path(path) == text


@pytest.mark.parametrize(
    ("kind", "path", "expected"),
    [
        ("Service", ("spec", "ports"), ListType("map", ("port", "protocol"), (("protocol", "TCP"),))),
        ("Deployment", ("spec", "template", "spec", "containers"), ListType("map", ("name",))),
        (
            "StatefulSet",
            ("spec", "template", "spec", "initContainers", "ports"),
            ListType("map", ("containerPort", "protocol"), (("protocol", "TCP"),)),
        ),
        ("Pod", ("spec", "containers", "env"), ListType("map", ("name",))),
        ("Pod", ("spec", "volumes"), ListType("map", ("name",))),
        ("Pod", ("spec", "tolerations"), ATOMIC),
        ("Node", ("status", "conditions"), ListType("map", ("type",))),
        ("ConfigMap", ("metadata", "ownerReferences"), ListType("map", ("uid",))),
        ("ConfigMap", ("metadata", "finalizers"), ListType("set")),
        ("Listener", ("spec", "ports"), ATOMIC),
    ],
)
def test_builtin_list_keys(kind: str, path: tuple[str, ...], expected: ListType) -> None:
    assert builtin_list_keys("v1", kind)(path) == expected
    assert builtin_list_keys(kind)(path) == expected


# ---------------------------------------------------------------------------------------------------------------
# Client-side apply -> server-side apply by kubectl

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def client_side_applied(data: dict[str, str]) -> dict[str, Any]:
    """An object as `kubectl apply` (client-side) leaves it: annotation + kubectl-client-side-apply owner."""
    config = cm(data)
    obj = cm(data, annotations={LAST_APPLIED: json.dumps(config) + "\n"})
    record_update(None, obj, "kubectl-client-side-apply", list_keys=CM_KEYS, now="T0")
    return obj


def test_kubectl_server_side_apply_takes_over_its_client_side_fields() -> None:
    live = client_side_applied({"a": "1"})
    obj = do_apply(live, cm({"a": "2"}), "kubectl")
    assert obj["data"] == {"a": "2"}
    assert fields(obj, "kubectl") == {"f:data": {"f:a": {}}}
    last = json.loads(obj["metadata"]["annotations"][LAST_APPLIED])
    assert last["data"] == {"a": "2"}, "the annotation follows the server-side applied configuration"


def test_other_managers_get_no_client_side_transition() -> None:
    live = client_side_applied({"a": "1"})
    with pytest.raises(ApplyConflict, match=re.escape('"kubectl-client-side-apply" using v1 at T0: .data.a')):
        do_apply(live, cm({"a": "2"}), "helm")


def test_transition_refused_when_live_drifted_from_last_applied() -> None:
    live = client_side_applied({"a": "1"})
    drifted = copy.deepcopy(live)
    drifted["data"]["a"] = "changed-by-hand"
    with pytest.raises(ApplyConflict):
        do_apply(drifted, cm({"a": "2"}), "kubectl")


def test_transition_only_covers_fields_in_last_applied() -> None:
    live = client_side_applied({"a": "1"})
    edited = copy.deepcopy(live)
    edited["data"]["b"] = "x"
    record_update(live, edited, "editor", list_keys=CM_KEYS, now="T1")
    with pytest.raises(ApplyConflict) as info:
        do_apply(edited, cm({"a": "2", "b": "y"}), "kubectl")
    assert info.value.conflicts == [("editor", ".data.b")]


def test_managed_fields_entries_are_ordered_like_the_apiserver() -> None:
    obj = cm({"a": "1"})
    record_update(None, obj, "creator", list_keys=CM_KEYS, now="2026-01-01T00:00:01Z")
    obj = do_apply(obj, cm({"b": "1"}), "zed", now="2026-01-01T00:00:03Z")
    obj = do_apply(obj, cm({"c": "1"}), "amy", now="2026-01-01T00:00:02Z")
    order = [(e["manager"], e["operation"]) for e in obj["metadata"]["managedFields"]]
    assert order == [("amy", "Apply"), ("zed", "Apply"), ("creator", "Update")]


def test_atomic_maps_are_owned_and_replaced_whole() -> None:
    keys = builtin_list_keys("v1", "Service")
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "d"},
           "spec": {"selector": {"a": "1"}}}
    live = apply(None, svc, "m1", True, keys, now="T0")
    assert entries(live)[("m1", "Apply", None)]["fieldsV1"] == {"f:spec": {"f:selector": {}}}
    widened = copy.deepcopy(live)
    widened["spec"]["selector"]["b"] = "2"
    record_update(live, widened, "editor", list_keys=keys, now="T1")
    again = apply(widened, svc, "m1", True, keys, now="T2")
    assert again["spec"]["selector"] == {"a": "1"}
