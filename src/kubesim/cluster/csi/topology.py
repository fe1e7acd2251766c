"""CSI accessibility requirements for CreateVolume, built from CSINode topology keys and Node labels."""

from __future__ import annotations

from typing import Any

from kubesim.cluster.base.objects import Obj, labels_of, name_of


class RequirementError(Exception):
    """The accessibility requirements cannot be built yet (e.g. the node plugin has not registered)."""


def _segment(labels: dict[str, str], keys: list[str]) -> dict[str, str] | None:
    if not keys:
        return None
    if any(key not in labels for key in keys):
        return None
    return {key: labels[key] for key in keys}


def _allowed(segment: dict[str, str], allowed_topologies: list[dict[str, Any]]) -> bool:
    for term in allowed_topologies:
        expressions = term.get("matchLabelExpressions") or []
        if all(
            segment.get(e.get("key", "")) in (e.get("values") or [])
            for e in expressions
            if e.get("key") in segment
        ):
            return True
    return False


def accessibility_requirements(
    driver: str,
    selected_node: str | None,
    storage_class: Obj,
    csi_nodes: list[Obj],
    nodes: dict[str, Obj],
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """``(requisite, preferred)`` as csi-provisioner builds them with Topology on.

    Requisite: the topology segment of every node whose CSINode lists the driver with the same keys as the
    selected node (all nodes with the driver when there is none), filtered by the class's allowedTopologies;
    preferred: the same segments with the selected node's first.
    """
    keys_by_node: dict[str, list[str]] = {}
    for csi_node in csi_nodes:
        for entry in csi_node.get("spec", {}).get("drivers") or []:
            if entry.get("name") == driver:
                keys_by_node[name_of(csi_node)] = list(entry.get("topologyKeys") or [])
    segments_by_node: dict[str, dict[str, str]] = {}
    if selected_node:
        keys = keys_by_node.get(selected_node)
        node = nodes.get(selected_node)
        if keys is None or node is None:
            raise RequirementError(
                f'error generating accessibility requirements: no CSINode topology for driver "{driver}" '
                f'on selected node "{selected_node}"'
            )
        selected_segment = _segment(labels_of(node), keys)
        if selected_segment is None:
            raise RequirementError(
                f"error generating accessibility requirements: node {selected_node} lacks topology labels {keys}"
            )
        for node_name, node_keys in keys_by_node.items():
            other = nodes.get(node_name)
            if other is None or sorted(node_keys) != sorted(keys):
                continue
            segment = _segment(labels_of(other), node_keys)
            if segment is not None:
                segments_by_node[node_name] = segment
        segments_by_node[selected_node] = selected_segment
    else:
        for node_name, node_keys in keys_by_node.items():
            node = nodes.get(node_name)
            segment = _segment(labels_of(node), node_keys) if node is not None else None
            if segment:
                segments_by_node[node_name] = segment
    allowed = storage_class.get("allowedTopologies") or []
    if allowed:
        segments_by_node = {n: s for n, s in segments_by_node.items() if _allowed(s, allowed)}
    unique: list[dict[str, str]] = []
    for _, segment in sorted(segments_by_node.items()):
        if segment not in unique:
            unique.append(segment)
    requisite = unique
    if selected_node and selected_node in segments_by_node:
        first = segments_by_node[selected_node]
        preferred = [first] + [s for s in unique if s != first]
    else:
        preferred = list(unique)
    return requisite, preferred
