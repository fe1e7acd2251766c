"""Pure helpers: quantities, address pools, node selector terms, CSI error text."""

from __future__ import annotations

import pytest

from kubesim.cluster.base.objects import parse_quantity
from kubesim.cluster.controllers.loadbalancer import expand_pool
from kubesim.cluster.controllers.matching import node_selector_matches, pod_fits_node


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", 1), ("1Gi", 2**30), ("1.5G", 1_500_000_000), ("500m", 1), ("10k", 10_000), (None, 0), ("", 0)],
)
def test_parse_quantity(text: str | None, expected: int) -> None:
    assert parse_quantity(text) == expected


def test_parse_quantity_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity("12 apples")


def test_expand_pool() -> None:
    assert expand_pool(["127.0.3.1-127.0.3.3", "10.0.0.0/30", "192.0.2.9", "127.0.3.2"]) == [
        "127.0.3.1",
        "127.0.3.2",
        "127.0.3.3",
        "10.0.0.1",
        "10.0.0.2",
        "192.0.2.9",
    ]
    with pytest.raises(ValueError, match="invalid address range"):
        expand_pool(["10.0.0.5-10.0.0.1"])
    with pytest.raises(ValueError):
        expand_pool(["not-an-ip"])


NODE = {"metadata": {"name": "n1", "labels": {"zone": "a", "cores": "8"}}}


def test_node_selector_terms() -> None:
    def selector(
        *expressions: dict[str, object], fields: list[dict[str, object]] | None = None
    ) -> dict[str, object]:
        term: dict[str, object] = {"matchExpressions": list(expressions)}
        if fields:
            term["matchFields"] = fields
        return {"nodeSelectorTerms": [term]}

    assert node_selector_matches(selector({"key": "zone", "operator": "In", "values": ["a", "b"]}), NODE)
    assert not node_selector_matches(selector({"key": "zone", "operator": "NotIn", "values": ["a"]}), NODE)
    assert node_selector_matches(selector({"key": "cores", "operator": "Gt", "values": ["4"]}), NODE)
    assert not node_selector_matches(selector({"key": "cores", "operator": "Lt", "values": ["4"]}), NODE)
    assert node_selector_matches(selector({"key": "gpu", "operator": "DoesNotExist"}), NODE)
    assert not node_selector_matches(selector({"key": "gpu", "operator": "Exists"}), NODE)
    assert node_selector_matches(
        selector(fields=[{"key": "metadata.name", "operator": "In", "values": ["n1"]}]), NODE
    )
    assert not node_selector_matches({"nodeSelectorTerms": [{}]}, NODE)  # an empty term matches nothing
    assert node_selector_matches(None, NODE)


def test_pod_fits_node() -> None:
    assert pod_fits_node({"spec": {"nodeSelector": {"zone": "a"}}}, NODE) is None
    assert (
        pod_fits_node({"spec": {"nodeSelector": {"zone": "b"}}}, NODE)
        == "didn't match Pod's node affinity/selector"
    )
