"""Several kubesim clusters on one machine: each in its own loopback block, all serving, no address shared."""

from __future__ import annotations

import contextlib
import shutil
from typing import Any

import pytest
from clusterhelpers import short_state_dir, wait_for
from traffichelpers import NS, answers, deployment, eventually, ready_pods, service

from kubesim.addresses import AddressBlockError, claim_address_block
from kubesim.sim import KubeSim
from kubesim.testing.traffic import who_answers

HTTP = [{"name": "http", "port": 80, "targetPort": "http"}]


async def _deploy_and_collect(sim: KubeSim) -> tuple[set[str], dict[str, str]]:
    """Start a web app behind a LoadBalancer; every IP the cluster handed out, and who answers where."""
    await sim.api.create("deployments.apps", deployment("web", 2), NS)
    pods = await ready_pods(sim.api, "web", 2)
    await sim.api.create("services", service("web", {"app": "web"}, HTTP, type="LoadBalancer"), NS)
    svc = await wait_for(
        sim.api, "services", "web", NS, lambda s: bool(s) and bool((s.get("status") or {}).get("loadBalancer"))
    )
    assert svc is not None
    nodes, _ = await sim.api.list("nodes")
    node_ips = {a["address"] for n in nodes for a in n["status"]["addresses"] if a["type"].endswith("IP")}
    lb_ip = svc["status"]["loadBalancer"]["ingress"][0]["ip"]
    cluster_ip = svc["spec"]["clusterIP"]
    node_port = svc["spec"]["ports"][0]["nodePort"]
    ips = node_ips | {p["status"]["podIP"] for p in pods} | {lb_ip, cluster_ip}
    targets = {f"{ip}:{node_port}": ip for ip in node_ips} | {f"{lb_ip}:80": lb_ip, f"{cluster_ip}:80": cluster_ip}
    for target in targets:
        host, port = target.rsplit(":", 1)
        await eventually(lambda h=host, p=int(port): who_answers(h, p), what=target)
    served = {}
    for target in targets:
        host, port = target.rsplit(":", 1)
        served[target] = ",".join(sorted(set(await answers(host, int(port), 4))))
    return ips, served


async def test_two_clusters_side_by_side_serve_without_sharing_an_address() -> None:
    states = [short_state_dir(), short_state_dir()]
    try:
        async with contextlib.AsyncExitStack() as stack:
            sims: list[KubeSim] = []
            for state in states:
                sims.append(await stack.enter_async_context(KubeSim(nodes=2, state_dir=state, tls=False)))
            blocks = [sim.address_block.index for sim in sims]
            assert blocks[0] != blocks[1]
            collected: list[tuple[set[str], dict[str, Any]]] = [await _deploy_and_collect(sim) for sim in sims]
            (ips_a, served_a), (ips_b, served_b) = collected
            assert not ips_a & ips_b, f"addresses shared: {ips_a & ips_b}"
            for block, ips in zip(blocks, (ips_a, ips_b), strict=True):
                assert all(ip.startswith(f"127.{block}.") for ip in ips), ips
            pods_a = {p["metadata"]["name"] for p in (await sims[0].api.list("pods", NS))[0]}
            pods_b = {p["metadata"]["name"] for p in (await sims[1].api.list("pods", NS))[0]}
            assert all(set(v.split(",")) == pods_a for v in served_a.values())
            assert all(set(v.split(",")) == pods_b for v in served_b.values())
            # the same nodePort number serves in both clusters, on each cluster's own node addresses
            assert {t.rsplit(":", 1)[1] for t in served_a if t.startswith(f"127.{blocks[0]}.1.")} == {
                t.rsplit(":", 1)[1] for t in served_b if t.startswith(f"127.{blocks[1]}.1.")
            }
            # a block in use cannot be claimed by anyone else, in this process or another
            with pytest.raises(AddressBlockError, match=f"address block {blocks[0]} .* is in use by another kubesim"):
                KubeSim(address_block=blocks[0])
    finally:
        for state in states:
            shutil.rmtree(state, ignore_errors=True)


async def test_a_claimed_block_can_be_handed_to_kubesim(tmp_path: Any) -> None:
    with claim_address_block() as claim:
        async with KubeSim(address_block=claim, kubeconfig_path=tmp_path / "kc") as sim:
            assert sim.address_block == claim.block
            created = await sim.api.create("services", service("s", None, HTTP), NS)
            assert created["spec"]["clusterIP"] == f"127.{claim.index}.16.2"
        assert claim.held  # the caller's claim outlives the sim
