"""Accessibility requirements built the way csi-provisioner builds them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kubesim.cluster.csi.topology import RequirementError, accessibility_requirements

DRIVER = "d.example.com"
KEY = "d.example.com/node"


def _csi_node(name: str, keys: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": name, "topologyKeys": keys}]},
    }


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {KEY: name, **labels}}}


NODES = {n: _node(n, zone="z1" if n != "c" else "z2") for n in ("a", "b", "c")}
CSI_NODES = [_csi_node(n, [KEY]) for n in ("a", "b", "c")]


def test_selected_node_is_preferred_first_and_requisite_lists_all() -> None:
    requisite, preferred = accessibility_requirements(DRIVER, "b", {}, CSI_NODES, NODES)
    assert requisite == [{KEY: "a"}, {KEY: "b"}, {KEY: "c"}]
    assert preferred == [{KEY: "b"}, {KEY: "a"}, {KEY: "c"}]


def test_without_selected_node_every_registered_node_counts() -> None:
    requisite, preferred = accessibility_requirements(DRIVER, None, {}, CSI_NODES[:2], NODES)
    assert requisite == preferred == [{KEY: "a"}, {KEY: "b"}]


def test_nodes_with_other_keys_are_left_out_and_multi_key_segments_are_kept_whole() -> None:
    csi_nodes = [_csi_node("a", [KEY, "zone"]), _csi_node("b", [KEY, "zone"]), _csi_node("c", [KEY])]
    requisite, preferred = accessibility_requirements(DRIVER, "a", {}, csi_nodes, NODES)
    assert requisite == [{KEY: "a", "zone": "z1"}, {KEY: "b", "zone": "z1"}]
    assert preferred[0] == {KEY: "a", "zone": "z1"}


def test_allowed_topologies_filter() -> None:
    storage_class = {"allowedTopologies": [{"matchLabelExpressions": [{"key": KEY, "values": ["a", "c"]}]}]}
    requisite, _ = accessibility_requirements(DRIVER, None, storage_class, CSI_NODES, NODES)
    assert requisite == [{KEY: "a"}, {KEY: "c"}]


def test_selected_node_without_the_driver_cannot_be_served_yet() -> None:
    with pytest.raises(
        RequirementError,
        match=re.escape('no CSINode topology for driver "d.example.com" on selected node "c"'),
    ):
        accessibility_requirements(DRIVER, "c", {}, CSI_NODES[:2], NODES)
