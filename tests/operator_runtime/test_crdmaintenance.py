"""``operator_runtime.crdmaintenance``, the CRD maintenance both controllers use: the log line while CRDs are not
served (which are missing, which are not Established, the install command only when the controller does not maintain
them), the RBAC rule it needs, and against kubesim: a refused apply retried with doubling back-off until RBAC allows
it, then the CRDs applied with the controller's field manager; a CRD deleted while waiting keeps the wait going."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from kubesim.auth.rbac import ClusterRoleAuthorizer
from kubesim.sim import KubeSim
from operator_runtime.config import make_api
from operator_runtime.crdmaintenance import (
    CrdMaintenance,
    crd_rules,
    describe_waiting,
    ensure_crds,
    is_established,
    wait_established,
)
from service_network.crd.generate import all_crds

CRDS = "customresourcedefinitions.apiextensions.k8s.io"
HOW = CrdMaintenance(field_manager="example-controller", install_hint="example crd | kubectl apply -f -",
                     enable_hint="unset DISABLE_CRD_MAINTENANCE", logger=logging.getLogger("test.crdmaintenance"))


def crd(name: str, established: str | None) -> dict[str, Any]:
    conditions = [] if established is None else [{"type": "Established", "status": established}]
    return {"metadata": {"name": name}, "status": {"conditions": conditions}}


def test_the_waiting_line_names_missing_and_unestablished_crds_and_the_install_command_when_unmaintained() -> None:
    known = {"b.example.io": crd("b.example.io", "False")}
    pending = ["a.example.io", "b.example.io"]
    unmaintained = describe_waiting(pending, known, maintained=False, how=HOW)
    assert unmaintained == ("waiting for the CustomResourceDefinitions (missing: a.example.io; not Established yet: "
                            "b.example.io); CRD maintenance is disabled (DISABLE_CRD_MAINTENANCE), so install them: "
                            "example crd | kubectl apply -f - (or let the controller maintain them: unset "
                            "DISABLE_CRD_MAINTENANCE)")
    # a maintaining controller applied them itself: no advice, only what it waits for
    assert describe_waiting(pending, known, maintained=True, how=HOW) == (
        "waiting for the CustomResourceDefinitions (missing: a.example.io; not Established yet: b.example.io)")
    assert "install them" not in describe_waiting(["b.example.io"], known, maintained=False, how=HOW)
    assert [is_established(crd("x", s)) for s in ("True", "False", None)] == [True, False, False]


def test_the_rule_grants_writes_only_to_a_maintaining_controller() -> None:
    assert crd_rules(maintain=True) == [{"apiGroups": ["apiextensions.k8s.io"],
                                         "resources": ["customresourcedefinitions"],
                                         "verbs": ["list", "watch", "create", "patch"]}]
    assert crd_rules(maintain=False)[0]["verbs"] == ["list", "watch"]


async def test_a_refused_apply_is_retried_with_back_off_until_rbac_allows_it(
        kubesim: KubeSim, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.crdmaintenance")
    kubesim.server.authorizer = ClusterRoleAuthorizer(crd_rules(maintain=False), kubesim.server.store)
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 2:  # the administrator fixes the ClusterRole
            kubesim.server.authorizer = ClusterRoleAuthorizer(crd_rules(maintain=True), kubesim.server.store)

    api = make_api(kubesim.kubeconfig_path)
    try:
        crds = all_crds()
        await asyncio.wait_for(ensure_crds(api, crds, maintain=True, how=HOW, sleep=sleep), 30)
    finally:
        await api.close()
    assert delays == [0.5, 1.0]
    failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 2 and all(m.startswith("applying the CustomResourceDefinitions failed (403")
                                      for m in failures), failures
    for wanted in crds:
        stored = await kubesim.api.get(CRDS, wanted["metadata"]["name"])
        assert {m["manager"] for m in stored["metadata"]["managedFields"]} == {"example-controller"}
        assert is_established(stored)
    assert any(r.getMessage().startswith("CustomResourceDefinitions established: ") for r in caplog.records)


async def test_the_wait_follows_creations_and_deletions(kubesim: KubeSim) -> None:
    first, second = all_crds()[:2]
    a, b = first["metadata"]["name"], second["metadata"]["name"]
    waits: list[list[str]] = []
    changed = asyncio.Event()

    def on_waiting(pending: list[str], _known: Any) -> None:
        waits.append(pending)
        changed.set()

    async def pending_becomes(expected: list[str]) -> None:
        while not waits or waits[-1] != sorted(expected):
            changed.clear()
            await asyncio.wait_for(changed.wait(), 10)

    api = make_api(kubesim.kubeconfig_path)
    try:
        waiting = asyncio.ensure_future(wait_established(api, [a, b], on_waiting=on_waiting))
        await pending_becomes([a, b])
        await kubesim.api.create(CRDS, first)
        await pending_becomes([b])
        await kubesim.api.delete(CRDS, a)
        await pending_becomes([a, b])          # the first one went away again
        await kubesim.api.create(CRDS, second)
        await pending_becomes([a])
        assert not waiting.done()
        await kubesim.api.create(CRDS, first)
        await asyncio.wait_for(waiting, 10)
    finally:
        await api.close()
    assert waits == [sorted([a, b]), [b], sorted([a, b]), [a]]
