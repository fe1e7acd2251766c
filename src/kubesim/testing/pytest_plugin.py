"""pytest fixture `kubesim`: a fresh API server (no nodes) per test, with its kubeconfig written.

Registered through the `pytest11` entry point, so any test can request `kubesim` without importing it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from kubesim.sim import KubeSim


@pytest_asyncio.fixture
async def kubesim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with KubeSim(kubeconfig_path=tmp_path / "kubeconfig") as sim:
        yield sim
