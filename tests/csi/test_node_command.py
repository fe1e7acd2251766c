"""``listener-operator run node`` as a process: serves on a private socket, answers, and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any

import grpc

from csi_proto import csi_pb2, csi_pb2_grpc
from listener_operator.constants import TOPOLOGY_KEY_HOSTNAME


async def spawn(*args: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k not in ("CSI_ENDPOINT", "KUBERNETES_NODE_NAME", "KUBELET_DIR")}
    return await asyncio.create_subprocess_exec(sys.executable, "-m", "listener_operator.cli", "run", "node", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env=env)


def socket_mode(path: Path) -> int | None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    return stat.S_IMODE(mode) if stat.S_ISSOCK(mode) else None


async def test_run_node_serves_and_stops_on_sigterm(kubesim: Any, short_dir: Path) -> None:
    socket = short_dir / "node.sock"
    kubelet = short_dir / "kubelet"
    # /metrics on a free loopback port: the default 0.0.0.0:8081 may be taken by another process on this machine
    process = await spawn("--csi-endpoint", f"unix://{socket}", "--node-name", "worker-7", "--kubelet-dir",
                          str(kubelet), "--kubeconfig", str(kubesim.kubeconfig_path), "--http-address", "127.0.0.1:0")
    try:
        for _ in range(400):
            if socket_mode(socket) is not None or process.returncode is not None:
                break
            await asyncio.sleep(0.05)
        assert socket_mode(socket) == 0o600
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            info = await csi_pb2_grpc.IdentityStub(channel).GetPluginInfo(csi_pb2.GetPluginInfoRequest())
            node = await csi_pb2_grpc.NodeStub(channel).NodeGetInfo(csi_pb2.NodeGetInfoRequest())
        assert info.name == "listeners.stackable.tech"
        assert node.node_id == "worker-7"
        assert dict(node.accessible_topology.segments) == {TOPOLOGY_KEY_HOSTNAME: "worker-7"}
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, stderr.decode()
    assert socket_mode(socket) is None


async def test_run_node_requires_endpoint_and_node_name(short_dir: Path) -> None:
    process = await spawn("--csi-endpoint", f"unix://{short_dir}/x.sock")
    _, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert b"--node-name" in stderr
