"""CRD maintenance of ``run controller`` (in-process, against kubesim): the CRDs are applied at start with the field
manager ``listener-operator``, a CRD edited by hand is restored on restart, the Listener controller starts only once
every CRD is Established, and with maintenance disabled nothing is written and a missing CRD is named in the log."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from polling import poll_until
from test_listener_controller import LISTENERS, NS, Env

from kubesim.sim import KubeSim
from listener_operator.crd.generate import all_crds
from listener_operator.crd.maintenance import FIELD_MANAGER_CRDS, INSTALL_HINT

CRDS = "customresourcedefinitions.apiextensions.k8s.io"
NAMES = sorted(crd["metadata"]["name"] for crd in all_crds())


@pytest_asyncio.fixture
async def bare() -> AsyncIterator[Env]:
    """kubesim with only the namespace: no CRDs."""
    async with KubeSim() as sim:
        await sim.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        env = Env(sim)
        try:
            yield env
        finally:
            for running in env.operators:
                if not running.task.done():
                    await running.stop()


async def crd_names(env: Env) -> list[str]:
    crds, _ = await env.api.list(CRDS)
    return sorted(crd["metadata"]["name"] for crd in crds)


async def listener_reconciled(env: Env) -> bool:
    return bool((await env.status("web")).get("ingressAddresses"))


async def established(running: Any) -> bool:
    return bool(running.operator.crds_established.is_set())


async def logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)


def managers(crd: dict[str, Any]) -> dict[str, str]:
    return {entry["manager"]: entry["operation"] for entry in crd["metadata"].get("managedFields") or []}


async def test_the_controller_applies_its_crds_at_start_and_then_reconciles(bare: Env) -> None:
    assert await crd_names(bare) == []
    running = await bare.start_operator()
    await poll_until(lambda: established(running), 15, "CRDs established")
    assert await crd_names(bare) == NAMES
    for name in NAMES:
        crd = await bare.api.get(CRDS, name)
        assert managers(crd) == {FIELD_MANAGER_CRDS: "Apply"}
        assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])
    # The API serves the kinds: presets appear and a Listener is reconciled.
    await bare.wait_for(lambda: bare.api.get("listenerclasses.listeners.stackable.tech", "cluster-internal"))
    await bare.create_listener("web", "cluster-internal")
    assert await bare.wait_for(lambda: bare.addresses("web")) == ["web.ns.svc.cluster.local"]


async def test_a_crd_edited_by_hand_is_restored_on_restart(bare: Env) -> None:
    first = await bare.start_operator()
    await poll_until(lambda: established(first), 15, "CRDs established")
    assert await first.stop() == 0
    # An administrator edits the Listener CRD: another printer column, a changed description.
    crd = await bare.api.get(CRDS, "listeners.listeners.stackable.tech")
    original_columns = crd["spec"]["versions"][0].get("additionalPrinterColumns")
    crd["spec"]["versions"][0]["additionalPrinterColumns"] = [{"name": "Edited", "type": "string",
                                                               "jsonPath": ".metadata.name"}]
    await bare.api.patch(CRDS, "listeners.listeners.stackable.tech",
                         {"spec": {"versions": crd["spec"]["versions"]}}, patch_type="merge",
                         field_manager="kubectl-edit")
    edited = await bare.api.get(CRDS, "listeners.listeners.stackable.tech")
    assert edited["spec"]["versions"][0]["additionalPrinterColumns"][0]["name"] == "Edited"

    second = await bare.start_operator()
    await poll_until(lambda: established(second), 15, "CRDs established again")
    restored = await bare.api.get(CRDS, "listeners.listeners.stackable.tech")
    assert restored["spec"]["versions"][0].get("additionalPrinterColumns") == original_columns
    expected = next(c for c in all_crds() if c["metadata"]["name"] == "listeners.listeners.stackable.tech")
    assert restored["spec"]["versions"] == expected["spec"]["versions"]


async def test_with_maintenance_disabled_nothing_is_written_and_the_missing_crds_are_named(
        bare: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="listener_operator.crd.maintenance")
    running = await bare.start_operator(maintain_crds=False)
    await poll_until(lambda: logged(caplog, "CRD maintenance is disabled"), 15, "the log names the missing CRDs")
    message = next(r.getMessage() for r in caplog.records if "CRD maintenance is disabled" in r.getMessage())
    assert f"missing: {', '.join(NAMES)}" in message
    assert INSTALL_HINT in message
    assert await crd_names(bare) == []
    assert not running.operator.crds_established.is_set()

    # The administrator installs the CRDs: the controller notices through its watch and starts reconciling.
    for crd in all_crds():
        await bare.api.create(CRDS, crd)
    await poll_until(lambda: established(running), 15, "CRDs established")
    await bare.create_listener("web", "cluster-internal")
    # presets are created independently of CRD maintenance
    assert await bare.wait_for(lambda: bare.addresses("web")) == ["web.ns.svc.cluster.local"]
    for name in NAMES:
        assert FIELD_MANAGER_CRDS not in managers(await bare.api.get(CRDS, name))


async def test_the_controller_waits_until_every_crd_is_established(
        bare: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="listener_operator.crd.maintenance")
    for crd in all_crds():
        await bare.api.create(CRDS, crd)
    # The Listener CRD is not served yet (as while the API server checks its names).
    crd = await bare.api.get(CRDS, "listeners.listeners.stackable.tech")
    held = [dict(c, status="False", reason="Installing") if c["type"] == "Established" else c
            for c in crd["status"]["conditions"]]
    await bare.api.patch(CRDS, crd["metadata"]["name"], {"status": {"conditions": held}}, subresource="status")
    await bare.create_listener("web", "cluster-internal")
    await bare.create_class("cluster-internal", serviceType="ClusterIP")

    running = await bare.start_operator(maintain_crds=False)
    await poll_until(lambda: logged(caplog, "not Established yet: listeners.listeners.stackable.tech"), 15,
                     "the wait is logged")
    assert not running.operator.crds_established.is_set()
    assert not await listener_reconciled(bare)
    assert all(resource != LISTENERS.split(".")[0] for _verb, resource in running.requests)  # no Listener cache

    crd = await bare.api.get(CRDS, "listeners.listeners.stackable.tech")
    ready = [dict(c, status="True", reason="InitialNamesAccepted") if c["type"] == "Established" else c
             for c in crd["status"]["conditions"]]
    await bare.api.patch(CRDS, crd["metadata"]["name"], {"status": {"conditions": ready}}, subresource="status")
    await poll_until(lambda: established(running), 15, "CRDs established")
    assert await bare.wait_for(lambda: bare.addresses("web")) == ["web.ns.svc.cluster.local"]
