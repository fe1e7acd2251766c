"""Deep merge of overrides over a generated Service (behaviour.md "Overrides")."""

from __future__ import annotations

from typing import Any

from listener_operator.listener_controller.overrides import MergeStrategy, deep_merge

BASE: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "web", "namespace": "ns", "labels": {"a": "1"}, "annotations": {"x": "base"},
                 "ownerReferences": [{"uid": "u1", "kind": "Listener", "controller": True}],
                 "finalizers": ["f1"]},
    "spec": {"type": "NodePort", "selector": {"mnt": "web", "extra": "e"},
             "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443, "protocol": "TCP"}],
             "publishNotReadyAddresses": True, "externalIPs": ["1.1.1.1", "2.2.2.2"]},
}


def test_maps_merge_per_key_and_scalars_are_replaced() -> None:
    merged = deep_merge(BASE, {"metadata": {"annotations": {"y": "o"}, "labels": {"a": "2"}},
                               "spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP"}})
    assert merged["metadata"]["annotations"] == {"x": "base", "y": "o"}
    assert merged["metadata"]["labels"] == {"a": "2"}
    assert merged["spec"]["type"] == "LoadBalancer"
    assert merged["spec"]["sessionAffinity"] == "ClientIP"
    assert merged["spec"]["publishNotReadyAddresses"] is True


def test_inputs_are_not_modified() -> None:
    override = {"spec": {"ports": [{"port": 80, "name": "web"}]}, "metadata": {"annotations": {"y": "1"}}}
    before = repr(BASE), repr(override)
    merged = deep_merge(BASE, override)
    merged["spec"]["ports"][0]["name"] = "changed"
    merged["metadata"]["labels"]["new"] = "x"
    assert (repr(BASE), repr(override)) == before


def test_ports_merge_by_port_number() -> None:
    merged = deep_merge(BASE, {"spec": {"ports": [{"port": 80, "targetPort": 8080},
                                                  {"name": "metrics", "port": 9090}]}})
    assert merged["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": 8080},
        {"name": "https", "port": 443, "protocol": "TCP"},
        {"name": "metrics", "port": 9090},
    ]


def test_selector_is_atomic_like_kubernetes_declares_it() -> None:
    merged = deep_merge(BASE, {"spec": {"selector": {"only": "this"}}})
    assert merged["spec"]["selector"] == {"only": "this"}


def test_other_lists_are_replaced() -> None:
    merged = deep_merge(BASE, {"spec": {"externalIPs": ["3.3.3.3"]}})
    assert merged["spec"]["externalIPs"] == ["3.3.3.3"]


def test_owner_references_merge_by_uid_and_finalizers_as_a_set() -> None:
    merged = deep_merge(BASE, {"metadata": {
        "ownerReferences": [{"uid": "u1", "blockOwnerDeletion": True}, {"uid": "u2", "kind": "Other"}],
        "finalizers": ["f1", "f2"]}})
    assert merged["metadata"]["ownerReferences"] == [
        {"uid": "u1", "kind": "Listener", "controller": True, "blockOwnerDeletion": True},
        {"uid": "u2", "kind": "Other"}]
    assert merged["metadata"]["finalizers"] == ["f1", "f2"]


def test_null_in_override_means_not_set() -> None:
    merged = deep_merge(BASE, {"spec": {"type": None, "loadBalancerClass": None, "selector": None},
                               "metadata": {"annotations": {"y": None, "x": "o"}}})
    assert merged["spec"]["type"] == "NodePort"
    assert "loadBalancerClass" not in merged["spec"]
    assert merged["spec"]["selector"] == BASE["spec"]["selector"]
    assert merged["metadata"]["annotations"] == {"x": "o"}


def test_new_subtrees_are_copied_without_nulls() -> None:
    merged = deep_merge({"spec": {}}, {"spec": {"sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10,
                                                                                       "x": None}}}})
    assert merged["spec"]["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10}}


def test_type_mismatch_replaces() -> None:
    assert deep_merge({"a": {"b": 1}}, {"a": "flat"}) == {"a": "flat"}
    assert deep_merge({"a": [1, 2]}, {"a": {"k": 1}}) == {"a": {"k": 1}}


def test_empty_override_is_identity() -> None:
    assert deep_merge(BASE, {}) == BASE
    assert deep_merge(BASE, {"apiVersion": "v1", "kind": "Service", "metadata": {}}) == BASE


def test_custom_strategy_list_map_in_nested_items() -> None:
    strategy = MergeStrategy(list_map_keys={("items",): ("name",), ("items", "[]", "sub"): ("id",)})
    base = {"items": [{"name": "a", "sub": [{"id": 1, "v": "x"}]}]}
    merged = deep_merge(base, {"items": [{"name": "a", "sub": [{"id": 1, "w": "y"}, {"id": 2}]}]}, strategy)
    assert merged == {"items": [{"name": "a", "sub": [{"id": 1, "v": "x", "w": "y"}, {"id": 2}]}]}
