"""Fixtures of the CSI tests.

The Kubernetes side is either kubesim or, for calls that must be refused before any API request, an unreachable
server: a test passing there proves nothing was read or written.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from csi_support import CsiEndpoint, KubeCsi, close_endpoint, install_crds, open_endpoint

from operator_runtime.config import KubeConfig, make_api


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory for sockets (Unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="lo", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def offline_csi(short_dir: Path) -> AsyncIterator[CsiEndpoint]:
    """The CSI endpoint with an API server that cannot be reached (port 9, discard)."""
    api = make_api(KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "unused"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }))
    server, channel, endpoint = await open_endpoint(api, short_dir)
    yield endpoint
    await close_endpoint(server, channel, endpoint)
    await api.close()


@pytest.fixture
async def kube_csi_factory(kubesim: Any, short_dir: Path) -> AsyncIterator[Callable[..., Awaitable[KubeCsi]]]:
    api = make_api(str(kubesim.kubeconfig_path))
    await install_crds(api)
    opened: list[tuple[grpc.aio.Server, grpc.aio.Channel, CsiEndpoint]] = []

    async def factory(*, listener_wait_seconds: float = 0.0) -> KubeCsi:
        server, channel, endpoint = await open_endpoint(api, short_dir,
                                                        listener_wait_seconds=listener_wait_seconds)
        opened.append((server, channel, endpoint))
        return KubeCsi(api, endpoint)

    yield factory
    for server, channel, endpoint in opened:
        await close_endpoint(server, channel, endpoint)
    await api.close()


@pytest.fixture
async def kube_csi(kube_csi_factory: Callable[..., Awaitable[KubeCsi]]) -> KubeCsi:
    return await kube_csi_factory()
