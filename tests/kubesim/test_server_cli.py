"""`kubesim serve` as a process: prints the URL, writes a working kubeconfig, exits on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import Namespace


async def test_serve_prints_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kubesim.cli", "serve", "--host", "127.0.0.1", "--port", "0", "--kubeconfig", str(kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
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
