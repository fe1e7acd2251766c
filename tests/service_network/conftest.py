"""Fixtures of the router tests: short state directories, backends stopped at the end, and networks of routers
(``net``). The router binary is found as the adaptor finds it (``$ROUTER_BIN``, which ./scripts/test sets after
building it); when it is missing the tests fail with the message that says how to build it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from router_support import Backend


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


class Network:
    """Sites, routers and cables of one test; everything is stopped and removed at the end."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.sites: dict[str, object] = {}
        self.routers: list = []
        self.cables: list = []

    def site(self, name: str):  # type: ignore[no-untyped-def]
        from network_support import NetSite
        if name not in self.sites:
            self.sites[name] = NetSite(self.dir, name)
        return self.sites[name]

    def router(self, site: str, name: str | None = None, **kwargs):  # type: ignore[no-untyped-def]
        from network_support import NetRouter
        r = NetRouter(self.site(site), name or site, **kwargs)
        self.routers.append(r)
        return r

    async def cable(self, router):  # type: ignore[no-untyped-def]
        from network_support import Cable
        c = await Cable(router.host, router.access_port).start()
        self.cables.append(c)
        return c

    async def close(self) -> None:
        for r in self.routers:
            await r.stop()
            r.cleanup()
        for c in self.cables:
            await c.stop()


@pytest.fixture
async def net() -> AsyncIterator[Network]:
    directory = Path(tempfile.mkdtemp(prefix="snnet-", dir="/tmp"))
    network = Network(directory)
    try:
        yield network
    finally:
        await network.close()
        shutil.rmtree(directory, ignore_errors=True)
