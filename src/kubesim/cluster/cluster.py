"""``Cluster``: simulated nodes and cluster controllers (kubesim parts 2 and 3), composed.

``Cluster`` runs, against kubesim's in-process API client, everything a real cluster would do around a CSI
driver and its Pods: nodes with a kubelet each (which start containers through the runtime registry), the
scheduler, the external-provisioner, StatefulSet / Deployment / generic-ephemeral-volume controllers, Endpoints /
EndpointSlice controllers, a load-balancer controller and kube-proxy. All of it is driven by shared watches; all
on-disk state lives under ``state_dir``; every address it hands out is in its loopback address block. Each part is
a module of this package; this one builds them, starts and stops them (every stop step bounded), and answers for
nodes, plugins and names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from kubesim.addresses import AddressBlock, AddressBlockClaim, claim_address_block
from kubesim.cluster.base.apitypes import Api
from kubesim.cluster.base.background import BackgroundTasks
from kubesim.cluster.base.context import (
    CSI_NODES,
    NODES,
    PODS,
    SERVICES,
    WATCHED,
    ApiAccess,
    Context,
    Options,
)
from kubesim.cluster.base.indexes import PODS_BY_NODE, pod_node
from kubesim.cluster.base.informer import Informer
from kubesim.cluster.base.nodefs import NodeFilesystem
from kubesim.cluster.base.objects import check_dns_subdomain, name_of
from kubesim.cluster.controllers.daemonset import DaemonSetController
from kubesim.cluster.controllers.deployment import DeploymentController
from kubesim.cluster.controllers.endpoints import EndpointsController
from kubesim.cluster.controllers.ephemeral import EphemeralVolumeController
from kubesim.cluster.controllers.jobs import JobController
from kubesim.cluster.controllers.loadbalancer import LoadBalancerController
from kubesim.cluster.controllers.nodelifecycle import NodeLifecycleController
from kubesim.cluster.controllers.replicaset import ReplicaSetController
from kubesim.cluster.controllers.scheduler import Scheduler
from kubesim.cluster.controllers.statefulset import StatefulSetController
from kubesim.cluster.controllers.tainteviction import TaintEvictionController
from kubesim.cluster.csi.client import UNIX_PATH_MAX, socket_path_of
from kubesim.cluster.csi.plugin_watch import SocketWatcher
from kubesim.cluster.csi.provisioner import Provisioner
from kubesim.cluster.csi.sidecars import sidecar_handlers
from kubesim.cluster.dns.hostnames import ClusterDns
from kubesim.cluster.dns.names import lookup, resolve
from kubesim.cluster.kubelet.kubelet import FINALIZER, Kubelet
from kubesim.cluster.kubelet.nodes import create_node, node_addresses, set_node_ready, set_node_unschedulable
from kubesim.cluster.proxy import KubeProxy
from kubesim.cluster.runtime import RuntimeRegistry, default_registry
from kubesim.cluster.runtime.execution import ExecResult, run_command
from kubesim.cluster.runtime.rootfs import resolv_mount_problem
from kubesim.errors import ApiError

log = logging.getLogger(__name__)

__all__ = ["ApiAccess", "Cluster", "Options"]


#: How long one component may take to stop before it is abandoned (each step bounded, so a teardown never hangs).
STOP_STEP_SECONDS = 60.0


class ClusterStopError(RuntimeError):
    """Some component did not stop in time; the rest did (the message names the ones that did not)."""


async def _bounded(what: str, step: Awaitable[None], stuck: list[str]) -> None:
    """Await ``step`` for at most :data:`STOP_STEP_SECONDS`; past that, cancel it, note ``what`` and go on (a task
    that swallows its cancellation is left behind rather than waited for)."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=STOP_STEP_SECONDS)
    if task in done:
        task.result()
        return
    task.cancel()
    stuck.append(what)
    log.error("stopping %s did not finish within %.0fs; abandoned", what, STOP_STEP_SECONDS)


class Cluster:
    """The simulated cluster. ``await start()`` before use, ``await stop()`` when done.

    ``address_block``: the block number (1-254), an ``AddressBlockClaim`` held by the caller, or None for the
    lowest free block (see ``kubesim.addresses``); node N is 127.B.1.N, Pods get 127.B.128.0/17.
    ``runtime``: the image -> handler registry (default: ``runtime.default_registry()``).

    Options (keywords): ``node_name_prefix`` ("node"), ``node_external_ips`` (False: give every node an
    ExternalIP 127.B.2.N), ``node_internal_dns`` (False: give every node InternalDNS ``<name>.kubesim.internal``),
    ``load_balancer_ips`` (IPs, ``a-b`` ranges or CIDRs; default 127.B.3.1-127.B.3.254),
    ``load_balancer_hostnames`` (default none), ``mount_backoff`` / ``provision_backoff`` ((initial, max)
    seconds), ``restart_backoff`` (crash-loop back-off, default (10, 300) as the kubelet), ``job_backoff`` (the Job
    controller's wait before replacing a failed Pod, default (10, 360) as Kubernetes),
    ``rpc_timeout``, ``plugin_wait_timeout``, ``discover_plugins`` (True: plugins whose sockets appear
    at ``plugin_socket_path`` / ``controller_socket_path`` are registered without any call, as kubelet's plugin
    watcher and a co-located external-provisioner would), ``kubelet_root`` (the nodes' kubelet directory as Pods
    name it in ``hostPath`` volumes, default ``/var/lib/kubelet``; see ``nodefs``), ``runtime_dir`` (a short
    directory for the containers' run directories; default a fresh ``/tmp/ksr-*``, removed by ``stop()``).

    ``api_access``: the API server's address, CA and ServiceAccount tokens for the Pods (``KubeSim`` passes it);
    without it containers get no ``KUBERNETES_SERVICE_*`` variables and token volumes no token.
    """

    def __init__(
        self,
        api: Api,
        *,
        state_dir: Path,
        nodes: int = 0,
        address_block: int | AddressBlockClaim | None = None,
        runtime: RuntimeRegistry | None = None,
        api_access: ApiAccess | None = None,
        **options: Any,
    ) -> None:
        if nodes < 0 or nodes > 254:
            raise ValueError(f"nodes must be between 0 and 254, not {nodes}")
        for key in ("load_balancer_ips", "load_balancer_hostnames"):
            if key in options:
                value = options[key]
                options[key] = (value,) if isinstance(value, str) else tuple(value)
        unknown = set(options) - set(Options.__dataclass_fields__)
        if unknown:
            raise TypeError(f"unknown cluster options: {', '.join(sorted(unknown))}")
        if isinstance(address_block, AddressBlockClaim):
            self._claim, self._own_claim = address_block, False
        else:
            self._claim, self._own_claim = claim_address_block(address_block), True
        self.ctx = Context(
            api=api,
            state_dir=Path(state_dir),
            options=Options(**options),
            block=self._claim.block,
            api_access=api_access,
        )
        self.runtime = runtime if runtime is not None else default_registry()
        for image, handler in sidecar_handlers(self).items():
            if self.runtime.lookup(image) is None:
                self.runtime.register(image, handler)
        self._own_runtime_dir = False
        self.proxy: KubeProxy | None = None
        self._initial_nodes = nodes
        self._kubelets: dict[str, Kubelet] = {}
        self._node_index: dict[str, int] = {}
        self._started = False
        self._lock = asyncio.Lock()
        self.scheduler: Scheduler | None = None
        self.provisioner: Provisioner | None = None
        self._controllers: list[Any] = []
        self._controller_watcher: SocketWatcher | None = None
        self._background = BackgroundTasks()
        self._pod_dns: ClusterDns | None = None

    @property
    def api(self) -> Api:
        return self.ctx.api

    @property
    def state_dir(self) -> Path:
        return self.ctx.state_dir

    @property
    def address_block(self) -> AddressBlock:
        return self.ctx.block

    @property
    def nodes(self) -> list[str]:
        """Names of the nodes this cluster runs (added and not removed)."""
        return sorted(self._kubelets, key=lambda n: self._node_index[n])

    # --------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        if self._started:
            return
        self.ctx.state_dir.mkdir(parents=True, exist_ok=True)
        (self.ctx.state_dir / "kubelet").mkdir(exist_ok=True)
        if self.ctx.options.runtime_dir:
            self.ctx.runtime_dir = Path(self.ctx.options.runtime_dir)
            self.ctx.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            # Short on purpose: Unix sockets in containers' run directories must stay under 108 bytes.
            self.ctx.runtime_dir = Path(tempfile.mkdtemp(prefix="ksr-", dir="/tmp"))
            self._own_runtime_dir = True
        for resource in WATCHED:
            self.ctx.informers[resource] = Informer(self.ctx.api, resource)
        self.ctx.informer(PODS).add_index(PODS_BY_NODE, pod_node)
        self.scheduler = Scheduler(self.ctx)
        self.provisioner = Provisioner(self.ctx, on_failure=self.scheduler.claim_failed)
        self.proxy = KubeProxy(self.ctx)
        self._controllers = [
            self.scheduler,
            self.provisioner,
            StatefulSetController(self.ctx),
            DeploymentController(self.ctx),
            ReplicaSetController(self.ctx),
            JobController(self.ctx),
            DaemonSetController(self.ctx),
            EphemeralVolumeController(self.ctx),
            EndpointsController(self.ctx),
            LoadBalancerController(self.ctx),
            NodeLifecycleController(self.ctx),
            TaintEvictionController(self.ctx),
            self.proxy,
        ]
        self.ctx.informer(PODS).add_handler(self._route_pod_event)
        for resource in ("persistentvolumeclaims", "persistentvolumes", "csidrivers.storage.k8s.io"):
            self.ctx.informer(resource).add_handler(self._resync_kubelets)
        await asyncio.gather(*(informer.start() for informer in self.ctx.informers.values()))
        for controller in self._controllers:
            controller.start()
        self._started = True
        if self.ctx.options.discover_plugins:
            self._controller_watcher = SocketWatcher(
                self.ctx.state_dir / "controller", self._controller_socket_added, lambda driver, socket: None
            )
            self._controller_watcher.start()
        await self._start_pod_dns()
        self._adopt_pod_ips()
        for name, (internal_ip, external_ip, internal_dns) in self._stored_nodes():
            await self.add_node(name, internal_ip=internal_ip, external_ip=external_ip, internal_dns=internal_dns)
        while len(self._kubelets) < self._initial_nodes:
            await self.add_node()

    async def _start_pod_dns(self) -> None:
        """The cluster DNS Pods name in their resolv.conf: on port 53 of the block's DNS address, which glibc's
        resolver needs; where that or a private mount namespace per container cannot be had, one line says so and
        Pods resolve with this machine's resolver."""
        if not self.ctx.options.pod_dns:
            return
        problem = resolv_mount_problem()
        if problem is None:
            dns = ClusterDns(self.lookup)
            try:
                await dns.start(self.ctx.block.dns_ip, 53, any_port=False)
            except OSError as error:
                problem = f"port 53 of {self.ctx.block.dns_ip} cannot be bound ({error.strerror or error})"
            else:
                self._pod_dns = dns
                self.ctx.cluster_dns = self.ctx.block.dns_ip
                return
        log.warning("Pods resolve names with this machine's resolver, not the cluster DNS: %s", problem)

    @property
    def pod_dns_address(self) -> tuple[str, int] | None:
        """Where the cluster DNS the Pods use answers (None: Pods do not get it)."""
        return self._pod_dns.address if self._pod_dns is not None else None

    def _adopt_pod_ips(self) -> None:
        """Pod IPs stored Pods hold (a resumed cluster) are not handed out again; each Pod keeps its own."""
        for pod in self.ctx.informer(PODS).items():
            status = pod.get("status") or {}
            if status.get("podIP") and (pod.get("spec") or {}).get("nodeName"):
                self.ctx.pod_ips.adopt(pod["metadata"]["uid"], str(status["podIP"]))

    def _stored_nodes(self) -> list[tuple[str, tuple[str, str | None, str | None]]]:
        """Nodes of this cluster the API already has (a resumed cluster): name and (InternalIP, ExternalIP,
        InternalDNS), by node number."""
        found: list[tuple[int, str, tuple[str, str | None, str | None]]] = []
        for node in self.ctx.informer(NODES).items():
            addresses = {a.get("type"): a.get("address") for a in node.get("status", {}).get("addresses") or []}
            internal = addresses.get("InternalIP")
            number = self.ctx.block.node_number(str(internal)) if internal else None
            if number is None:
                continue
            found.append((number, name_of(node), (str(internal), addresses.get("ExternalIP"),
                                                  addresses.get("InternalDNS"))))
        return [(name, addresses) for _, name, addresses in sorted(found)]

    async def stop(self) -> None:
        """Stop every component, servers and relayed connections included; Kubernetes objects stay as they are
        (the API server outlives the cluster). A block this cluster claimed itself is released."""
        if not self._started:
            if self._own_claim:
                self._claim.release()
            return
        self._started = False
        if self._controller_watcher is not None:
            self._controller_watcher.stop()
            self._controller_watcher = None
        stuck: list[str] = []
        await _bounded("background tasks", self._background.cancel_all(), stuck)
        for name, kubelet in self._kubelets.items():
            await _bounded(f"the kubelet of {name}", kubelet.stop(), stuck)
        for controller in self._controllers:
            await _bounded(f"controller {type(controller).__name__}", controller.stop(), stuck)
        if self._pod_dns is not None:
            await _bounded("the cluster DNS", self._pod_dns.stop(), stuck)
            self._pod_dns, self.ctx.cluster_dns = None, None
        for resource, informer in self.ctx.informers.items():
            await _bounded(f"the {resource} informer", informer.stop(), stuck)
        if self._own_runtime_dir and self.ctx.runtime_dir is not None:
            shutil.rmtree(self.ctx.runtime_dir, ignore_errors=True)
            self.ctx.runtime_dir = None
        if self._own_claim:
            self._claim.release()
        if stuck:
            raise ClusterStopError(f"the cluster stopped, but these did not finish within {STOP_STEP_SECONDS:.0f}s "
                                   f"and were abandoned: {', '.join(stuck)}")

    async def __aenter__(self) -> Cluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------- nodes

    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("the cluster is not started")

    def _kubelet(self, node: str) -> Kubelet:
        kubelet = self._kubelets.get(node)
        if kubelet is None:
            raise KeyError(f"no node {node!r} in this cluster")
        return kubelet

    async def add_node(
        self,
        name: str | None = None,
        *,
        internal_ip: str | None = None,
        external_ip: str | None = None,
        internal_dns: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> str:
        """Add a Ready node with its kubelet; returns its name. Addresses default to the cluster options."""
        self._require_started()
        async with self._lock:
            stored = self.ctx.block.node_number(internal_ip) if internal_ip else None
            index = stored if stored is not None and stored not in self._node_index.values() else \
                max(self._node_index.values(), default=0) + 1
            if index > 254:
                raise RuntimeError(f"no node address left in address block {self.ctx.block.index}")
            name = name or f"{self.ctx.options.node_name_prefix}-{index}"
            check_dns_subdomain(name, "node name")
            if name in self._kubelets:
                raise ValueError(f"node {name!r} already exists")
            self._node_index[name] = index
        internal_ip = internal_ip or self.ctx.block.node_internal_ip(index)
        if external_ip is None and self.ctx.options.node_external_ips:
            external_ip = self.ctx.block.node_external_ip(index)
        if internal_dns is None and self.ctx.options.node_internal_dns:
            internal_dns = f"{name}.kubesim.internal"
        _check_socket_room(self.ctx.kubelet_dir(name))
        try:
            await create_node(
                self.ctx.api,
                name,
                addresses=node_addresses(name, internal_ip, external_ip, internal_dns),
                labels=labels,
            )
        except BaseException:
            self._node_index.pop(name, None)
            raise
        kubelet = Kubelet(self.ctx, name, internal_ip, self.runtime)
        self._kubelets[name] = kubelet
        await kubelet.take_up_pods()  # a resumed cluster's Pods on this node: gone with it, until started again
        kubelet.start()
        return name

    async def remove_node(self, name: str) -> None:
        """Delete the node: kubelet stops, Node and CSINode go, its Pods are force-deleted (as Pod GC does)."""
        kubelet = self._kubelet(name)
        await kubelet.stop()
        del self._kubelets[name]
        self._node_index.pop(name, None)
        for resource in (CSI_NODES, NODES):
            with contextlib.suppress(ApiError):
                await self.ctx.api.delete(resource, name)
        for pod in self.ctx.informer(PODS).by_index(PODS_BY_NODE, name):
            await self._force_delete_pod(pod)

    async def _force_delete_pod(self, pod: dict[str, Any]) -> None:
        namespace = pod["metadata"].get("namespace")
        finalizers = [f for f in pod["metadata"].get("finalizers") or [] if f != FINALIZER]
        with contextlib.suppress(ApiError):
            await self.ctx.api.patch(
                PODS, name_of(pod), {"metadata": {"finalizers": finalizers or None}}, namespace=namespace
            )
        with contextlib.suppress(ApiError):
            await self.ctx.api.delete(PODS, name_of(pod), namespace)

    async def cordon_node(self, name: str) -> None:
        """Mark the node unschedulable (running Pods stay)."""
        self._kubelet(name)
        await set_node_unschedulable(self.ctx.api, name, True)

    async def uncordon_node(self, name: str) -> None:
        self._kubelet(name)
        await set_node_unschedulable(self.ctx.api, name, False)

    def node_running(self, name: str) -> bool:
        """Whether the node's kubelet runs (False: stopped with ``stop_node``)."""
        return self._kubelet(name).running

    async def stop_node(self, name: str) -> None:
        """The node goes down: its kubelet stops (no more Lease renewals or status reports), its Pods' containers stop
        and nothing answers on its addresses. The API shows nothing of it at first; the node-lifecycle controller
        marks it ``Unknown`` and taints it once its grace period is over, and its Pods are evicted when their
        tolerations run out. Stopping a stopped node does nothing."""
        kubelet = self._kubelet(name)
        if not kubelet.running:
            return
        await kubelet.stop()
        if self.proxy is not None:
            self.proxy.node_running(name, False)

    async def start_node(self, name: str) -> None:
        """The node comes back (as after a reboot): a fresh kubelet reports it Ready, renews its Lease, finishes the
        deletion of its Pods that were evicted meanwhile and starts the others again (volumes published anew, one
        restart more each); the node-lifecycle controller removes its taints. Starting a running node does
        nothing."""
        old = self._kubelet(name)
        if old.running:
            return
        node = await self.ctx.api.get(NODES, name)
        await create_node(self.ctx.api, name, addresses=list(node.get("status", {}).get("addresses") or []),
                          labels=None, boot_id=str(uuid.uuid4()))
        kubelet = Kubelet(self.ctx, name, old.host_ip, self.runtime)
        self._kubelets[name] = kubelet
        await kubelet.take_up_pods()
        kubelet.start()
        if self.proxy is not None:
            self.proxy.node_running(name, True)

    async def restart_node(self, name: str) -> None:
        await self.stop_node(name)
        await self.start_node(name)

    async def control_node(self, name: str, action: str) -> bool:
        """``stop``, ``start`` or ``restart`` a node (the admin endpoint behind ``kubesim node``); whether it runs
        afterwards. ``KeyError`` for a node this cluster does not have, ``ValueError`` for another action."""
        actions = {"stop": self.stop_node, "start": self.start_node, "restart": self.restart_node}
        if action not in actions:
            raise ValueError(f"unknown node action {action!r}: stop, start or restart")
        self._kubelet(name)
        await actions[action](name)
        return self.node_running(name)

    def node_states(self) -> dict[str, bool]:
        """Every node of this cluster and whether it runs."""
        return {name: kubelet.running for name, kubelet in self._kubelets.items()}

    async def fail_node(self, name: str) -> None:
        """The node's kubelet stops after reporting the node ``Ready=False`` (not-ready rather than unreachable): the
        node-lifecycle controller taints it and marks its Pods not Ready at once."""
        await self.stop_node(name)
        await set_node_ready(self.ctx.api, name, False, "kubelet stopped posting node status")

    async def recover_node(self, name: str) -> None:
        """The counterpart of ``fail_node`` (and of ``stop_node``): the node starts again."""
        await self.start_node(name)

    # -------------------------------------------------------------------- pods

    async def set_pod_ready(self, namespace: str, name: str, ready: bool) -> None:
        """``False`` forces a running Pod NotReady (as a failing readiness probe would); ``True`` lets its
        readiness follow its containers again (simulated containers are always ready)."""
        pod = self.ctx.informer(PODS).get(namespace, name)
        if pod is None:
            pod = await self.ctx.api.get(PODS, name, namespace)
        node = pod.get("spec", {}).get("nodeName")
        if not node:
            raise ValueError(f"Pod {namespace}/{name} is not scheduled")
        self._kubelet(node).set_ready(pod["metadata"]["uid"], (namespace, name), ready)

    def container_log_path(self, namespace: str, pod: str, container: str) -> Path | None:
        """Where the kubelet writes the output of a container of a running Pod (None: no such Pod on a node)."""
        found = self.ctx.informer(PODS).get(namespace, pod)
        node = (found or {}).get("spec", {}).get("nodeName")
        if found is None or not node or node not in self._kubelets:
            return None
        check_dns_subdomain(container, "container name")
        return self.ctx.kubelet_dir(node) / "pods" / found["metadata"]["uid"] / "logs" / f"{container}.log"

    def exec_command(self, namespace: str, pod: str, container: str, argv: list[str]) -> ExecResult | str:
        """``kubectl exec`` in a running container (:mod:`.runtime.execution`); the result, or why it cannot run
        (no such Pod on a node, not running, no such container)."""
        found = self.ctx.informer(PODS).get(namespace, pod)
        node = (found or {}).get("spec", {}).get("nodeName")
        kubelet = self._kubelets.get(node) if found is not None and node else None
        if found is None or kubelet is None:
            return f'pod {pod} does not have a host assigned'
        running = kubelet.containers.get(found["metadata"]["uid"])
        if running is None:
            return f"container not found ({container!r}): the Pod is not running"
        for runner in running.runners:
            if runner.spec.name == container:
                return run_command(runner.spec, argv)
        return f'container {container} is not valid for pod {pod}'

    def resolve(self, name: str) -> str | None:
        """The loopback address behind a name the cluster publishes (node hostnames, Service DNS names,
        load-balancer hostnames; see ``dns.resolve``), from the watch caches; None when unknown."""
        self._require_started()
        return resolve(name, self.ctx.informer(NODES).items(), self.ctx.informer(SERVICES).items())

    def lookup(self, name: str) -> list[str] | None:
        """Every address cluster DNS answers for ``name`` (``dns.lookup``: headless Services, Pod names too), from
        the watch caches; None when the cluster does not know the name."""
        self._require_started()
        return lookup(name, self.ctx.informer(NODES).items(), self.ctx.informer(SERVICES).items(),
                      self.ctx.informer(PODS).items())

    def _route_pod_event(self, event: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        node = pod.get("spec", {}).get("nodeName")
        kubelet = self._kubelets.get(node) if node else None
        if kubelet is not None:
            kubelet.on_pod(event, pod, old)

    def _resync_kubelets(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        for kubelet in self._kubelets.values():
            kubelet.resync()

    # ----------------------------------------------------------------- plugins

    def kubelet_dir(self, node: str) -> Path:
        check_dns_subdomain(node, "node name")
        return self.ctx.kubelet_dir(node)

    def plugin_socket_path(self, node: str, driver: str) -> Path:
        """``<kubelet_dir>/plugins/<driver>/csi.sock`` (directory created); raises if too long for a socket."""
        check_dns_subdomain(driver, "CSI driver name")
        path = self.kubelet_dir(node) / "plugins" / driver / "csi.sock"
        socket_path_of(str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    async def register_node_plugin(self, node: str, driver: str, endpoint: str) -> None:
        """Register a node plugin as node-driver-registrar + kubelet do (waits until the plugin answers)."""
        self._require_started()
        await self._kubelet(node).registry.register(driver, endpoint)

    async def deregister_node_plugin(self, node: str, driver: str, endpoint: str) -> None:
        """Forget the node plugin registered at ``endpoint`` (its registrar stopped); CSINode drops the driver."""
        kubelet = self._kubelets.get(node)
        if kubelet is not None:
            await kubelet.registry.deregister(driver, endpoint)

    def node_filesystem(self, node: str) -> NodeFilesystem:
        """Where paths on the node (hostPath volumes, registration paths) are on this machine (``nodefs``)."""
        return self.ctx.nodefs(node)

    @property
    def rpc_timeout(self) -> float:
        return self.ctx.options.rpc_timeout

    @property
    def running(self) -> bool:
        """Started and not stopping."""
        return self._started

    def controller_socket_path(self, driver: str) -> Path:
        """``<state_dir>/controller/<driver>/csi.sock``: a controller plugin listening here is found automatically."""
        check_dns_subdomain(driver, "CSI driver name")
        path = self.ctx.state_dir / "controller" / driver / "csi.sock"
        socket_path_of(str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _controller_socket_added(self, driver: str, socket: Path) -> None:
        try:
            check_dns_subdomain(driver, "CSI driver name")
        except ValueError as error:
            log.warning("ignoring controller plugin socket %s: %s", socket, error)
            return
        self._background.spawn(self._auto_register_controller(driver, f"unix://{socket}"))

    async def _auto_register_controller(self, driver: str, endpoint: str) -> None:
        assert self.provisioner is not None
        current = self.provisioner.plugins.get(driver)
        if current is not None and current.connection.endpoint == endpoint:
            return  # registered explicitly already
        try:
            await self.register_controller_plugin(driver, endpoint)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("registering controller plugin %s at %s failed: %s", driver, endpoint, error)

    async def register_controller_plugin(self, driver: str, endpoint: str) -> None:
        """Attach the external-provisioner to a controller plugin (waits until it answers)."""
        self._require_started()
        check_dns_subdomain(driver, "CSI driver name")
        assert self.provisioner is not None
        await self.provisioner.register(driver, endpoint)

    async def unregister_controller_plugin(self, driver: str, endpoint: str) -> None:
        """Detach the external-provisioner from the plugin at ``endpoint``, if it is the one attached."""
        if self.provisioner is not None:
            await self.provisioner.unregister(driver, endpoint)


DRIVER_NAME_RESERVE = 24


def _check_socket_room(kubelet_dir: Path) -> None:
    """Fail early when plugin sockets under this kubelet directory could not hold a typical driver name."""
    fixed = len(str(kubelet_dir / "plugins").encode()) + len("/") + len("/csi.sock")
    room = UNIX_PATH_MAX - fixed
    if room < DRIVER_NAME_RESERVE:
        raise ValueError(
            f"kubelet directory {kubelet_dir} leaves {max(room, 0)} bytes for CSI driver names in plugin socket paths "
            f"(Unix sockets are limited to {UNIX_PATH_MAX} bytes); use a shorter state directory, e.g. "
            "tempfile.mkdtemp(prefix='ks', dir='/tmp')"
        )
