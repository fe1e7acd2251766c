"""`kubesim serve` as a process: prints the URL, writes a working kubeconfig, exits on SIGTERM."""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import yaml
from lightkube import AsyncClient, KubeConfig, codecs
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod


async def test_serve_prints_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kubesim.cli.main",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode().strip()
        assert line.startswith("https://127.0.0.1:")
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == line
        assert config["users"][0]["user"]["token"]
        assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
        client = AsyncClient(KubeConfig.from_file(str(kubeconfig)))
        names = [ns.metadata.name async for ns in client.list(Namespace) if ns.metadata]
        assert "default" in names
        await client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 20)
    assert code == 0


async def _serve(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kubesim.cli.main",
        "serve",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_serve_passes_cluster_options(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    proc = await _serve(
        "--port",
        "0",
        "--kubeconfig",
        str(kubeconfig),
        "--nodes",
        "1",
        "--load-balancer-hostnames",
        "lb.example.com",
        "--node-external-ips",
        "--service-node-port-range",
        "31000-31005",
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        await asyncio.wait_for(proc.stdout.readline(), 30)
        block_line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        assert block_line.startswith("kubesim: address block "), block_line
        block = int(block_line.split()[3])
        assert f"(ExternalIP 127.{block}.2.x)" in block_line       # promised: the nodes get it (below)
        from lightkube.models.core_v1 import ServicePort, ServiceSpec
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Node, Service

        client = AsyncClient(KubeConfig.from_file(str(kubeconfig)))
        nodes = [n async for n in client.list(Node)]
        assert len(nodes) == 1 and nodes[0].status is not None
        assert ("ExternalIP", f"127.{block}.2.1") in [(a.type, a.address) for a in nodes[0].status.addresses or []]
        await client.create(
            Service(
                metadata=ObjectMeta(name="lb", namespace="default"),
                spec=ServiceSpec(type="LoadBalancer", ports=[ServicePort(port=80)]),
            )
        )
        hostnames: list[str | None] = []
        for _ in range(100):
            svc = await client.get(Service, "lb", namespace="default")
            hostnames = (
                [i.hostname for i in (svc.status.loadBalancer.ingress or [])]
                if svc.status and svc.status.loadBalancer
                else []
            )
            if hostnames:
                break
            await asyncio.sleep(0.05)
        assert "lb.example.com" in hostnames
        assert svc.spec is not None and svc.spec.ports is not None
        assert 31000 <= (svc.spec.ports[0].nodePort or 0) <= 31005  # from the configured range
        await client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0


async def test_serve_rejects_bad_options_with_exit_2(tmp_path: Path) -> None:
    proc = await _serve("--port", "0", "--kubeconfig", str(tmp_path / "kc"), "--node-external-ips")
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and b"need --nodes" in err
    proc = await _serve("--port", "0", "--kubeconfig", str(tmp_path / "kc"), "--faults", '{"latency_ms": -1}')
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and b"latency_ms" in err
    proc = await _serve("--port", "0", "--kubeconfig", str(tmp_path / "kc"), "--service-node-port-range", "9-1")
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and b"node port range" in err


async def test_serve_with_nodes_runs_the_installed_image_and_says_how_to_reach_names(tmp_path: Path) -> None:
    """As `kind load` puts a project's image on kind's nodes: this project's image runs on `kubesim serve`'s nodes
    (a Pod of it runs `listener-operator crd` to completion), and the banner names the DNS server and SOCKS proxy."""
    kubeconfig = tmp_path / "kc.yaml"
    state = Path(tempfile.mkdtemp(prefix="kss-"))        # short: kubelet socket paths live under it
    proc = await _serve("--nodes", "1", "--kubeconfig", str(kubeconfig), "--state-dir", str(state))
    try:
        assert proc.stdout is not None and proc.stderr is not None
        await asyncio.wait_for(proc.stdout.readline(), 60)
        banner: list[str] = []
        while not any("SOCKS5 proxy" in line for line in banner):
            line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
            assert line, f"kubesim serve ended: {''.join(banner)}"
            banner.append(line)
        text = "".join(banner)
        assert "images on the nodes from installed packages: listener-operator" in text
        assert "cluster DNS at 127." in text and "(dig @127." in text
        client = AsyncClient(KubeConfig.from_file(str(kubeconfig)))
        try:
            body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crd", "namespace": "default"},
                    "spec": {"restartPolicy": "Never", "containers": [
                        {"name": "main", "image": "localhost/listener-operator:0.1.0", "args": ["crd"]}]}}
            await client.create(codecs.from_dict(body))
            phase = ""
            for _ in range(600):
                found = await client.get(Pod, "crd", namespace="default")
                phase = found.status.phase if found.status and found.status.phase else ""
                if phase in ("Succeeded", "Failed"):
                    break
                await asyncio.sleep(0.1)
            assert phase == "Succeeded", found.status
        finally:
            await client.close()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
        shutil.rmtree(state, ignore_errors=True)


async def test_serve_with_a_store_resumes_what_the_last_run_stored(tmp_path: Path) -> None:
    """`kubesim serve --store FILE` twice: a ConfigMap created through the first is served by the second, which says
    it resumed; SIGTERM writes everything before the process ends."""
    store, kubeconfig = tmp_path / "cluster.db", tmp_path / "kc.yaml"
    for run in range(2):
        proc = await _serve("--port", "0", "--kubeconfig", str(kubeconfig), "--store", str(store))
        try:
            assert proc.stdout is not None and proc.stderr is not None
            await asyncio.wait_for(proc.stdout.readline(), 20)
            said = (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
            said += (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
            client = AsyncClient(KubeConfig.from_file(str(kubeconfig)))
            if run == 0:
                assert f"keeping the cluster in {store}" in said
                await client.create(codecs.from_dict({"apiVersion": "v1", "kind": "ConfigMap",
                                                      "metadata": {"name": "kept", "namespace": "default"},
                                                      "data": {"a": "1"}}))
            else:
                assert "resumed" in said and str(store) in said
                kept = await client.get(ConfigMap, "kept", namespace="default")
                assert kept.data == {"a": "1"}
            await client.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 20)
        assert code == 0
