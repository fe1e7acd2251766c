"""CEL validation rules (``x-kubernetes-validations``) of custom resources, as the apiserver evaluates them: rules
on create and update, transition rules (``oldSelf``) on update only, the cause at the rule's node with the rule's
message (or "failed rule: ..."), rules under maps and list items, and a CRD whose rule does not compile refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubesim.errors import ApiError
from kubesim.sim import KubeSim

CRDS = "customresourcedefinitions.apiextensions.k8s.io"
WIDGETS = "widgets.example.com"


def crd(rule: str = "self.min <= self.max") -> dict[str, Any]:
    spec = {
        "type": "object",
        "properties": {
            "min": {"type": "integer"}, "max": {"type": "integer"},
            "mode": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                     "x-kubernetes-validations": [
                         {"rule": "(!has(oldSelf.a) || has(self.a)) && (!has(oldSelf.b) || has(self.b))",
                          "message": "mode is immutable"},
                         {"rule": "[has(self.a),has(self.b)].filter(x,x==true).size() == 1",
                          "message": "exactly one of the fields in [a b] must be set"}]},
            "ports": {"type": "array", "items": {"type": "integer", "x-kubernetes-validations": [
                {"rule": "self > 1024"}]}},
            "weights": {"type": "object", "additionalProperties": {"type": "integer", "x-kubernetes-validations": [
                {"rule": "self >= 0", "message": "weights are not negative"}]}},
        },
        "x-kubernetes-validations": [{"rule": rule, "message": "min must not exceed max"}],
    }
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "properties": {"spec": spec}}}}]}}


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, "namespace": "default"},
            "spec": spec}


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as server:
        await server.api.create(CRDS, crd())
        yield server


async def refused(sim: KubeSim, body: dict[str, Any], update: bool = False) -> list[str]:
    with pytest.raises(ApiError) as failure:
        if update:
            await sim.api.update(WIDGETS, body)
        else:
            await sim.api.create(WIDGETS, body, "default")
    assert failure.value.code == 422
    return [f"{c['field']}: {c['message']}" for c in (failure.value.causes or [])]


async def test_rules_are_evaluated_with_their_messages_at_their_nodes(sim: KubeSim) -> None:
    await sim.api.create(WIDGETS, widget("ok", min=1, max=2, mode={"a": "x"}, ports=[2000],
                                         weights={"w": 1}), "default")
    assert await refused(sim, widget("range", min=3, max=2)) == [
        'spec: Invalid value: "object": min must not exceed max']
    assert await refused(sim, widget("both", min=1, max=2, mode={"a": "x", "b": "y"})) == [
        'spec.mode: Invalid value: "object": exactly one of the fields in [a b] must be set']
    assert await refused(sim, widget("port", min=1, max=2, ports=[2000, 80])) == [
        'spec.ports[1]: Invalid value: "integer": failed rule: self > 1024']
    assert await refused(sim, widget("weight", min=1, max=2, weights={"w": -1})) == [
        'spec.weights[w]: Invalid value: "integer": weights are not negative']
    missing = await refused(sim, widget("missing", min=1))
    assert len(missing) == 1 and missing[0].startswith('spec: Invalid value: "object": rule') and "max" in missing[0]


async def test_transition_rules_apply_on_update_only(sim: KubeSim) -> None:
    created = await sim.api.create(WIDGETS, widget("w", min=1, max=2, mode={"a": "x"}), "default")
    created["spec"]["mode"] = {"b": "y"}
    assert await refused(sim, created, update=True) == ['spec.mode: Invalid value: "object": mode is immutable']
    current = await sim.api.get(WIDGETS, "w", "default")
    current["spec"]["mode"] = {"a": "z"}
    updated = await sim.api.update(WIDGETS, current)
    assert updated["spec"]["mode"] == {"a": "z"}


async def test_a_rule_that_does_not_compile_refuses_the_crd(tmp_path: Path) -> None:
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as server:
        with pytest.raises(ApiError) as failure:
            await server.api.create(CRDS, crd("self.min <= ("))
        assert failure.value.code == 422
        [cause] = (failure.value.causes or [])
        assert cause["field"] == ("spec.versions[0].schema.openAPIV3Schema.properties[spec]"
                                  ".x-kubernetes-validations[0].rule")
        assert "compilation failed" in cause["message"]
