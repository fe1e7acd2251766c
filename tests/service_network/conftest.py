"""Fixtures of the router tests. HAProxy is required: when it is missing the tests fail with the message that says
how to install it (./scripts/test installs it), they are never skipped."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from router_support import Backend

from service_network.router.errors import HaproxyNotFound
from service_network.router.process import find_haproxy


@pytest.fixture
def haproxy() -> str:
    try:
        return find_haproxy()
    except HaproxyNotFound as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A short state directory (Unix socket paths are limited to 107 bytes), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="snr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def backends() -> AsyncIterator[list[Backend]]:
    """Started backends are appended here by ``start_backend`` and stopped at the end of the test."""
    started: list[Backend] = []
    yield started
    for b in started:
        await b.stop()


@pytest.fixture
def start_backend(backends: list[Backend]):  # type: ignore[no-untyped-def]
    async def start(name: str, host: str | None = None, **kwargs) -> Backend:  # type: ignore[no-untyped-def]
        b = await Backend(name, host, **kwargs).start()
        backends.append(b)
        return b
    return start
