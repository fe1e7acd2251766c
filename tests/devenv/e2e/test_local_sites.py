"""Local clusters side by side (the network demo's sites, ``devenv.multicluster``): each its own address block,
kubeconfig and site controller (a Pod of the chart's service-network templates), a Site in each running its router Pod in its own block; all stopped together,
leaving nothing behind."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import pytest
from polling import poll_until
from test_local import processes_working_in

from devenv.multicluster import LocalSites, SiteOptions
from devenv.up import Console


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ls", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _site(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "skupper.io/v2alpha1", "kind": "Site", "metadata": {"name": namespace, "namespace": namespace},
            "spec": {}}


async def test_three_sites_run_side_by_side_in_distinct_blocks_and_stop_cleanly(short_dir: Path) -> None:
    output = io.StringIO()
    names = ("west", "middle", "east")
    run_dirs: list[Path] = []
    async with LocalSites(names, SiteOptions(state_dir=short_dir), Console(output)) as sites:
        blocks = {name: sites[name].sim.address_block.network for name in names}
        assert len(set(blocks.values())) == 3, blocks
        kubeconfigs = {sites[name].kubeconfig_path for name in names}
        assert kubeconfigs == {short_dir / name / "kubeconfig" for name in names}
        for name in names:
            cluster = sites[name]
            assert cluster.run_dir is not None
            run_dirs.append(cluster.run_dir)
            controllers = await cluster.operator.pods()                       # its site controller runs
            assert [p["metadata"]["labels"]["app.kubernetes.io/role"] for p in controllers] == [
                "service-network-controller"], controllers
            api = cluster.sim.api
            await api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            await api.create("sites.skupper.io", _site(name), name)
        # each site controller runs its own cluster's router, on a Pod IP of that cluster's block
        for name in names:
            api = sites[name].sim.api

            async def router_ip(api=api, name=name) -> str | None:  # type: ignore[no-untyped-def]
                pods, _ = await api.list("pods", name, label_selector="skupper.io/component=router")
                ready = [p for p in pods if any(c.get("type") == "Ready" and c.get("status") == "True"
                                                for c in p.get("status", {}).get("conditions", []))]
                return ready[0]["status"]["podIP"] if ready else None

            ip = await poll_until(router_ip, 60, f"router Pod of {name}")
            assert IPv4Address(ip) in blocks[name], (name, ip, blocks[name])
    text = output.getvalue()
    for name in names:
        assert f"[{name}] cluster addresses: address block" in text
        assert f"[{name}] installed the Helm chart" in text
        assert f"[{name}] site controller ready" in text
        assert sorted(os.listdir(short_dir / name)) == ["logs"]
    assert "operator healthy" not in text          # no listener operator in the sites
    for run_dir in run_dirs:
        assert not run_dir.exists()
        assert processes_working_in(str(run_dir)) == [], run_dir   # site controllers, routers
