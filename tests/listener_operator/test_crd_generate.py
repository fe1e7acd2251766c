"""The generated CRDs are structural, valid apiextensions/v1 objects, and accept what the models accept."""

from __future__ import annotations

import argparse
import io
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel

from listener_operator.crd import command
from listener_operator.crd.generate import (
    SchemaConversionError,
    all_crds,
    crds_yaml,
    listener_class_crd,
    listener_crd,
    pod_listeners_crd,
    structural_schema,
)

FORBIDDEN_KEYS = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "title", "definitions"}


def structural_violations(node: dict[str, Any], path: str = "") -> list[str]:
    """Kubernetes' structural-schema rules that matter for generated schemas."""
    problems: list[str] = []
    free_form = node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string")
    if "type" not in node and not free_form:
        problems.append(f"{path or '<root>'}: no type")
    for key in FORBIDDEN_KEYS & node.keys():
        problems.append(f"{path}: forbidden key {key}")
    if "default" in node and node["default"] is None:
        problems.append(f"{path}: default null")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: both properties and additionalProperties")
    if node.get("type") == "object" and not ("properties" in node or "additionalProperties" in node or free_form):
        # an object without any structure is only allowed for the root metadata
        if not path.endswith(".metadata"):
            problems.append(f"{path}: object without properties, additionalProperties or preserve-unknown-fields")
    if node.get("x-kubernetes-list-type") == "map":
        required = set((node.get("items") or {}).get("required", []))
        for key in node.get("x-kubernetes-list-map-keys", []):
            if key not in required:
                problems.append(f"{path}: list-map key {key} not required")
    for name in node.get("required", []):
        if name not in node.get("properties", {}):
            problems.append(f"{path}: required {name} is not a property")
    for name, child in node.get("properties", {}).items():
        problems += structural_violations(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        problems += structural_violations(node["items"], f"{path}[]")
    elif "items" in node:
        problems.append(f"{path}: items must be one schema")
    if isinstance(node.get("additionalProperties"), dict):
        problems += structural_violations(node["additionalProperties"], f"{path}{{}}")
    return problems


def root_schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def as_jsonschema(node: Any) -> Any:
    """OpenAPI v3 -> JSON Schema for validating example objects."""
    if isinstance(node, list):
        return [as_jsonschema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: as_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if "properties" in node:
        out["properties"] = {k: as_jsonschema(v) for k, v in node["properties"].items()}
    if node.get("nullable") and "type" in node:
        out["type"] = [node["type"], "null"]
    if node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
        out = {}
    return out


def validate_object(crd: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(as_jsonschema(root_schema(crd)))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["spec"]["names"]["kind"])
def test_schema_is_structural(crd: dict[str, Any]) -> None:
    assert structural_violations(root_schema(crd)) == []


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["spec"]["names"]["kind"])
def test_crd_is_a_valid_apiextensions_v1_object(crd: dict[str, Any]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(crd, "1.33", strict=True)  # raises ValidationError on failure


def test_crd_identity_and_scope() -> None:
    names = {crd["metadata"]["name"]: crd["spec"]["scope"] for crd in all_crds()}
    assert names == {
        "listenerclasses.listeners.stackable.tech": "Cluster",
        "listeners.listeners.stackable.tech": "Namespaced",
        "podlisteners.listeners.stackable.tech": "Namespaced",
    }
    for crd in all_crds():
        (version,) = crd["spec"]["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert crd["spec"]["group"] == "listeners.stackable.tech"
        assert "shortNames" not in crd["spec"]["names"]


def test_only_listener_has_status_subresource() -> None:
    assert listener_crd()["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert "subresources" not in listener_class_crd()["spec"]["versions"][0]
    assert "subresources" not in pod_listeners_crd()["spec"]["versions"][0]


def test_printer_columns() -> None:
    listener_columns = listener_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["jsonPath"]) for c in listener_columns] == [
        ("Class", ".spec.className"),
        ("Service", ".status.serviceName"),
        ("Address", ".status.ingressAddresses[0].address"),
        ("Ready", '.status.conditions[?(@.type=="Ready")].status'),
        ("Reason", '.status.conditions[?(@.type=="Ready")].reason'),
        ("Age", ".metadata.creationTimestamp"),
    ]
    class_columns = listener_class_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["jsonPath"]) for c in class_columns] == [
        ("Type", ".spec.serviceType"), ("Age", ".metadata.creationTimestamp")]


def test_listener_class_schema_fields_enums_and_defaults() -> None:
    spec = root_schema(listener_class_crd())["properties"]["spec"]
    props = spec["properties"]
    assert spec["required"] == ["serviceType"]
    assert props["serviceType"]["enum"] == ["NodePort", "LoadBalancer", "ClusterIP"]
    assert props["preferredAddressType"]["enum"] == ["Hostname", "IP", "HostnameConservative"]
    assert props["preferredAddressType"]["default"] == "HostnameConservative"
    assert props["serviceExternalTrafficPolicy"]["enum"] == ["Cluster", "Local"]
    assert props["serviceExternalTrafficPolicy"]["nullable"] is True
    assert "default" not in props["serviceExternalTrafficPolicy"]
    assert props["loadBalancerAllocateNodePorts"]["default"] is True
    assert props["loadBalancerClass"] == {**props["loadBalancerClass"], "type": "string", "nullable": True}
    assert props["pinnedNodePorts"]["default"] is False
    assert props["serviceAnnotations"]["default"] == {}
    assert props["serviceAnnotations"]["additionalProperties"] == {"type": "string"}
    assert props["serviceOverrides"]["x-kubernetes-preserve-unknown-fields"] is True
    assert props["serviceOverrides"]["default"] == {"apiVersion": "v1", "kind": "Service", "metadata": {}}
    # truthful description of pinning (behaviour.md "Pinning described truthfully")
    assert "node affinity" in props["pinnedNodePorts"]["description"]
    assert "selected-node" not in props["pinnedNodePorts"]["description"]


def test_listener_schema_fields() -> None:
    root = root_schema(listener_crd())
    spec, status = root["properties"]["spec"]["properties"], root["properties"]["status"]["properties"]
    assert set(spec) == {"className", "extraPodSelectorLabels", "ports", "publishNotReadyAddresses",
                         "objectOverrides"}
    assert spec["publishNotReadyAddresses"]["default"] is True
    assert spec["objectOverrides"]["items"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    port = spec["ports"]["items"]
    assert port["required"] == ["name", "port"]
    assert port["properties"]["port"]["format"] == "int32"
    assert set(status) == {"serviceName", "ingressAddresses", "nodePorts", "conditions", "observedGeneration"}
    assert status["ingressAddresses"]["items"]["properties"]["addressType"]["enum"] == ["Hostname", "IP"]
    assert status["nodePorts"]["additionalProperties"]["format"] == "int32"
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    assert status["observedGeneration"]["format"] == "int64"


def test_pod_listeners_schema_fields() -> None:
    spec = root_schema(pod_listeners_crd())["properties"]["spec"]
    assert spec["required"] == ["listeners"]
    entry = spec["properties"]["listeners"]["additionalProperties"]
    assert entry["properties"]["scope"]["enum"] == ["Node", "Cluster"]
    assert entry["required"] == ["scope"]


def test_descriptions_are_single_line_and_present() -> None:
    def walk(node: dict[str, Any], path: str) -> None:
        if path.count(".") > 1 and not path.endswith(("apiVersion", "kind", "metadata")):
            assert node.get("description"), path
        assert "\n" not in node.get("description", ""), path
        for name, child in node.get("properties", {}).items():
            walk(child, f"{path}.{name}")
    for crd in all_crds():
        walk(root_schema(crd), crd["spec"]["names"]["kind"])


EXAMPLES = [
    (listener_class_crd(), {"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "ListenerClass",
                            "metadata": {"name": "lb"},
                            "spec": {"serviceType": "LoadBalancer", "loadBalancerClass": None,
                                     "serviceExternalTrafficPolicy": "Local",
                                     "serviceOverrides": {"spec": {"sessionAffinity": "ClientIP"}}}}),
    (listener_crd(), {"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
                      "metadata": {"name": "web", "namespace": "default"},
                      "spec": {"className": "external-stable", "ports": [{"name": "http", "port": 80}],
                               "objectOverrides": [{"apiVersion": "v1", "kind": "Service"}]},
                      "status": {"serviceName": "web", "nodePorts": {"http": 30080},
                                 "ingressAddresses": [{"address": "10.0.0.1", "addressType": "IP",
                                                       "ports": {"http": 30080}}]}}),
    (pod_listeners_crd(), {"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "PodListeners",
                           "metadata": {"name": "pod-1"},
                           "spec": {"listeners": {"vol": {"scope": "Node", "ingressAddresses": None}}}}),
]


@pytest.mark.parametrize(("crd", "obj"), EXAMPLES, ids=["ListenerClass", "Listener", "PodListeners"])
def test_valid_objects_pass_the_schema(crd: dict[str, Any], obj: dict[str, Any]) -> None:
    assert validate_object(crd, obj) == []


def test_invalid_objects_are_rejected_by_the_schema() -> None:
    bad_port = {"apiVersion": "x", "kind": "Listener", "spec": {"ports": [{"name": "http", "port": "eighty"}]}}
    assert any("eighty" in p for p in validate_object(listener_crd(), bad_port))
    bad_type = {"apiVersion": "x", "kind": "ListenerClass", "spec": {"serviceType": "ExternalName"}}
    assert any("ExternalName" in p for p in validate_object(listener_class_crd(), bad_type))
    no_spec = {"apiVersion": "x", "kind": "ListenerClass"}
    assert any("spec" in p for p in validate_object(listener_class_crd(), no_spec))
    bad_scope = {"spec": {"listeners": {"v": {"scope": "Pod"}}}}
    assert any("Pod" in p for p in validate_object(pod_listeners_crd(), bad_scope))


def test_conversion_rejects_unions() -> None:
    class Union(BaseModel):
        value: int | str

    with pytest.raises(SchemaConversionError, match="unions"):
        structural_schema(Union)


def test_yaml_round_trips_to_the_same_objects() -> None:
    assert list(yaml.safe_load_all(crds_yaml())) == all_crds()


async def test_crd_command_prints_yaml(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    out = io.StringIO()
    with redirect_stdout(out):
        assert await command.run(parser.parse_args([])) == 0
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out.getvalue())] == [
        "listenerclasses.listeners.stackable.tech", "listeners.listeners.stackable.tech",
        "podlisteners.listeners.stackable.tech"]
    target = tmp_path / "crds.yaml"
    assert await command.run(parser.parse_args(["-o", str(target)])) == 0
    assert target.read_text() == out.getvalue()


def test_structural_checker_flags_raw_pydantic_schemas() -> None:
    from listener_operator.crd.models import ListenerSpec

    raw = ListenerSpec.model_json_schema(by_alias=True)
    problems = structural_violations(raw)
    assert any("forbidden key anyOf" in p for p in problems)
    assert any("forbidden key title" in p for p in problems)
