"""Server-side apply at the cost of what changed: ``diff`` (the walk that flattens only what changed) gives exactly
``compare(Flat(old), Flat(new))`` (the definition managedFields were computed with before) on thousands of objects
changed in the ways writes change them and in the ways hand-written objects are odd; apply builds its result
without sharing anything with its inputs; entries nobody changed are written back as they were."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from kubesim.ssa.apply import apply
from kubesim.ssa.builtin_types import builtin_list_keys
from kubesim.ssa.fieldsets import Flat, compare, diff
from kubesim.ssa.listtypes import ATOMIC, SET, ListType, TypedKeys
from kubesim.ssa.update import record_update

SERVICE_KEYS = builtin_list_keys("v1", "Service")
POD_KEYS = builtin_list_keys("v1", "Pod")


def _custom_lists(path: tuple[str, ...]) -> ListType:
    return {("spec", "ports"): ListType("map", ("name",)), ("spec", "tags"): SET,
            ("spec", "matrix"): ListType("map", ("x", "y"), (("y", 0),))}.get(path, ATOMIC)


CUSTOM_KEYS = TypedKeys(_custom_lists, lambda path: path == ("spec", "selector"))


def service(rng: random.Random) -> dict[str, Any]:
    ports = [{"name": f"p{i}", "port": 8000 + i, "protocol": rng.choice(["TCP", "UDP"]), "targetPort": 80 + i}
             for i in range(rng.randint(0, 4))]
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "s", "namespace": "ns", "uid": "u", "resourceVersion": str(rng.randint(1, 9)),
                     "labels": {f"l{i}": f"v{i}" for i in range(rng.randint(0, 3))},
                     "annotations": {"a": "b"} if rng.random() < 0.5 else {},
                     "finalizers": ["f1", "f2"][: rng.randint(0, 2)],
                     "ownerReferences": [{"apiVersion": "v1", "kind": "L", "name": "l", "uid": f"o{i}",
                                          "controller": i == 0} for i in range(rng.randint(0, 2))],
                     "managedFields": [{"manager": "x"}]},
        "spec": {"type": rng.choice(["ClusterIP", "NodePort"]), "ports": ports,
                 "selector": {"app": "x"} if rng.random() < 0.7 else {},
                 "clusterIPs": ["10.0.0.1"], "publishNotReadyAddresses": rng.choice([True, False, 1, 0])},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]} if rng.random() < 0.3 else {}},
    }


def custom(rng: random.Random) -> dict[str, Any]:
    return {
        "apiVersion": "x/v1", "kind": "Thing", "metadata": {"name": "t", "labels": {"a": "1"}},
        "spec": {"ports": [{"name": f"n{i}", "port": i, "extra": {"deep": [i, {"k": i}]}} for i in range(3)],
                 "tags": ["a", "b", 1, True, 1.0][: rng.randint(0, 5)],
                 "matrix": [{"x": 1, "y": 0, "v": "a"}, {"x": 1, "v": "default-y"}, {"x": 2, "y": 1.5}],
                 "selector": {"a": "b", "c": "d"}, "nested": {"a": {"b": {"c": 1}}, "e": {}}, "n": None},
    }


def _containers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _containers(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out += _containers(child, (*path, i))
    return out


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


ODD_VALUES: list[Any] = [None, 0, 1, 1.0, True, False, "", "x", {}, [], {"z": 1}, [1, 2], [{"name": "n0"}],
                         [{"name": "dup"}, {"name": "dup"}], [{"port": 1}], [["nested"]], -0.0, 0.0]


def mutate(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    for _ in range(rng.randint(1, 4)):
        paths = [p for p in _containers(new) if p]
        path = rng.choice(paths)
        parent = _get(new, path[:-1])
        last = path[-1]
        action = rng.random()
        if action < 0.3:
            parent[last] = copy.deepcopy(rng.choice(ODD_VALUES) if rng.random() < 0.5 else _get(new, path))
        elif action < 0.5:
            del parent[last]
        elif action < 0.65 and isinstance(parent, dict):
            parent[f"new{rng.randint(0, 3)}"] = copy.deepcopy(rng.choice(ODD_VALUES))
        elif action < 0.8 and isinstance(parent, list):
            rng.shuffle(parent)
        elif isinstance(parent, list):
            parent.append(copy.deepcopy(rng.choice(parent) if parent and rng.random() < 0.5 else rng.choice(ODD_VALUES)))
        else:
            value = _get(new, path)
            if isinstance(value, int | float) and not isinstance(value, bool):
                parent[last] = value + 1
    return new


def _reference(old: Any, new: Any, keys: Any) -> Any:
    try:
        return compare(Flat(old, keys, strict=False), Flat(new, keys, strict=False))
    except ValueError:
        return None


@pytest.mark.parametrize(("make", "keys"), [(service, SERVICE_KEYS), (service, POD_KEYS), (custom, CUSTOM_KEYS)])
def test_diff_equals_the_flat_comparison(make: Any, keys: Any) -> None:
    rng = random.Random(15)
    compared = 0
    for _ in range(1500):
        old = make(rng)
        new = mutate(old, rng)
        if rng.random() < 0.3:
            old, new = new, old
        expected = _reference(old, new, keys)
        if expected is None:
            continue  # Flat refuses malformed lists (items of the wrong kind): diff may only flatten what changed
        got = diff(old, new, keys)
        assert (got.added, got.removed, got.modified) == (expected.added, expected.removed, expected.modified), (
            old, new)
        compared += 1
    assert compared > 1000


def test_diff_of_identical_objects_and_of_nothing() -> None:
    rng = random.Random(1)
    obj = service(rng)
    assert diff(obj, obj, SERVICE_KEYS).changed == set()
    assert diff(obj, copy.deepcopy(obj), SERVICE_KEYS).changed == set()
    created = diff({}, obj, SERVICE_KEYS)
    assert created.added == Flat(obj, SERVICE_KEYS, strict=False).paths and not created.removed
    assert diff(obj, None, SERVICE_KEYS).removed == Flat(obj, SERVICE_KEYS, strict=False).paths


def _ids(value: Any) -> set[int]:
    out: set[int] = set()
    if isinstance(value, dict | list):
        out.add(id(value))
        for child in value.values() if isinstance(value, dict) else value:
            out |= _ids(child)
    return out


def test_apply_builds_a_new_object_and_leaves_its_inputs_alone() -> None:
    """apply no longer copies the live object up front: the merge builds every container of the result itself."""
    rng = random.Random(3)
    live = apply(None, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "labels": {"a": "1"}},
                        "spec": {"ports": [{"port": 80, "name": "http"}], "selector": {"x": "y"}}},
                 "one", True, SERVICE_KEYS)
    for _ in range(50):
        config = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "labels": {"b": str(rng.random())}},
                  "spec": {"ports": [{"port": 80, "name": rng.choice(["http", "web"])}, {"port": 443}],
                           "type": "NodePort"}}
        live_before, config_before = copy.deepcopy(live), copy.deepcopy(config)
        result = apply(live, config, rng.choice(["one", "two"]), True, SERVICE_KEYS)
        assert live == live_before and config == config_before
        # nothing is shared but managedFields trees of entries that did not change (stored objects are never
        # changed in place, so versions may share them)
        shared = _ids(result) & (_ids(live) | _ids(config))
        assert shared <= set().union(*(_ids(e["fieldsV1"]) for e in result["metadata"]["managedFields"]))
        live = result


def test_unchanged_managed_fields_entries_are_written_back_as_they_were() -> None:
    live = apply(None, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                        "spec": {"ports": [{"port": 80}], "type": "ClusterIP"}}, "one", True, SERVICE_KEYS)
    changed = apply(live, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                           "spec": {"selector": {"a": "b"}}}, "two", True, SERVICE_KEYS)
    one = [e for e in changed["metadata"]["managedFields"] if e["manager"] == "one"]
    assert one[0]["fieldsV1"] == live["metadata"]["managedFields"][0]["fieldsV1"]
    # an update taking a field from "one" re-encodes its entry, without the field
    new = copy.deepcopy(changed)
    new["spec"]["type"] = "NodePort"
    record_update(changed, new, "kubectl-edit", list_keys=SERVICE_KEYS)
    one = [e for e in new["metadata"]["managedFields"] if e["manager"] == "one"]
    assert "f:type" not in one[0]["fieldsV1"]["f:spec"] and "f:ports" in one[0]["fieldsV1"]["f:spec"]
