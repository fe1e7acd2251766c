"""The router in a Pod: its document from a watched ConfigMap, its TLS material from watched Secrets, bound to the
Pod IP, with only the API access the site's Role grants. Against kubesim's API (no nodes needed), the router for
real; every address is on 127.0.50.0/24."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from router_certs import TestCA
from router_support import Backend, document, free_port, loopback, refused, wait_until, who

from kubesim.auth.rbac import ClusterRoleAuthorizer
from kubesim.sim import KubeSim
from operator_runtime.config import make_api
from service_network.router.config import TlsProfile
from service_network.router.kube import ConfigMapSource, SecretTlsResolver
from service_network.router.tls import TlsProblem
from service_network.site.resources import role_rules

NS = "west"


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as server:
        await server.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        yield server


def config_map(text: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "skupper-router", "namespace": NS},
            "data": {"router.json": text}}


async def test_config_map_source_waits_then_follows(sim: KubeSim) -> None:
    api = make_api(sim.kubeconfig_path)
    source = ConfigMapSource(api, NS, "skupper-router", "router.json")
    snapshots = source.snapshots()
    first = asyncio.ensure_future(anext(snapshots))
    try:
        await asyncio.sleep(0.3)
        assert not first.done()                      # no ConfigMap yet: waiting, not failing
        await sim.api.create("configmaps", config_map("one"), NS)
        assert (await asyncio.wait_for(first, 5)).text == "one"
        updated = config_map("two")
        await sim.api.patch("configmaps", "skupper-router", updated, namespace=NS)
        assert (await asyncio.wait_for(anext(snapshots), 5)).text == "two"
        source.refresh()                             # SIGHUP / a Secret changed: the same text again
        assert (await asyncio.wait_for(anext(snapshots), 5)).text == "two"
        await sim.api.delete("configmaps", "skupper-router", NS)
        gone = await asyncio.wait_for(anext(snapshots), 5)
        assert gone.text is None and gone.problem == "does not exist"
    finally:
        await snapshots.aclose()
        await api.close()


async def test_secret_resolver(sim: KubeSim, tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "pki")
    issued = ca.issue("router", dns=["x"])
    api = make_api(sim.kubeconfig_path)
    changed = asyncio.Event()
    resolver = SecretTlsResolver(api, NS, on_change=changed.set)
    profile = TlsProfile.model_validate({"name": "p", "secret": {"name": "tls"}})
    try:
        with pytest.raises(TlsProblem, match='not found in namespace west'):
            await resolver.resolve(profile)
        await sim.api.create("secrets", {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                                         "metadata": {"name": "tls", "namespace": NS},
                                         "data": {"tls.crt": base64.b64encode(issued.cert.read_bytes()).decode(),
                                                  "tls.key": base64.b64encode(issued.key.read_bytes()).decode()}},
                             NS)
        await asyncio.wait_for(changed.wait(), 5)
        material = await resolver.resolve(profile)
        assert material.cert == issued.cert.read_bytes() and material.key == issued.key.read_bytes()
        assert material.ca is None and resolver.watch_paths(profile) == []
        await sim.api.create("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad",
                                                                                      "namespace": NS},
                                         "data": {"ca.crt": "bm90IGEgY2VydA=="}}, NS)
        bad = TlsProfile.model_validate({"name": "b", "secret": {"name": "bad"}})

        async def resolved() -> bytes | None:
            try:
                return (await resolver.resolve(bad)).ca
            except TlsProblem:
                return None

        assert await wait_until(resolved, 5, "Secret bad") == b"not a cert"   # checked later by the router
    finally:
        await resolver.stop()
        await api.close()


async def _run_router(sim: KubeSim, pod_ip: str, state: Path, *extra: str,
                      env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    environment = {**os.environ, "POD_IP": pod_ip, "POD_NAMESPACE": NS, "KUBECONFIG": str(sim.kubeconfig_path),
                   **(env or {})}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service_network.cli", "run", "router", "--state-dir", str(state), *extra,
        env=environment, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)


async def _stop(process: asyncio.subprocess.Process) -> str:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    return out.decode(errors="replace")


async def test_router_pod_binds_its_ip_with_the_role_s_access_only(sim: KubeSim, tmp_path: Path) -> None:
    authorizer = ClusterRoleAuthorizer(role_rules(), sim.server.store)
    sim.server.authorizer = authorizer
    ip_a, ip_b = loopback(), loopback()
    backend = await Backend("pod-1").start()
    port = free_port(ip_a)
    doc = document(listeners=[{"name": "l", "routingKey": "k", "host": "", "port": port}],
                   connectors=[{"name": "c", "routingKey": "k", "port": backend.port,
                                "targets": [{"host": backend.host, "name": "pod-1"}]}],
                   metrics={"host": "", "port": free_port(ip_a)})
    await sim.api.create("configmaps", config_map(json.dumps(doc)), NS)
    # two routers on one machine with the same document: each binds its own Pod IP; their state directories are
    # where kubelet puts an emptyDir volume (a path with a "~")
    volumes = tmp_path / "volumes" / "kubernetes.io~empty-dir"
    routers = [await _run_router(sim, ip, volumes / f"state-{i}", "--metrics-address", f"{ip}:0")
               for i, ip in enumerate((ip_a, ip_b))]
    try:
        for ip in (ip_a, ip_b):
            name, _, writer = await wait_until(lambda ip=ip: _who(ip, port), 15, f"router on {ip}")
            assert name == "pod-1"
            writer.close()
        doc["connectors"] = []
        await sim.api.patch("configmaps", "skupper-router", config_map(json.dumps(doc)), namespace=NS)
        await wait_until(lambda: refused(ip_a, port), 5, "refusal once the target is gone")
    finally:
        outputs = [await _stop(p) for p in routers]
        await backend.stop()
    assert [p.returncode for p in routers] == [0, 0], outputs
    assert authorizer.denied == [], authorizer.denied
    assert {(verb, resource) for verb, _, resource in authorizer.used} <= {
        (v, r) for rule in role_rules() for v in rule["verbs"] for r in rule["resources"]}


async def _who(ip: str, port: int) -> Any:
    try:
        return await who(ip, port)
    except OSError:
        return None


async def test_run_router_refuses_bad_settings(sim: KubeSim, tmp_path: Path) -> None:
    missing = await _run_router(sim, "127.0.50.9", tmp_path / "s", env={"POD_NAMESPACE": ""})
    out, _ = await asyncio.wait_for(missing.communicate(), 30)
    assert missing.returncode == 2 and b"no namespace" in out
    bad_ip = await _run_router(sim, "not-an-ip", tmp_path / "s")
    out, _ = await asyncio.wait_for(bad_ip.communicate(), 30)
    assert bad_ip.returncode == 2 and b"is not an IP address" in out
