"""How `local up` installs the operator: the Helm chart, rendered and applied as a user does, run by kubesim.

``helm template`` renders ``deploy/helm/listener-operator`` (the pinned Helm of the virtualenv) with the values a
local cluster needs - only the ``preset``: the image name, ``kubeletDir`` and everything else are the chart's
defaults, which kubesim understands as a real cluster would (its nodes run the project's image from this checkout,
and ``/var/lib/kubelet`` is each simulated node's kubelet directory). The objects are server-side applied through
kubesim's API in file order after their namespace, as ``kubectl create namespace`` + ``kubectl apply
--server-side`` would. kubesim then runs the Pods: the controller Deployment and one node-plugin Pod per node, the
operator as processes, the sidecars emulated.

``OperatorPods`` follows those Pods: whether everything the operator provides is there (CRDs established, preset
ListenerClasses, the CSI driver registered on every node and attached to the provisioner; with the service network,
the skupper.io CRDs its site controller applies and that controller Ready), and which container crashed, with the
end of its log.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from listener_operator.constants import DRIVER_NAME
from operator_runtime.objects import items

RELEASE = "listener-operator"
NAMESPACE = "listener-operator"
CHART_DIR = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "listener-operator"
FIELD_MANAGER = "kubectl"
HELM_TIMEOUT = 60.0
CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"
LISTENER_CLASSES = "listenerclasses.listeners.stackable.tech"
SITES = "sites.skupper.io"
#: The chart's templates of the service network (``--show-only``: a cluster with the service network alone).
SERVICE_NETWORK_TEMPLATES = ("templates/service-network-rbac.yaml", "templates/service-network-controller.yaml")
#: The role label of the site controller's Pods (the chart's ``serviceNetwork.enabled``).
SITE_CONTROLLER_ROLE = "service-network-controller"
PRESET_CLASSES = {"none": set(), "ephemeral-nodes": {"cluster-internal", "external-unstable", "external-stable"},
                  "stable-nodes": {"cluster-internal", "external-unstable", "external-stable"}}
LOG_TAIL_LINES = 20


class InstallError(Exception):
    """The install failed in a way the person running `local up` must see as one message."""


def find_helm() -> str:
    """The virtualenv's pinned Helm (``scripts/install-helm``), else one on PATH."""
    pinned = Path(sys.executable).parent / "helm"
    if pinned.is_file():
        return str(pinned)
    found = shutil.which("helm")
    if found:
        return found
    raise InstallError(f"helm is not installed: run scripts/install-helm (it puts the pinned Helm into "
                       f"{pinned.parent})")


async def render_chart(values: Mapping[str, str], *, chart: Path = CHART_DIR, namespace: str = NAMESPACE,
                       release: str = RELEASE, only: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``helm template`` of the chart with ``--set`` values (``only``: these templates alone); the objects in file
    order."""
    if not (chart / "Chart.yaml").is_file():
        raise InstallError(f"the Helm chart is not at {chart} (local up runs from a checkout of the project)")
    argv = [find_helm(), "template", release, str(chart), "--namespace", namespace]
    for key, value in values.items():
        argv += ["--set", f"{key}={value}"]
    for template in only:
        argv += ["--show-only", template]
    process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(), HELM_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise InstallError(f"helm template did not finish within {HELM_TIMEOUT:.0f}s") from None
    if process.returncode != 0:
        raise InstallError(f"helm template failed: {err.decode(errors='replace').strip()[-1000:]}")
    return [doc for doc in yaml.safe_load_all(out.decode()) if isinstance(doc, dict)]


def resource_key(registry: Any, api_version: str, kind: str) -> str:
    """The in-process API's resource name (``plural[.group]``) of a kind."""
    group, _, version = api_version.rpartition("/")
    for rt in registry.types():
        if rt.group == group and rt.version == version and rt.kind == kind:
            return str(rt.key)
    raise InstallError(f"kubesim does not serve {kind} ({api_version}), which the chart renders")


async def apply_objects(sim: Any, objects: list[dict[str, Any]], namespace: str) -> None:
    """The namespace, then every object, server-side applied (what ``kubectl apply --server-side`` does). On a
    resumed cluster they exist already: applying them again changes only what the chart now renders differently."""
    from kubesim.errors import ApiError

    api = sim.api
    try:
        try:
            await api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        except ApiError as error:
            if error.code != 409:
                raise
        for obj in objects:
            key = resource_key(sim.store.registry, str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
            metadata = obj.get("metadata") or {}
            await api.patch(key, metadata["name"], obj, namespace=metadata.get("namespace"), patch_type="apply",
                            field_manager=FIELD_MANAGER, force=True)
    except ApiError as error:
        raise InstallError(f"applying the chart failed: {error.message[:500]}") from None


@dataclass(frozen=True)
class Crash:
    """A container of an operator Pod that exited with an error."""

    pod: str
    container: str
    exit_code: int | None
    restarts: int
    back_off: bool  # CrashLoopBackOff
    log_path: Path | None

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if self.log_path is None:
            return "(no log)"
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def describe(self) -> str:
        state = "is in CrashLoopBackOff" if self.back_off else "exited"
        code = f" (exit code {self.exit_code})" if self.exit_code is not None else ""
        where = f"; last lines of {self.log_path}" if self.log_path else ""
        return (f"operator Pod {NAMESPACE}/{self.pod}: container {self.container} {state}{code} after "
                f"{self.restarts} restart(s){where}:\n{self.tail()}")


def crashes(pod: Mapping[str, Any], log_path: Callable[[str, str], Path | None]) -> list[Crash]:
    """The containers of ``pod`` that terminated with an error (now or in their last run). A last run that ended
    ``Unknown`` was stopped with its node (a restart of the local cluster), which is no crash."""
    found = []
    for status in items(pod, "status", "containerStatuses"):
        state = status.get("state") or {}
        waiting = state.get("waiting") or {}
        last = (status.get("lastState") or {}).get("terminated") or {}
        if last.get("reason") == "Unknown":
            last = {}
        terminated = state.get("terminated") or last
        back_off = waiting.get("reason") == "CrashLoopBackOff"
        code = terminated.get("exitCode")
        if back_off or (isinstance(code, int) and code != 0):
            name = str(status.get("name", ""))
            found.append(Crash(pod=str(pod["metadata"]["name"]), container=name,
                               exit_code=code if isinstance(code, int) else None,
                               restarts=int(status.get("restartCount") or 0), back_off=back_off,
                               log_path=log_path(str(pod["metadata"]["name"]), name)))
    return found


class OperatorPods:
    """The operator's Pods in kubesim: health, crashes, logs."""

    def __init__(self, sim: Any, preset: str, namespace: str = NAMESPACE, *, listener_operator: bool = True,
                 service_network: bool = False) -> None:
        self.sim = sim
        self.preset = preset
        self.namespace = namespace
        self.listener_operator = listener_operator
        self.service_network = service_network

    def log_path(self, pod: str, container: str) -> Path | None:
        path: Path | None = self.sim.cluster.container_log_path(self.namespace, pod, container)
        return path

    async def pods(self) -> list[dict[str, Any]]:
        found, _ = await self.sim.api.list("pods", self.namespace)
        return list(found)

    async def crash(self, *, only_back_off: bool) -> Crash | None:
        for pod in await self.pods():
            for found in crashes(pod, self.log_path):
                if found.back_off or not only_back_off:
                    return found
        return None

    async def healthy(self) -> str | None:
        """None when the operator provides everything; otherwise what is still missing."""
        crds, _ = await self.sim.api.list(CRD_RESOURCE)
        established = {crd["metadata"]["name"] for crd in crds
                       if any(c.get("type") == "Established" and c.get("status") == "True"
                              for c in items(crd, "status", "conditions"))}
        if self.service_network:
            if SITES not in established:
                return "the service network's CRDs (applied by its site controller)"
            if not await self._site_controller_ready():
                return "the service network's site controller"
        if not self.listener_operator:
            return None
        if f"{LISTENER_CLASSES}" not in established:
            return "the operator's CRDs"
        classes, _ = await self.sim.api.list(LISTENER_CLASSES)
        if not PRESET_CLASSES.get(self.preset, set()) <= {c["metadata"]["name"] for c in classes}:
            return "the preset ListenerClasses"
        for node in self.sim.cluster.nodes:
            from kubesim.errors import ApiError

            try:
                csinode = await self.sim.api.get("csinodes.storage.k8s.io", node)
            except ApiError:
                return f"the CSI driver on node {node}"
            if DRIVER_NAME not in {d.get("name") for d in items(csinode, "spec", "drivers")}:
                return f"the CSI driver on node {node}"
        if DRIVER_NAME not in self.sim.cluster.provisioner.plugins:
            return "the CSI controller (external-provisioner)"
        return None

    async def _site_controller_ready(self) -> bool:
        pods, _ = await self.sim.api.list("pods", self.namespace,
                                          label_selector=f"app.kubernetes.io/role={SITE_CONTROLLER_ROLE}")
        return any(condition.get("type") == "Ready" and condition.get("status") == "True"
                   for pod in pods if not pod["metadata"].get("deletionTimestamp")
                   for condition in items(pod, "status", "conditions"))

    async def wait_healthy(self, within: float, on_change: Callable[[str], None] | None = None) -> None:
        """Until healthy; ``InstallError`` naming a crashed container (with its log) or what is missing."""
        deadline = time.monotonic() + within
        missing: str | None = "the operator"
        while True:
            crashed = await self.crash(only_back_off=False)
            if crashed is not None:
                raise InstallError(crashed.describe())
            now_missing = await self.healthy()
            if now_missing is None:
                return
            if now_missing != missing and on_change is not None:
                on_change(now_missing)
            missing = now_missing
            if time.monotonic() > deadline:
                raise InstallError(f"timed out after {within:.0f}s waiting for {missing}\n{await self.summary()}")
            # The state spans Pods, CRDs, CSINodes and the provisioner; a short poll is simpler than four watches.
            await asyncio.sleep(0.1)

    async def summary(self) -> str:
        """One line per operator Pod with its containers' states and the end of each log."""
        lines = []
        for pod in await self.pods():
            name = pod["metadata"]["name"]
            states = ", ".join(f"{s.get('name')}: {next(iter(s.get('state') or {'unknown': {}}))}"
                               for s in items(pod, "status", "containerStatuses"))
            lines.append(f"--- {name} ({pod.get('status', {}).get('phase')}; {states or 'no containers yet'})")
            for container in items(pod, "spec", "containers"):
                path = self.log_path(name, str(container.get("name")))
                if path is not None and path.is_file():
                    tail = "\n".join(path.read_text(errors="replace").splitlines()[-5:])
                    lines.append(f"  {container.get('name')} ({path}):\n{tail}")
        return "\n".join(lines) or f"no Pods in namespace {self.namespace}"

    async def watch(self, on_restart: Callable[[Crash], None]) -> None:
        """Return (by raising InstallError) when an operator container goes into CrashLoopBackOff; ``on_restart``
        hears of every other crash (the kubelet restarts it)."""
        from kubesim.errors import ApiError

        seen: dict[tuple[str, str], int] = {}
        version: str | None = None
        while True:
            if version is None:
                current, version = await self.sim.api.list("pods", self.namespace)
                for pod in current:
                    self._check(pod, seen, on_restart)
            try:
                async for _event, pod in self.sim.api.watch("pods", self.namespace, resource_version=version):
                    version = pod["metadata"].get("resourceVersion", version)
                    self._check(pod, seen, on_restart)
            except ApiError as error:
                if error.code != 410:
                    raise
                version = None

    def _check(self, pod: dict[str, Any], seen: dict[tuple[str, str], int], on_restart: Callable[[Crash], None]
               ) -> None:
        for found in crashes(pod, self.log_path):
            if found.back_off:
                raise InstallError(found.describe())
            key = (found.pod, found.container)
            if seen.get(key) != found.restarts:
                seen[key] = found.restarts
                on_restart(found)

    async def save_logs(self, directory: Path) -> list[Path]:
        """Copy every operator container's log to ``directory`` (``<pod>_<container>.log``), e.g. before the
        cluster and its Pod directories go away."""
        saved = []
        with contextlib.suppress(Exception):
            await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
            for pod in await self.pods():
                for container in items(pod, "spec", "containers"):
                    name = f"{pod['metadata']['name']}_{container.get('name')}"
                    path = self.log_path(pod["metadata"]["name"], str(container.get("name")))
                    if path is not None and path.is_file():
                        target = directory / f"{name}.log"
                        await asyncio.to_thread(shutil.copyfile, path, target)
                        saved.append(target)
        return saved


async def install(sim: Any, preset: str, *, namespace: str = NAMESPACE, values: Mapping[str, str] | None = None,
                  only: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Render the chart (``preset`` plus ``values``; ``only``: these templates) and apply it; the objects applied."""
    objects = await render_chart({"preset": preset, **(values or {})}, namespace=namespace, only=only)
    await apply_objects(sim, objects, namespace)
    return objects

