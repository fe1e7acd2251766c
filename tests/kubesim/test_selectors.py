"""Label/field selector parsing and matching, table-driven against apiserver behaviour."""

from __future__ import annotations

import pytest

from kubesim.selectors import (
    Requirement,
    parse_field_selector,
    parse_label_selector,
    selector_from_label_selector_object,
)

LABELS = {"app": "web", "tier": "front", "env": "", "version": "3"}

LABEL_CASES = [
    # selector, matches LABELS
    ("", True),
    ("app=web", True),
    ("app==web", True),
    ("app = web", True),
    ("app=db", False),
    ("app!=db", True),
    ("app!=web", False),
    ("missing!=x", True),  # absent key satisfies !=
    ("missing=x", False),
    ("app", True),
    ("missing", False),
    ("!missing", True),
    ("!app", False),
    ("app in (web,db)", True),
    ("app in (db, cache)", False),
    ("app notin (db,cache)", True),
    ("app notin (web)", False),
    ("missing notin (x)", True),  # absent key satisfies notin
    ("missing in (x)", False),
    ("app=web,tier=front", True),
    ("app=web,tier=back", False),
    ("  app = web ,  tier in ( front , back ) , !gone  ", True),
    ("env=", True),  # empty value selects the empty label value
    ("env", True),
    ("env in (a,)", True),  # the trailing empty member is the empty value
    ("version>2", True),
    ("version<3", False),
    ("app>2", False),  # non-integer label never satisfies gt
    ("example.com/role=x", False),
    ("!example.com/role", True),
]


@pytest.mark.parametrize(("text", "expected"), LABEL_CASES)
def test_label_selector_matches(text: str, expected: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is expected


BAD_LABEL_SELECTORS = [
    ("app=web,", "after ','"),
    (",app=web", "expected a label key"),
    ("app in web", "expected '('"),
    ("app in (web", "end of input"),
    ("app in ()", "at least one value"),
    ("app=web=x", "expected ',' or end"),
    ("app=w b", "expected ',' or end"),
    ("-app=x", "name part must consist"),
    ("app=-x", "invalid label value"),
    ("a" * 64 + "=x", "no more than 63"),
    ("app=" + "v" * 64, "no more than 63"),
    ("Example.com/x=y", "DNS subdomain"),
    ("/x=y", "prefix part must not be empty"),
    ("x/=y", "name part must not be empty"),
    ("app foo (x)", "expected one of"),
    ("!", "after '!'"),
    ("!app=x", "expected ',' or end"),
    ("version>x", "integer"),
    ("app in (a b)", "unexpected"),
]


@pytest.mark.parametrize(("text", "fragment"), BAD_LABEL_SELECTORS)
def test_label_selector_rejects_bad_syntax(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match="unable to parse label selector") as info:
        parse_label_selector(text)
    assert fragment in str(info.value)


def test_label_selector_requirements_are_exposed_and_normalised() -> None:
    selector = parse_label_selector("app in (b,a,b), !gone, tier")
    assert selector.requirements == (
        Requirement("app", "in", ("a", "b")),
        Requirement("gone", "!", ()),
        Requirement("tier", "exists", ()),
    )
    assert str(selector) == "app in (a,b),!gone,tier"
    assert parse_label_selector(str(selector)) == selector
    assert parse_label_selector("").empty


def test_label_selector_object_match_labels_and_expressions() -> None:
    selector = selector_from_label_selector_object(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "edge"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "version", "operator": "Exists"},
                {"key": "gone", "operator": "DoesNotExist"},
            ],
        }
    )
    assert selector.matches(LABELS)
    assert not selector.matches({**LABELS, "tier": "back"})
    assert not selector.matches({**LABELS, "gone": "x"})
    assert not selector.matches({k: v for k, v in LABELS.items() if k != "version"})
    assert not selector.matches({**LABELS, "env": "prod"})
    assert not selector.matches({**LABELS, "app": "db"})


def test_empty_label_selector_object_selects_everything() -> None:
    assert selector_from_label_selector_object({}).matches({})
    assert selector_from_label_selector_object({"matchLabels": {}}).matches({"a": "b"})


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        ({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]}, "is not one of"),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}, "at least one value"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "take no values"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "key must be a string"),
        ({"matchLabels": {"a": 1}}, "must be a string"),
        ({"matchLabels": {"bad key": "x"}}, "invalid label key"),
        ({"matchLabels": ["a"]}, "must be an object"),
    ],
)
def test_label_selector_object_rejects_invalid(obj: dict, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        selector_from_label_selector_object(obj)
    assert fragment in str(info.value)


FIELDS = {"metadata.name": "pod-a", "metadata.namespace": "default", "status.phase": "Running"}

FIELD_CASES = [
    ("", True),
    ("metadata.name=pod-a", True),
    ("metadata.name==pod-a", True),
    ("metadata.name!=pod-a", False),
    ("metadata.name=pod-b", False),
    ("metadata.name=pod-a,status.phase=Running", True),
    ("metadata.name=pod-a,status.phase!=Running", False),
    ("spec.nodeName=", True),  # a missing field compares as the empty string
    ("spec.nodeName!=", False),
    ("spec.nodeName!=node-1", True),
    (" metadata.name = pod-a ", True),
]


@pytest.mark.parametrize(("text", "expected"), FIELD_CASES)
def test_field_selector_matches(text: str, expected: bool) -> None:
    assert parse_field_selector(text).matches(FIELDS) is expected


def test_field_selector_reports_fields_used() -> None:
    selector = parse_field_selector("metadata.name=a,spec.nodeName!=b,metadata.name!=c")
    assert selector.fields == frozenset({"metadata.name", "spec.nodeName"})


def test_field_selector_escaped_values_round_trip() -> None:
    selector = parse_field_selector(r"metadata.name=a\,b\=c\\d")
    assert selector.matches({"metadata.name": "a,b=c\\d"})
    assert parse_field_selector(str(selector)) == selector


@pytest.mark.parametrize(
    "text",
    ["metadata.name", "=x", "metadata.name=a,", "a=b=c", r"a=b\x", "a>3", "!a", "metadata.name=a,,b=c"],
)
def test_field_selector_rejects_bad_syntax(text: str) -> None:
    with pytest.raises(ValueError, match="invalid field selector"):
        parse_field_selector(text)
