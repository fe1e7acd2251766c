"""Several local clusters side by side, one per site of the network demo: each a :class:`~devenv.up.LocalCluster`
with the service network only (the chart's site controller Pod, which applies the CRDs; no listener operator), its own
address block ``127.N.0.0/16`` (each kubesim claims the lowest block no other cluster holds, so the blocks are
distinct), its own state directory ``<state dir>/<site>`` with its kubeconfig, and progress lines prefixed with the
site's name. They start one after another and stop together; a failure while starting stops those already up.

Clusters reach each other only through loopback addresses of their blocks (a LoadBalancer or node address of one
cluster is dialled by the routers of another), as clusters on one network would.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from devenv.up import Console, LocalCluster, LocalOptions

__all__ = ["LocalSites", "SiteConsole", "site_names"]

#: Site names by count: two sites are West and East (upstream's hello-world), three a chain West - Middle - East.
SITE_NAMES = {2: ("west", "east"), 3: ("west", "middle", "east")}


def site_names(count: int) -> tuple[str, ...]:
    """The sites of a network of ``count`` clusters (2 or 3)."""
    try:
        return SITE_NAMES[count]
    except KeyError:
        raise ValueError(f"a network demo has 2 or 3 sites, not {count}") from None


class SiteConsole(Console):
    """A console whose progress lines name the site they are about."""

    def __init__(self, site: str, stream: IO[str] | None = None) -> None:
        super().__init__(stream)
        self.site = site

    def step(self, message: str) -> None:
        super().step(f"[{self.site}] {message}")


@dataclass
class SiteOptions:
    state_dir: Path
    nodes: int = 1
    host: str = "127.0.0.1"


class LocalSites:
    """The clusters of the sites named, started in order and stopped together (``async with``)."""

    def __init__(self, names: tuple[str, ...], options: SiteOptions, console: Console | None = None) -> None:
        self.names = names
        self.options = options
        self.console = console or Console()
        self.clusters: dict[str, LocalCluster] = {}

    def __getitem__(self, name: str) -> LocalCluster:
        return self.clusters[name]

    def sim(self, name: str) -> Any:
        """The kubesim of site ``name``."""
        return self.clusters[name].sim

    async def __aenter__(self) -> LocalSites:
        try:
            for name in self.names:
                # each site starts new: the network demo tells its story from the beginning every time
                cluster = LocalCluster(LocalOptions(state_dir=self.options.state_dir / name, nodes=self.options.nodes,
                                                    host=self.options.host, operator=False, name=name, persist=False),
                                       SiteConsole(name, self.console.stream))
                await cluster.__aenter__()
                self.clusters[name] = cluster
        except BaseException:
            await self._shutdown()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._shutdown()

    async def _shutdown(self) -> None:
        clusters = list(self.clusters.values())
        self.clusters = {}
        await asyncio.gather(*(cluster.__aexit__(None, None, None) for cluster in reversed(clusters)),
                             return_exceptions=True)

    async def watch_children(self) -> None:
        """Return (raising :class:`~devenv.up.LocalError`) once a site controller of any site exits."""
        watches = [asyncio.ensure_future(cluster.watch_children()) for cluster in self.clusters.values()]
        try:
            done, _ = await asyncio.wait(watches, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                future.result()
        finally:
            for future in watches:
                future.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*watches, return_exceptions=True)
