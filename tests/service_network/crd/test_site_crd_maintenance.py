"""CRD maintenance of ``service-network run controller`` (in-process, against kubesim without the skupper.io CRDs):
with it on, the controller applies them with its field manager and then reconciles a Site; with it off
(``DISABLE_CRD_MAINTENANCE``) it writes none, is not ready, names the missing CRDs and the install command in its
log, and starts once an administrator installs them."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from site_support import CRD_RESOURCE, NS, SiteEnv

from kubesim.sim import KubeSim
from service_network.crd.generate import installed_crds
from service_network.crd.maintenance import FIELD_MANAGER_CRDS, INSTALL_HINT
from service_network.site.command import ControllerOptions, SiteControllerProcess, add_arguments

NAMES = sorted(crd["metadata"]["name"] for crd in installed_crds())


@pytest.fixture
async def bare(tmp_path: Path) -> AsyncIterator[SiteEnv]:
    """kubesim with a namespace and no skupper.io CRDs (no nodes: no router Pod runs)."""
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as sim:
        await sim.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        env = SiteEnv(sim)
        try:
            yield env
        finally:
            for controller in env.controllers:
                if not controller.task.done():
                    await controller.stop()


async def crd_names(env: SiteEnv) -> list[str]:
    crds, _ = await env.api.list(CRD_RESOURCE)
    return sorted(crd["metadata"]["name"] for crd in crds if crd["metadata"]["name"].endswith(".skupper.io"))


def test_the_flag_and_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    def options(*argv: str) -> ControllerOptions:
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        return ControllerOptions.from_args(parser.parse_args(argv))

    assert options().maintain_crds is True
    assert options("--disable-crd-maintenance").maintain_crds is False
    monkeypatch.setenv("DISABLE_CRD_MAINTENANCE", "true")   # what the chart sets with maintain=false
    assert options().maintain_crds is False


async def test_the_controller_applies_the_skupper_crds_and_then_reconciles(bare: SiteEnv) -> None:
    assert await crd_names(bare) == []
    running = await bare.start_controller()      # returns once its caches are synced
    assert await crd_names(bare) == NAMES
    for name in NAMES:
        crd = await bare.api.get(CRD_RESOURCE, name)
        assert {m["manager"]: m["operation"] for m in crd["metadata"]["managedFields"]} == {FIELD_MANAGER_CRDS: "Apply"}
    assert running.process.crds_established.is_set()
    await bare.create("Site", "west", {})
    await bare.wait_status("Site", "west", "Pending", "No router pod is ready")


async def test_with_maintenance_disabled_it_waits_for_the_administrator(
        bare: SiteEnv, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="service_network.crd.maintenance")
    process = SiteControllerProcess(ControllerOptions(kubeconfig=str(bare.sim.kubeconfig_path), http_address=None,
                                                      leader_elect=False, maintain_crds=False))
    stop = asyncio.Event()
    task = asyncio.create_task(process.run(stop))
    try:
        message = await bare.wait_for(lambda: _logged(caplog, "CRD maintenance is disabled"), 15, "the log line")
        assert f"missing: {', '.join(NAMES)}" in message and INSTALL_HINT in message
        assert await crd_names(bare) == []
        assert not process.crds_established.is_set() and process.controller.synced is False

        for crd in installed_crds():             # `service-network crd | kubectl apply -f -`
            await bare.api.create(CRD_RESOURCE, crd)
        await bare.wait_for(lambda: _synced(process), 15, "the controller started")
        for name in NAMES:
            crd = await bare.api.get(CRD_RESOURCE, name)
            assert FIELD_MANAGER_CRDS not in {m["manager"] for m in crd["metadata"].get("managedFields") or []}
        await bare.create("Site", "west", {})
        await bare.wait_status("Site", "west", "Pending", "No router pod is ready")
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30) == 0


async def _logged(caplog: pytest.LogCaptureFixture, text: str) -> str | None:
    return next((r.getMessage() for r in caplog.records if text in r.getMessage()), None)


async def _synced(process: SiteControllerProcess) -> bool:
    return bool(process.crds_established.is_set() and process.controller is not None and process.controller.synced)
