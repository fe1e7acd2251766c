"""CRD schema handling: the causes, defaults and pruning a client of the apiserver would observe."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubesim.gofmt import go_float, go_value
from kubesim.schema.crd import structural_causes
from kubesim.schema.defaulting import apply_defaults
from kubesim.schema.pruning import prune, unknown_fields
from kubesim.schema.validation import validate
from kubesim.ssa.listtypes import ATOMIC, ListType, is_atomic_map
from kubesim.ssa.schema_lists import list_keys_from_schema


def structural_errors(crd: dict[str, Any]) -> list[str]:
    """A CRD's problems as ``field: message`` lines, as kubectl prints a 422's causes."""
    return [f"{c['field']}: {c['message']}" for c in structural_causes(crd)]


def root(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A CRD root schema whose ``spec`` is the given schema."""
    return {"type": "object", "properties": {"spec": spec, **extra}}


def obj(spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": spec}


def field(name: str, schema: dict[str, Any], *, required: bool = False) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "object", "properties": {name: schema}}
    if required:
        s["required"] = [name]
    return root(s)


SERVICE_TYPES = ["NodePort", "LoadBalancer", "ClusterIP"]

# (case id, schema, object spec, expected causes)
VALIDATION_CASES: list[tuple[str, dict[str, Any], Any, list[dict[str, str]]]] = [
    (
        "type integer given string",
        root({"type": "object", "properties": {"ports": {"type": "array", "items": {"type": "object", "properties": {"port": {"type": "integer"}}}}}}),
        {"ports": [{"port": "eighty"}]},
        [
            {
                "reason": "FieldValueTypeInvalid",
                "message": 'Invalid value: "string": spec.ports[0].port in body must be of type integer: "string"',
                "field": "spec.ports[0].port",
            }
        ],
    ),
    (
        "integral float accepted as integer",
        field("n", {"type": "integer"}),
        {"n": 3.0},
        [],
    ),
    (
        "fractional float rejected as integer",
        field("n", {"type": "integer"}),
        {"n": 3.5},
        [{"reason": "FieldValueTypeInvalid", "message": 'Invalid value: "number": spec.n in body must be of type integer: "number"', "field": "spec.n"}],
    ),
    (
        "boolean is not an integer",
        field("n", {"type": "integer"}),
        {"n": True},
        [{"reason": "FieldValueTypeInvalid", "message": 'Invalid value: "boolean": spec.n in body must be of type integer: "boolean"', "field": "spec.n"}],
    ),
    (
        "integer accepted as number",
        field("n", {"type": "number"}),
        {"n": 3},
        [],
    ),
    (
        "string given object",
        field("s", {"type": "string"}),
        {"s": {"a": 1}},
        [{"reason": "FieldValueTypeInvalid", "message": 'Invalid value: "object": spec.s in body must be of type string: "object"', "field": "spec.s"}],
    ),
    (
        "array given string",
        field("a", {"type": "array", "items": {"type": "string"}}),
        {"a": "x"},
        [{"reason": "FieldValueTypeInvalid", "message": 'Invalid value: "string": spec.a in body must be of type array: "string"', "field": "spec.a"}],
    ),
    (
        "boolean given string",
        field("b", {"type": "boolean"}),
        {"b": "true"},
        [{"reason": "FieldValueTypeInvalid", "message": 'Invalid value: "string": spec.b in body must be of type boolean: "string"', "field": "spec.b"}],
    ),
    (
        "required missing",
        field("name", {"type": "string"}, required=True),
        {},
        [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.name"}],
    ),
    (
        "required spec at root",
        {"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object"}}},
        None,
        [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec"}],
    ),
    (
        "enum violated",
        field("type", {"type": "string", "enum": SERVICE_TYPES}),
        {"type": "Foo"},
        [
            {
                "reason": "FieldValueNotSupported",
                "message": 'Unsupported value: "Foo": supported values: "NodePort", "LoadBalancer", "ClusterIP"',
                "field": "spec.type",
            }
        ],
    ),
    (
        "enum of integers",
        field("n", {"type": "integer", "enum": [1, 2]}),
        {"n": 3},
        [{"reason": "FieldValueNotSupported", "message": 'Unsupported value: 3: supported values: "1", "2"', "field": "spec.n"}],
    ),
    ("enum satisfied", field("type", {"type": "string", "enum": SERVICE_TYPES}), {"type": "ClusterIP"}, []),
    (
        "null for non-nullable",
        field("s", {"type": "string"}),
        {"s": None},
        [{"reason": "FieldValueTypeInvalid", "message": 'Invalid value: "null": spec.s in body must be of type string: "null"', "field": "spec.s"}],
    ),
    ("null for nullable", field("s", {"type": "string", "nullable": True, "enum": ["a"]}), {"s": None}, []),
    (
        "map values validated via additionalProperties",
        field("labels", {"type": "object", "additionalProperties": {"type": "string"}}),
        {"labels": {"a": "x", "b": 1}},
        [{"reason": "FieldValueTypeInvalid", "message": 'Invalid value: "integer": spec.labels.b in body must be of type string: "integer"', "field": "spec.labels.b"}],
    ),
    (
        "minimum",
        field("port", {"type": "integer", "minimum": 1, "maximum": 65535}),
        {"port": 0},
        [{"reason": "FieldValueInvalid", "message": "Invalid value: 0: spec.port in body should be greater than or equal to 1", "field": "spec.port"}],
    ),
    (
        "maximum",
        field("port", {"type": "integer", "minimum": 1, "maximum": 65535}),
        {"port": 70000},
        [{"reason": "FieldValueInvalid", "message": "Invalid value: 70000: spec.port in body should be less than or equal to 65535", "field": "spec.port"}],
    ),
    (
        "exclusive minimum",
        field("r", {"type": "number", "minimum": 0.5, "exclusiveMinimum": True}),
        {"r": 0.5},
        [{"reason": "FieldValueInvalid", "message": "Invalid value: 0.5: spec.r in body should be greater than 0.5", "field": "spec.r"}],
    ),
    (
        "multipleOf",
        field("n", {"type": "integer", "multipleOf": 5}),
        {"n": 7},
        [{"reason": "FieldValueInvalid", "message": "Invalid value: 7: spec.n in body should be a multiple of 5", "field": "spec.n"}],
    ),
    (
        "minLength",
        field("s", {"type": "string", "minLength": 3}),
        {"s": "ab"},
        [{"reason": "FieldValueInvalid", "message": 'Invalid value: "ab": spec.s in body should be at least 3 chars long', "field": "spec.s"}],
    ),
    (
        "maxLength counts characters",
        field("s", {"type": "string", "maxLength": 3}),
        {"s": "äöüß"},
        [{"reason": "FieldValueTooLong", "message": "Too long: may not be more than 3 bytes", "field": "spec.s"}],
    ),
    ("maxLength ok", field("s", {"type": "string", "maxLength": 3}), {"s": "äöü"}, []),
    (
        "pattern",
        field("s", {"type": "string", "pattern": "^[a-z]+$"}),
        {"s": "A1"},
        [{"reason": "FieldValueInvalid", "message": "Invalid value: \"A1\": spec.s in body should match '^[a-z]+$'", "field": "spec.s"}],
    ),
    (
        "minItems",
        field("a", {"type": "array", "items": {"type": "string"}, "minItems": 1}),
        {"a": []},
        [{"reason": "FieldValueInvalid", "message": "Invalid value: 0: spec.a in body should have at least 1 items", "field": "spec.a"}],
    ),
    (
        "maxItems",
        field("a", {"type": "array", "items": {"type": "string"}, "maxItems": 1}),
        {"a": ["x", "y"]},
        [{"reason": "FieldValueTooMany", "message": "Too many: 2: must have at most 1 items", "field": "spec.a"}],
    ),
    (
        "int32 range",
        field("p", {"type": "integer", "format": "int32"}),
        {"p": 2**31},
        [{"reason": "FieldValueInvalid", "message": 'Invalid value: "": Checked value must be of type integer with format int32 in spec.p', "field": "<nil>"}],
    ),
    ("int32 in range", field("p", {"type": "integer", "format": "int32"}), {"p": 2**31 - 1}, []),
    (
        "int64 range",
        field("p", {"type": "integer", "format": "int64"}),
        {"p": -(2**63) - 1},
        [{"reason": "FieldValueInvalid", "message": 'Invalid value: "": Checked value must be of type integer with format int64 in spec.p', "field": "<nil>"}],
    ),
    (
        "string format date-time",
        field("t", {"type": "string", "format": "date-time"}),
        {"t": "yesterday"},
        [{"reason": "FieldValueTypeInvalid", "message": 'Invalid value: "yesterday": spec.t in body must be of type date-time: "yesterday"', "field": "spec.t"}],
    ),
    ("string format date-time ok", field("t", {"type": "string", "format": "date-time"}), {"t": "2024-01-02T03:04:05Z"}, []),
    ("unknown fields are not errors", field("a", {"type": "string"}), {"zzz": 1}, []),
    (
        "preserve-unknown-fields still validates declared fields",
        root({"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"n": {"type": "integer"}}}),
        {"n": "x", "other": {"anything": True}},
        [{"reason": "FieldValueTypeInvalid", "message": 'Invalid value: "string": spec.n in body must be of type integer: "string"', "field": "spec.n"}],
    ),
    ("int-or-string integer", field("p", {"x-kubernetes-int-or-string": True}), {"p": 8080}, []),
    ("int-or-string string", field("p", {"x-kubernetes-int-or-string": True}), {"p": "http"}, []),
    (
        "int-or-string boolean",
        field("p", {"x-kubernetes-int-or-string": True}),
        {"p": True},
        [{"reason": "FieldValueTypeInvalid", "message": 'Invalid value: "boolean": spec.p in body must be of type integer,string: "boolean"', "field": "spec.p"}],
    ),
    (
        "int-or-string with anyOf pattern",
        field("p", {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}),
        {"p": "x"},
        [],
    ),
    (
        "list-type set duplicate",
        field("names", {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}),
        {"names": ["a", "b", "a"]},
        [{"reason": "FieldValueDuplicate", "message": 'Duplicate value: "a"', "field": "spec.names[2]"}],
    ),
    (
        "list-type set reports each duplicate value once",
        field("names", {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}),
        {"names": ["a", "a", "a", "b", "b"]},
        [
            {"reason": "FieldValueDuplicate", "message": 'Duplicate value: "a"', "field": "spec.names[1]"},
            {"reason": "FieldValueDuplicate", "message": 'Duplicate value: "b"', "field": "spec.names[4]"},
        ],
    ),
    (
        "list-type map item that is not an object",
        field("l", {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": True}, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"]}),
        {"l": [{"k": "a"}, "oops"]},
        [{"reason": "FieldValueInvalid", "message": 'Invalid value: "oops": must be an object for an array of list-type map', "field": "spec.l[1]"}],
    ),
    (
        "list-type atomic allows duplicates",
        field("names", {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"}),
        {"names": ["a", "a"]},
        [],
    ),
    (
        "list-type map duplicate key",
        field(
            "ports",
            {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}},
            },
        ),
        {"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}, {"name": "http", "port": 8080}]},
        [{"reason": "FieldValueDuplicate", "message": 'Duplicate value: map[string]interface {}{"name":"http"}', "field": "spec.ports[2]"}],
    ),
    (
        "list-type map with two keys is unique per pair",
        field(
            "ports",
            {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port", "protocol"],
                "items": {"type": "object", "properties": {"port": {"type": "integer"}, "protocol": {"type": "string"}}},
            },
        ),
        {"ports": [{"port": 53, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]},
        [],
    ),
    (
        "embedded resource needs apiVersion and kind",
        field("template", {"type": "object", "x-kubernetes-embedded-resource": True, "x-kubernetes-preserve-unknown-fields": True}),
        {"template": {"metadata": {"name": "x"}}},
        [
            {"reason": "FieldValueRequired", "message": "Required value: must not be empty", "field": "spec.template.apiVersion"},
            {"reason": "FieldValueRequired", "message": "Required value: must not be empty", "field": "spec.template.kind"},
        ],
    ),
    (
        "embedded resource complete",
        field("template", {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {"spec": {"type": "object"}}}),
        {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {}}},
        [],
    ),
    (
        "allOf adds constraints",
        field("n", {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]}),
        {"n": 9},
        [
            {"reason": "FieldValueInvalid", "message": "Invalid value: 9: spec.n in body should be less than or equal to 5", "field": "spec.n"},
            {"reason": "FieldValueInvalid", "message": 'Invalid value: "": "spec.n" must validate all the schemas (allOf)', "field": "<nil>"},
        ],
    ),
    (
        "anyOf none matches",
        field("s", {"type": "string", "anyOf": [{"enum": ["a"]}, {"pattern": "^b"}]}),
        {"s": "c"},
        [
            {"reason": "FieldValueInvalid", "message": 'Invalid value: "": "spec.s" must validate at least one schema (anyOf)', "field": "<nil>"},
            {"reason": "FieldValueNotSupported", "message": 'Unsupported value: "c": supported values: "a"', "field": "spec.s"},
        ],
    ),
    ("anyOf one matches", field("s", {"type": "string", "anyOf": [{"enum": ["a"]}, {"pattern": "^b"}]}), {"s": "bx"}, []),
    (
        "oneOf two match",
        field("s", {"type": "string", "oneOf": [{"pattern": "^a"}, {"pattern": "b$"}]}),
        {"s": "ab"},
        [{"reason": "FieldValueInvalid", "message": 'Invalid value: "": "spec.s" must validate one and only one schema (oneOf). Found 2 valid alternatives', "field": "<nil>"}],
    ),
    ("oneOf exactly one", field("s", {"type": "string", "oneOf": [{"pattern": "^a"}, {"pattern": "b$"}]}), {"s": "a"}, []),
    (
        "oneOf of required fields",
        field("x", {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}),
        {"x": {}},
        [
            {"reason": "FieldValueInvalid", "message": 'Invalid value: "": "spec.x" must validate one and only one schema (oneOf). Found none valid', "field": "<nil>"},
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.x.a"},
        ],
    ),
    (
        "not",
        field("s", {"type": "string", "not": {"enum": ["forbidden"]}}),
        {"s": "forbidden"},
        [{"reason": "FieldValueInvalid", "message": 'Invalid value: "": "spec.s" must not validate the schema (not)', "field": "<nil>"}],
    ),
]


@pytest.mark.parametrize(("schema", "spec", "expected"), [c[1:] for c in VALIDATION_CASES], ids=[c[0] for c in VALIDATION_CASES])
def test_validate(schema: dict[str, Any], spec: Any, expected: list[dict[str, str]]) -> None:
    o = obj(spec)
    if spec is None:
        del o["spec"]
    assert validate(o, schema) == expected


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (100.0, "100"),
        (1.5, "1.5"),
        (3.0, "3"),
        (1e6, "1e+06"),
        (123456789.0, "1.23456789e+08"),
        (0.0001, "0.0001"),
        (1e-5, "1e-05"),
        (-2.5, "-2.5"),
        (0.0, "0"),
    ],
)
def test_go_float_matches_go_percent_v(value: float, text: str) -> None:
    assert go_float(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("a\"b", '"a\\"b"'),
        (None, '"null"'),
        (True, "true"),
        (7, "7"),
        ({"b": 1, "a": [1, "x", None]}, 'map[string]interface {}{"a":[]interface {}{1, "x", interface {}(nil)}, "b":1}'),
    ],
)
def test_go_value_renders_bad_values_like_the_apiserver(value: object, text: str) -> None:
    assert go_value(value) == text


def test_integer_bounds_print_as_integers_float_bounds_as_go_floats() -> None:
    causes = validate(obj({"n": 2000000, "r": 2e6}), root({"type": "object", "properties": {
        "n": {"type": "integer", "maximum": 1000000},
        "r": {"type": "number", "maximum": 1e6},
    }}))
    assert [c["message"] for c in causes] == [
        "Invalid value: 2000000: spec.n in body should be less than or equal to 1000000",
        "Invalid value: 2e+06: spec.r in body should be less than or equal to 1e+06",
    ]


def test_validate_root_allows_api_version_kind_metadata_and_checks_metadata_name() -> None:
    schema = {
        "type": "object",
        "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}}},
    }
    ok = {"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "abc", "labels": {"x": "y"}}}
    assert validate(ok, schema) == []
    too_long = {"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "abcd"}}
    assert validate(too_long, schema) == [
        {"reason": "FieldValueTooLong", "message": "Too long: may not be more than 3 bytes", "field": "metadata.name"}
    ]


def test_validate_root_path_prefixes_fields() -> None:
    causes = validate({"port": "x"}, {"type": "object", "properties": {"port": {"type": "integer"}}}, root_path="spec")
    assert [c["field"] for c in causes] == ["spec.port"]
    assert "spec.port in body must be of type integer" in causes[0]["message"]


def test_validate_does_not_modify_input() -> None:
    o = obj({"a": [1, 1]})
    before = copy.deepcopy(o)
    validate(o, field("a", {"type": "array", "items": {"type": "integer"}, "x-kubernetes-list-type": "set"}))
    assert o == before


# --------------------------------------------------------------------------------------------------------------
# defaulting

DEFAULT_CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ("absent field defaulted", field("type", {"type": "string", "default": "ClusterIP"}), {}, {"type": "ClusterIP"}),
    ("present field kept", field("type", {"type": "string", "default": "ClusterIP"}), {"type": "NodePort"}, {"type": "NodePort"}),
    ("false is a value", field("flag", {"type": "boolean", "default": True}), {"flag": False}, {"flag": False}),
    ("non-nullable null defaulted", field("type", {"type": "string", "default": "ClusterIP"}), {"type": None}, {"type": "ClusterIP"}),
    ("nullable null kept", field("type", {"type": "string", "nullable": True, "default": "ClusterIP"}), {"type": None}, {"type": None}),
    ("non-nullable null without default dropped", field("type", {"type": "string"}), {"type": None}, {}),
    ("nullable null without default kept", field("type", {"type": "string", "nullable": True}), {"type": None}, {"type": None}),
    (
        "defaults inside a defaulted object",
        field("opts", {"type": "object", "default": {}, "properties": {"a": {"type": "integer", "default": 1}, "b": {"type": "string"}}}),
        {},
        {"opts": {"a": 1}},
    ),
    (
        "missing parent object is not created",
        field("opts", {"type": "object", "properties": {"a": {"type": "integer", "default": 1}}}),
        {},
        {},
    ),
    (
        "defaults in list items",
        field("ports", {"type": "array", "items": {"type": "object", "properties": {"protocol": {"type": "string", "default": "TCP"}, "port": {"type": "integer"}}}}),
        {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]},
        {"ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]},
    ),
    (
        "defaults in map values",
        field("m", {"type": "object", "additionalProperties": {"type": "object", "properties": {"x": {"type": "integer", "default": 7}}}}),
        {"m": {"a": {}, "b": {"x": 1}}},
        {"m": {"a": {"x": 7}, "b": {"x": 1}}},
    ),
    (
        "null map value gets the value default",
        field("m", {"type": "object", "additionalProperties": {"type": "string", "default": "d"}}),
        {"m": {"a": None}},
        {"m": {"a": "d"}},
    ),
    (
        "defaults inside a defaulted map value",
        field("m", {"type": "object", "additionalProperties": {"type": "object", "default": {}, "properties": {"x": {"type": "integer", "default": 7}}}}),
        {"m": {"a": None}},
        {"m": {"a": {"x": 7}}},
    ),
    (
        "null list item gets the item default and its nested defaults",
        field("l", {"type": "array", "items": {"type": "object", "default": {"a": 1}, "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 2}}}}),
        {"l": [None, {"a": 5}]},
        {"l": [{"a": 1, "b": 2}, {"a": 5, "b": 2}]},
    ),
    (
        "nullable list item stays null",
        field("l", {"type": "array", "items": {"type": "string", "nullable": True, "default": "x"}}),
        {"l": [None]},
        {"l": [None]},
    ),
    (
        "default value is copied, not shared",
        field("l", {"type": "array", "items": {"type": "string"}, "default": ["x"]}),
        {},
        {"l": ["x"]},
    ),
]


@pytest.mark.parametrize(("schema", "spec", "expected"), [c[1:] for c in DEFAULT_CASES], ids=[c[0] for c in DEFAULT_CASES])
def test_apply_defaults(schema: dict[str, Any], spec: dict[str, Any], expected: dict[str, Any]) -> None:
    o = obj(spec)
    before = copy.deepcopy(o)
    result = apply_defaults(o, schema)
    assert result["spec"] == expected
    assert o == before, "input must not be modified"
    assert result["metadata"] == {"name": "t"}


def test_defaulted_values_are_independent_copies() -> None:
    schema = field("l", {"type": "array", "items": {"type": "string"}, "default": ["x"]})
    first = apply_defaults(obj({}), schema)
    first["spec"]["l"].append("y")
    assert apply_defaults(obj({}), schema)["spec"]["l"] == ["x"]


def test_defaulting_top_level_spec() -> None:
    schema = root({"type": "object", "default": {}, "properties": {"replicas": {"type": "integer", "default": 1}}})
    o = {"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n"}}
    assert apply_defaults(o, schema)["spec"] == {"replicas": 1}


# --------------------------------------------------------------------------------------------------------------
# pruning

PRUNE_SCHEMA = root(
    {
        "type": "object",
        "properties": {
            "known": {"type": "string"},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"typed": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
            "template": {"type": "object", "x-kubernetes-embedded-resource": True, "x-kubernetes-preserve-unknown-fields": True},
        },
    },
    status={"type": "object", "properties": {"phase": {"type": "string"}}},
)


def test_prune_removes_undeclared_fields_and_keeps_declared() -> None:
    o = {
        "apiVersion": "a/v1",
        "kind": "K",
        "metadata": {"name": "n", "labels": {"a": "b"}, "whatever": 1},
        "extra": True,
        "spec": {
            "known": "x",
            "unknown": "y",
            "free": {"anything": {"deep": 1}, "typed": {"a": 1, "b": 2}},
            "labels": {"any.key/x": "v"},
            "items": [{"name": "a", "bogus": 1}, {"name": "b"}],
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "bogus": 1}, "spec": {"x": 1}},
        },
        "status": {"phase": "Ready", "junk": 1},
    }
    before = copy.deepcopy(o)
    result = prune(o, PRUNE_SCHEMA)
    assert o == before, "input must not be modified"
    assert result == {
        "apiVersion": "a/v1",
        "kind": "K",
        "metadata": {"name": "n", "labels": {"a": "b"}, "whatever": 1},
        "spec": {
            "known": "x",
            "free": {"anything": {"deep": 1}, "typed": {"a": 1}},
            "labels": {"any.key/x": "v"},
            "items": [{"name": "a"}, {"name": "b"}],
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}},
        },
        "status": {"phase": "Ready"},
    }
    assert unknown_fields(o, PRUNE_SCHEMA) == [
        "extra",
        "spec.unknown",
        "spec.free.typed.b",
        "spec.items[0].bogus",
        "spec.template.metadata.bogus",
        "status.junk",
    ]


def test_prune_root_preserve_unknown_fields_keeps_everything() -> None:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    o = {"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n"}, "spec": {"x": 1}, "other": [1]}
    assert prune(o, schema) == o
    assert unknown_fields(o, schema) == []


def test_prune_under_preserve_unknown_fields_list_items_keep_unknown_fields() -> None:
    schema = root(
        {
            "type": "array",
            "x-kubernetes-preserve-unknown-fields": True,
            "items": {"type": "object", "properties": {"a": {"type": "object", "properties": {"x": {"type": "integer"}}}}},
        }
    )
    o = obj([{"a": {"x": 1, "y": 2}, "other": 3}])
    assert prune(o, schema)["spec"] == [{"a": {"x": 1}, "other": 3}]


def test_prune_list_without_item_schema_empties_objects() -> None:
    schema = field("l", {"type": "array"})
    assert prune(obj({"l": [{"a": 1}, 2]}), schema)["spec"] == {"l": [{}, 2]}


def test_prune_root_metadata_is_left_to_the_server_even_if_declared() -> None:
    schema = {"type": "object", "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string"}}}}}
    o = {"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n", "labels": {"a": "b"}}}
    assert prune(o, schema) == o


# --------------------------------------------------------------------------------------------------------------
# list keys

LIST_SCHEMA = root(
    {
        "type": "object",
        "properties": {
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port", "protocol"],
                "items": {
                    "type": "object",
                    "properties": {
                        "port": {"type": "integer"},
                        "protocol": {"type": "string"},
                        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                    },
                },
            },
            "plain": {"type": "array", "items": {"type": "string"}},
            "byName": {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            },
        },
    }
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("spec", "ports"), ListType("map", ("port", "protocol"))),
        (("spec", "ports", "tags"), ListType("set")),
        (("spec", "plain"), ATOMIC),
        (("spec", "byName", "anything"), ListType("set")),
        (("spec", "missing"), ATOMIC),
        (("status", "x"), ATOMIC),
        (("metadata", "finalizers"), ListType("set")),
        (("metadata", "ownerReferences"), ListType("map", ("uid",))),
    ],
)
def test_list_keys_from_schema(path: tuple[str, ...], expected: ListType) -> None:
    assert list_keys_from_schema(LIST_SCHEMA)(path) == expected


# --------------------------------------------------------------------------------------------------------------
# structural checks


def crd(schema: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "things", "kind": "Thing"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


P = "spec.versions[0].schema.openAPIV3Schema"

STRUCTURAL_CASES: list[tuple[str, Any, list[str]]] = [
    (
        "structural schema accepted",
        root(
            {
                "type": "object",
                "required": ["port"],
                "properties": {
                    "port": {"type": "integer", "format": "int32", "default": 80, "minimum": 1},
                    "target": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "anything": {"x-kubernetes-preserve-unknown-fields": True},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "kind": {"type": "string", "oneOf": [{"enum": ["a"]}, {"enum": ["b"]}]},
                    "ports": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
                    },
                    "tmpl": {"type": "object", "x-kubernetes-embedded-resource": True, "x-kubernetes-preserve-unknown-fields": True},
                },
            },
            metadata={"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}},
        ),
        [],
    ),
    ("schema missing", None, [f"{P}: Required value: schemas are required"]),
    ("root not object", {"type": "string"}, [f'{P}.type: Invalid value: "string": must be object at the root']),
    (
        "field without type",
        root({"type": "object", "properties": {"a": {"description": "x"}}}),
        [f"{P}.properties[spec].properties[a].type: Required value: must not be empty for specified object fields"],
    ),
    (
        "items without type",
        root({"type": "object", "properties": {"a": {"type": "array", "items": {}}}}),
        [f"{P}.properties[spec].properties[a].items.type: Required value: must not be empty for specified array items"],
    ),
    (
        "array without items",
        root({"type": "object", "properties": {"a": {"type": "array"}}}),
        [f"{P}.properties[spec].properties[a].items: Required value: must be specified"],
    ),
    ("$ref", root({"type": "object", "$ref": "#/definitions/x"}), [f"{P}.properties[spec].$ref: Forbidden: $ref is not supported"]),
    (
        "bad type name",
        root({"type": "map"}),
        [f'{P}.properties[spec].type: Unsupported value: "map": supported values: "array", "boolean", "integer", "number", "object", "string"'],
    ),
    (
        "type inside a junctor",
        root({"type": "object", "properties": {"a": {"type": "string"}}, "anyOf": [{"properties": {"a": {"type": "string"}}}]}),
        [f"{P}.properties[spec].anyOf[0].properties[a].type: Forbidden: must be empty to be structural"],
    ),
    (
        "junctor field without counterpart",
        root({"type": "object", "anyOf": [{"required": ["a"], "properties": {"b": {"minLength": 1}}}]}),
        [f"{P}.properties[spec].properties[b]: Required value: because it is defined in {P}.properties[spec].anyOf[0].properties[b]"],
    ),
    (
        "metadata beyond name",
        {"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}},
        [f"{P}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"],
    ),
    (
        "additionalProperties false",
        root({"type": "object", "additionalProperties": False}),
        [f"{P}.properties[spec].additionalProperties: Forbidden: additionalProperties cannot be set to false"],
    ),
    (
        "properties and additionalProperties",
        root({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}),
        [f"{P}.properties[spec].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"],
    ),
    (
        "uniqueItems",
        root({"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
        [f"{P}.properties[spec].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"],
    ),
    (
        "preserve-unknown-fields false",
        root({"type": "object", "x-kubernetes-preserve-unknown-fields": False}),
        [f"{P}.properties[spec].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"],
    ),
    (
        "int-or-string preserving unknown fields",
        root({"x-kubernetes-int-or-string": True, "x-kubernetes-preserve-unknown-fields": True}),
        [f"{P}.properties[spec].x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if x-kubernetes-int-or-string is true"],
    ),
    (
        "embedded resource not an object",
        root({"type": "object", "properties": {"t": {"type": "string", "x-kubernetes-embedded-resource": True, "x-kubernetes-preserve-unknown-fields": True}}}),
        [f'{P}.properties[spec].properties[t].type: Invalid value: "string": must be object if x-kubernetes-embedded-resource is true'],
    ),
    (
        "list-type map without keys",
        root({"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}}),
        [f"{P}.properties[spec].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"],
    ),
    (
        "list-type map key not required",
        root({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"], "items": {"type": "object", "properties": {"name": {"type": "string"}}}}),
        [f"{P}.properties[spec].items.properties[name].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"],
    ),
    (
        "list-type on an object",
        root({"type": "object", "x-kubernetes-list-type": "set"}),
        [f'{P}.properties[spec].type: Invalid value: "object": must be array if x-kubernetes-list-type is specified'],
    ),
    (
        "embedded resource without type or fields",
        root({"type": "object", "properties": {"t": {"x-kubernetes-embedded-resource": True}}}),
        [
            f"{P}.properties[spec].properties[t].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            f"{P}.properties[spec].properties[t].type: Required value: must be object if x-kubernetes-embedded-resource is true",
        ],
    ),
    (
        "additionalProperties at the root",
        {"type": "object", "additionalProperties": {"type": "string"}},
        [f"{P}.additionalProperties: Forbidden: must not be used at the root"],
    ),
    (
        "errors are sorted like the apiserver sorts them",
        root({"type": "object", "properties": {"b": {}, "a": {}}}),
        [
            f"{P}.properties[spec].properties[a].type: Required value: must not be empty for specified object fields",
            f"{P}.properties[spec].properties[b].type: Required value: must not be empty for specified object fields",
        ],
    ),
    (
        "nullable and default inside a junctor",
        root({"type": "string", "anyOf": [{"nullable": True}, {"default": "x"}]}),
        [
            f"{P}.properties[spec].anyOf[0].nullable: Forbidden: must be false to be structural",
            f"{P}.properties[spec].anyOf[1].default: Forbidden: must be undefined to be structural",
        ],
    ),
    (
        "list-map-keys without list-type map",
        root({"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}, "x-kubernetes-list-map-keys": ["k"]}),
        [f"{P}.properties[spec].x-kubernetes-list-type: Required value: must be map if x-kubernetes-list-map-keys is non-empty"],
    ),
    (
        "list-type map key that is not an item property",
        root({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["nope"], "items": {"type": "object", "properties": {"k": {"type": "string"}}}}),
        [f'{P}.properties[spec].x-kubernetes-list-map-keys: Invalid value: []interface {{}}{{"nope"}}: entries must all be names of item properties'],
    ),
    (
        "set of objects must be atomic",
        root({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "object", "properties": {"k": {"type": "string"}}}}),
        [f'{P}.properties[spec].items.x-kubernetes-map-type: Invalid value: "null": must be atomic as item of a list with x-kubernetes-list-type=set'],
    ),
    (
        "default in top-level metadata",
        {"type": "object", "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string", "default": "x"}}}}},
        [f"{P}.properties[metadata].properties[name].default: Forbidden: must not be set in top-level metadata"],
    ),
    (
        "nullable root",
        {"type": "object", "nullable": True},
        [f"{P}.nullable: Forbidden: nullable cannot be true at the root"],
    ),
    (
        "bad pattern",
        root({"type": "string", "pattern": "("}),
        [f'{P}.properties[spec].pattern: Invalid value: "(": must be a valid regular expression, but isn\'t: missing ), unterminated subpattern at position 0'],
    ),
    (
        "default of the wrong type",
        root({"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}}),
        [f'{P}.properties[spec].properties[n].default: Invalid value: "string": {P}.properties[spec].properties[n].default in body must be of type integer: "string"'],
    ),
    (
        "default with unknown fields",
        root({"type": "object", "properties": {"o": {"type": "object", "default": {"x": 1}, "properties": {"y": {"type": "integer"}}}}}),
        [f"{P}.properties[spec].properties[o].default: Invalid value: map[string]interface {{}}{{\"x\":1}}: must not have unknown fields"],
    ),
]


@pytest.mark.parametrize(("schema", "expected"), [c[1:] for c in STRUCTURAL_CASES], ids=[c[0] for c in STRUCTURAL_CASES])
def test_structural_errors(schema: Any, expected: list[str]) -> None:
    assert structural_errors(crd(schema)) == expected


def test_structural_errors_preserve_unknown_fields_true_at_crd_level() -> None:
    c = crd({"type": "object"})
    c["spec"]["preserveUnknownFields"] = True
    assert len(structural_errors(c)) == 1
    assert structural_errors(c)[0].startswith("spec.preserveUnknownFields: Invalid value: true")


def test_printer_columns_are_checked() -> None:
    c = crd({"type": "object"})
    c["spec"]["versions"][0]["additionalPrinterColumns"] = [
        {"name": "Ok", "type": "string", "jsonPath": ".spec.x"},
        {"name": "Bad", "type": "map", "format": "weird", "jsonPath": "spec.x", "priority": -1},
        {"type": "date"},
    ]
    col = "spec.versions[0].additionalPrinterColumns"
    assert structural_errors(c) == [
        f'{col}[1].type: Unsupported value: "map": supported values: "boolean", "date", "integer", "number", "string"',
        f'{col}[1].format: Unsupported value: "weird": supported values: "byte", "date", "date-time", "double", "float", "int32", "int64", "password"',
        f"{col}[1].priority: Invalid value: -1: must be a non-negative integer",
        f'{col}[1].JSONPath: Invalid value: "spec.x": must be a simple json path starting with .',
        f"{col}[2].name: Required value",
        f"{col}[2].JSONPath: Required value",
    ]


def test_list_keys_from_schema_knows_atomic_maps() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "sel": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}}
    keys = list_keys_from_schema(schema)
    assert is_atomic_map(keys, ("spec", "sel")) and not is_atomic_map(keys, ("spec", "labels"))
