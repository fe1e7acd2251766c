"""The end-to-end environment of the site controller: kubesim with one node, the ``skupper.io`` CRDs, the site
controller running in this process (as ``run controller`` would), router Pods run for real as host processes
(``service-network run router``, bound to the Pod IP, with its ServiceAccount's token under RBAC) by kubesim's
host-process runtime (``devenv.image``), and backend Pods: agnhost
(kubesim's built-in) or ``sn-test/echo`` (below: greets with the Pod name, then echoes, passing half-close on).

Every address is a loopback address of the cluster's block; clients dial Pod IPs and Service cluster IPs only."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from router_support import wait_until

from devenv.image import load_project_image
from kubesim.cluster.runtime.inprocess import InProcessHandler, Program, ProgramContext
from kubesim.cluster.runtime.registry import ContainerSpec
from kubesim.errors import ApiError
from kubesim.sim import KubeSim
from operator_runtime.api import WRITE_VERBS
from service_network.crd.generate import installed_crds
from service_network.site.command import ControllerOptions, SiteControllerProcess
from service_network.site.resources import RouterOptions

GV = "skupper.io/v2alpha1"
NS = "west"
ROUTER_IMAGE = "localhost/listener-operator:0.1.0"  # the project image (devenv.image)
ECHO_IMAGE = "sn-test/echo"
AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.53"
RESOURCES = {"Site": "sites.skupper.io", "Listener": "listeners.skupper.io", "Connector": "connectors.skupper.io",
             "RouterAccess": "routeraccesses.skupper.io", "Link": "links.skupper.io",
             "AccessGrant": "accessgrants.skupper.io", "AccessToken": "accesstokens.skupper.io",
             "AttachedConnector": "attachedconnectors.skupper.io",
             "AttachedConnectorBinding": "attachedconnectorbindings.skupper.io",
             "MultiKeyListener": "multikeylisteners.skupper.io", "Certificate": "certificates.skupper.io"}
CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"


def _echo_program(spec: ContainerSpec) -> Program:
    ports = spec.declared_ports() or [7000]

    async def main(ctx: ProgramContext) -> int:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                writer.write(f"{ctx.hostname}\n".encode())
                await writer.drain()
                while data := await reader.read(256 * 1024):
                    writer.write(data)
                    await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()        # the client's half-close, passed on after echoing everything
                await writer.drain()
                await reader.read()           # until the client closes its side too
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        async def bind() -> asyncio.Server:
            return await asyncio.start_server(serve, ctx.pod_ip, ports[0])

        return await ctx.serve([(f"tcp {ports[0]}", bind)], f"echo on {ctx.pod_ip}:{ports[0]}")

    return main


def echo_handler() -> InProcessHandler:
    return InProcessHandler(_echo_program)


class RunningController:
    def __init__(self, process: SiteControllerProcess, task: asyncio.Task[int], stop: asyncio.Event,
                 requests: list[tuple[str, str]]) -> None:
        self.process = process
        self.task = task
        self.stop_event = stop
        self.requests = requests

    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] in WRITE_VERBS]

    async def stop(self) -> int:
        self.stop_event.set()
        return await asyncio.wait_for(self.task, 30)


class SiteEnv:
    """One cluster with one site namespace (``namespace``, default ``west``)."""

    def __init__(self, sim: KubeSim, namespace: str | None = None) -> None:
        self.sim = sim
        self.api = sim.api
        self.namespace = namespace or NS
        self.controllers: list[RunningController] = []

    # ---- processes -----------------------------------------------------------------------------------------------
    async def start_controller(self, **options: Any) -> RunningController:
        settings: dict[str, Any] = {"kubeconfig": str(self.sim.kubeconfig_path), "http_address": None,
                                    "leader_elect": False, "workers": 2,
                                    "router": RouterOptions(image=ROUTER_IMAGE),
                                    # the redemption server on an address of this cluster's block
                                    "grant_server_address": (self.sim.address_block.client_ip(254), 0)}
        settings.update(options)
        requests: list[tuple[str, str]] = []
        process = SiteControllerProcess(ControllerOptions(**settings),
                                        on_request=lambda verb, res: requests.append((verb, res)))
        stop = asyncio.Event()
        running = RunningController(process, asyncio.create_task(process.run(stop)), stop, requests)
        self.controllers.append(running)
        await self.wait_for(lambda: _synced(process), 30, "controller caches synced")
        return running

    async def close(self) -> None:
        for controller in self.controllers:
            if not controller.task.done():
                await controller.stop()
        # Router Pods are host processes: delete their workloads and Pods through the API so that the kubelet
        # stops their containers.
        with contextlib.suppress(ApiError):
            for deployment in (await self.api.list("deployments.apps", self.namespace))[0]:
                await self.api.delete("deployments.apps", deployment["metadata"]["name"], self.namespace)
            for pod in (await self.api.list("pods", self.namespace))[0]:
                await self.api.delete("pods", pod["metadata"]["name"], self.namespace)
        try:
            await self.wait_for(self._no_router_processes, 60, "router processes stopped")
        except AssertionError as failure:   # say which Pods stayed, and in which state, so a failure can be read
            pods, _ = await self.api.list("pods", self.namespace)
            left = [(p["metadata"]["name"], p.get("status", {}).get("phase"), p["metadata"].get("deletionTimestamp"))
                    for p in pods]
            raise AssertionError(f"{failure}; Pods left (name, phase, deletionTimestamp): {left[:20]}") from None

    async def _no_router_processes(self) -> bool:
        pods, _ = await self.api.list("pods", self.namespace)
        return not pods

    # ---- objects -------------------------------------------------------------------------------------------------
    async def create(self, kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        namespace = namespace or self.namespace
        return await self.api.create(RESOURCES[kind], {"apiVersion": GV, "kind": kind,
                                                       "metadata": {"name": name, "namespace": namespace},
                                                       "spec": spec}, namespace)

    async def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return await self.api.get(RESOURCES[kind], name, namespace or self.namespace)

    async def update_spec(self, kind: str, name: str, **fields: Any) -> dict[str, Any]:
        obj = await self.get(kind, name)
        obj["spec"].update(fields)
        for key in [k for k, v in fields.items() if v is None]:
            obj["spec"].pop(key)
        return await self.api.update(RESOURCES[kind], obj)

    async def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        await self.api.delete(RESOURCES[kind], name, namespace or self.namespace)

    async def status(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        try:
            return (await self.get(kind, name, namespace)).get("status") or {}
        except ApiError as error:
            if error.code == 404:
                return {}
            raise

    async def wait_status(self, kind: str, name: str, status: str, message: str | None = None,
                          within: float = 20.0) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            current = await self.status(kind, name)
            if current.get("status") == status and (message is None or current.get("message") == message):
                return current
            return None
        return await self.wait_for(check, within, f"{kind} {name} {status} {message or ''}")

    async def deployment(self, name: str, image: str, replicas: int, labels: dict[str, str],
                         args: list[str] | None = None, port: int = 7000) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "main", "image": image, "ports": [{"containerPort": port}]}
        if args:
            container["args"] = args
        return await self.api.create("deployments.apps", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}, self.namespace)

    async def ready_pods(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        pods, _ = await self.api.list("pods", self.namespace, label_selector=selector)
        return [p for p in pods if not p["metadata"].get("deletionTimestamp") and any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in p.get("status", {}).get("conditions", []))]

    async def wait_ready_pods(self, labels: dict[str, str], count: int, within: float = 30.0) -> list[dict[str, Any]]:
        async def check() -> list[dict[str, Any]] | None:
            pods = await self.ready_pods(labels)
            return pods if len(pods) == count else None
        return await self.wait_for(check, within, f"{count} ready pods {labels}")

    async def router_pod(self, within: float = 30.0) -> dict[str, Any]:
        pods = await self.wait_ready_pods({"skupper.io/component": "router"}, 1, within)
        return pods[0]

    async def service(self, name: str) -> dict[str, Any]:
        return await self.api.get("services", name, self.namespace)

    async def router_endpoint(self, listener: str, host: str) -> tuple[str, int]:
        """The router Pod's IP and the router port of ``listener`` (what the Service forwards to)."""
        pod = await self.router_pod()
        service = await self.wait_for(lambda: self.service(host), 20, f"Service {host}")
        port = next(p["targetPort"] for p in service["spec"]["ports"] if p["name"] == listener)
        return pod["status"]["podIP"], int(port)

    async def wait_for(self, check: Callable[[], Awaitable[Any]], within: float = 20.0, what: str = "") -> Any:
        """The first truthy result of ``check`` (an object not found counts as not yet)."""
        async def found() -> Any:
            try:
                return await check()
            except ApiError as error:
                if error.code != 404:
                    raise
                return None
        return await wait_until(found, within, what)


async def _synced(process: SiteControllerProcess) -> bool:
    return process.controller is not None and process.controller.synced


@contextlib.asynccontextmanager
async def site_environment(namespace: str = NS) -> AsyncIterator[SiteEnv]:
    """One cluster (its own address block: several run side by side) with the namespace ``namespace``."""
    state = Path(tempfile.mkdtemp(prefix="sn", dir="/tmp"))
    try:
        async with KubeSim(nodes=1, state_dir=state) as sim:
            for crd in installed_crds():
                await sim.api.create(CRD_RESOURCE, crd)
            assert sim.cluster is not None
            load_project_image(sim.cluster.runtime)
            sim.cluster.runtime.register(ECHO_IMAGE, echo_handler())
            await sim.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            env = SiteEnv(sim, namespace)
            try:
                yield env
            finally:
                await env.close()
    finally:
        shutil.rmtree(state, ignore_errors=True)
