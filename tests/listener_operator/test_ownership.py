"""The foreign-Service predicate (behaviour.md "Foreign Services"): upstream's seven cases and more."""

from __future__ import annotations

from typing import Any

import pytest

from listener_operator.listener_controller.ownership import (
    ForeignServiceError,
    check_not_foreign,
    is_controlled_by_listener,
)

UID = "6a0f2d4e-1111-2222-3333-444455556666"
OURS = {"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener", "name": "web", "uid": UID,
        "controller": True, "blockOwnerDeletion": True}


def service(*refs: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "ns",
                                                                 "ownerReferences": list(refs)}}


@pytest.mark.parametrize(("svc", "expected"), [
    pytest.param({"metadata": {"name": "web"}}, False, id="no-owner-references"),
    pytest.param(service({**OURS, "controller": False}), False, id="non-controller-reference"),
    pytest.param(service({**OURS, "uid": "other-uid"}), False, id="different-uid"),
    pytest.param(service({**OURS, "kind": "ListenerClass"}), False, id="different-kind"),
    pytest.param(service({**OURS, "apiVersion": "evil.example.com/v1alpha1"}), False, id="foreign-api-group"),
    pytest.param(service({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "x",
                          "controller": True}), False, id="unrelated-controller"),
    pytest.param(service(OURS), True, id="matching"),
    # beyond upstream's seven
    pytest.param(service({**OURS, "apiVersion": "listeners.stackable.tech/v1"}), True, id="other-version-same-group"),
    pytest.param(service({**OURS, "apiVersion": "listeners.stackable.tech.evil.com/v1"}), False,
                 id="group-prefix-lookalike"),
    pytest.param(service({**OURS, "apiVersion": "listeners.stackable.tech"}), False, id="group-without-version"),
    pytest.param(service({**OURS, "controller": None}), False, id="controller-null"),
    pytest.param(service({**OURS, "controller": "true"}), False, id="controller-string"),
    pytest.param(service({k: v for k, v in OURS.items() if k != "controller"}), False, id="controller-missing"),
    pytest.param(service({**OURS, "controller": False}, {**OURS, "uid": "x"}, OURS), True,
                 id="matching-among-several"),
    pytest.param(service("not-a-dict"), False, id="garbage-reference"),  # type: ignore[arg-type]
    pytest.param({"metadata": {"ownerReferences": None}}, False, id="null-references"),
    pytest.param({}, False, id="no-metadata"),
])
def test_is_controlled_by_listener(svc: dict[str, Any], expected: bool) -> None:
    assert is_controlled_by_listener(svc, UID) is expected


def test_empty_listener_uid_never_matches() -> None:
    assert not is_controlled_by_listener(service({**OURS, "uid": ""}), "")


def test_check_not_foreign_allows_absent_and_own_services() -> None:
    check_not_foreign(None, UID)
    check_not_foreign(service(OURS), UID)


def test_check_not_foreign_names_the_holder() -> None:
    holder = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "x", "controller": True}
    with pytest.raises(ForeignServiceError, match="ns/web: it is controlled by StatefulSet/db") as info:
        check_not_foreign(service(holder), UID)
    assert info.value.reason == "RefuseToOverwriteForeignService"
    assert info.value.related == "service"
    with pytest.raises(ForeignServiceError, match="it has no controller"):
        check_not_foreign(service(), UID)
