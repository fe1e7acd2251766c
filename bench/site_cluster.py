"""A service-network site on kubesim for the benchmarks: one cluster (one node, in this process) with the
``skupper.io`` CRDs, the project's image on its node, a namespace and the site controller (with a grant server on
the cluster's loopback block when asked), and the small helpers the benchmarks use on it. Used by
``recovery_bench.py`` and ``cli_bench.py``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ["GROUP", "create", "site_cluster", "wait_for"]

GROUP = "skupper.io/v2alpha1"


@contextlib.asynccontextmanager
async def site_cluster(state: Path, namespace: str, *, grant_server: bool = False,
                       kubeconfig: Path | None = None) -> AsyncIterator[Any]:
    """kubesim under ``state`` with the site controller watching it; the router Deployments are deleted and the
    controller stopped at the end (the kubelet stops the router processes with their Pods)."""
    from devenv.image import load_project_image
    from kubesim.sim import KubeSim
    from service_network.crd.generate import all_crds
    from service_network.site.command import ControllerOptions, SiteControllerProcess
    from service_network.site.resources import RouterOptions

    options: dict[str, Any] = {"kubeconfig_path": kubeconfig} if kubeconfig is not None else {}
    async with KubeSim(nodes=1, state_dir=state, **options) as sim:
        api = sim.api
        for crd in all_crds():
            await api.create("customresourcedefinitions.apiextensions.k8s.io", crd)
        load_project_image(sim.cluster.runtime)
        await api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        address = (sim.address_block.client_ip(254), 8443) if grant_server else None
        stop = asyncio.Event()
        controller = SiteControllerProcess(ControllerOptions(
            kubeconfig=str(sim.kubeconfig_path), http_address=None, leader_elect=False, grant_server_address=address,
            router=RouterOptions(image="localhost/listener-operator:bench")))
        task = asyncio.create_task(controller.run(stop))
        try:
            yield sim
        finally:
            for deployment in (await api.list("deployments.apps", namespace))[0]:
                await api.delete("deployments.apps", deployment["metadata"]["name"], namespace)
            stop.set()
            await asyncio.wait_for(task, 60)
            for pod in (await api.list("pods", namespace))[0]:
                await api.delete("pods", pod["metadata"]["name"], namespace)


async def create(api: Any, namespace: str, kind: str, name: str, spec: dict[str, Any]) -> None:
    """A ``skupper.io`` object of ``kind``."""
    await api.create(f"{kind.lower()}s.skupper.io", {"apiVersion": GROUP, "kind": kind,
                                                     "metadata": {"name": name, "namespace": namespace},
                                                     "spec": spec}, namespace)


async def wait_for(check: Callable[[], Awaitable[Any]], within: float, what: str) -> Any:
    """The first truthy result of ``check``, polled every half second; RuntimeError naming ``what`` after
    ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{what}: not within {within} s")
