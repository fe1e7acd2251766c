"""What every simulated component shares: the API client, the informers, options and address allocators."""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubesim.addresses import AddressBlock
from kubesim.cluster.base.apitypes import Api
from kubesim.cluster.base.informer import Informer
from kubesim.cluster.base.nodefs import DEFAULT_KUBELET_ROOT, NodeFilesystem
from kubesim.cluster.base.objects import Obj, name_of
from kubesim.errors import ApiError

PODS = "pods"
NODES = "nodes"
PVCS = "persistentvolumeclaims"
PVS = "persistentvolumes"
SERVICES = "services"
ENDPOINTS = "endpoints"
ENDPOINT_SLICES = "endpointslices.discovery.k8s.io"
STORAGE_CLASSES = "storageclasses.storage.k8s.io"
CSI_NODES = "csinodes.storage.k8s.io"
CSI_DRIVERS = "csidrivers.storage.k8s.io"
STATEFUL_SETS = "statefulsets.apps"
DEPLOYMENTS = "deployments.apps"
DAEMON_SETS = "daemonsets.apps"
REPLICA_SETS = "replicasets.apps"
JOBS = "jobs.batch"
LEASES = "leases.coordination.k8s.io"
NODE_LEASE_NAMESPACE = "kube-node-lease"

WATCHED = (
    PODS,
    NODES,
    PVCS,
    PVS,
    SERVICES,
    ENDPOINTS,
    ENDPOINT_SLICES,
    STORAGE_CLASSES,
    CSI_NODES,
    CSI_DRIVERS,
    STATEFUL_SETS,
    DEPLOYMENTS,
    DAEMON_SETS,
    REPLICA_SETS,
    JOBS,
    LEASES,
)


@dataclass
class Options:
    """Tunables of the simulation (all keyword options of ``Cluster``)."""

    node_name_prefix: str = "node"
    node_external_ips: bool = False
    node_internal_dns: bool = False
    load_balancer_ips: tuple[str, ...] | None = None  # None: the address block's 127.N.3.1-254
    load_balancer_hostnames: tuple[str, ...] = ()
    mount_backoff: tuple[float, float] = (0.05, 5.0)
    provision_backoff: tuple[float, float] = (0.05, 5.0)
    rpc_timeout: float = 10.0
    plugin_wait_timeout: float = 30.0
    discover_plugins: bool = True
    restart_backoff: tuple[float, float] = (10.0, 300.0)  # kubelet's crash-loop back-off (initial, max) seconds
    job_backoff: tuple[float, float] = (10.0, 360.0)  # the Job controller's wait before replacing a failed Pod
    # node lifecycle (kubelet and kube-controller-manager defaults)
    node_lease_duration: float = 40.0  # the kubelet's node Lease: leaseDurationSeconds
    node_lease_renew: float | None = None  # seconds between renewals (None: a quarter of the duration, as the kubelet)
    node_status_report: float = 300.0  # seconds between unchanged node status reports (nodeStatusReportFrequency)
    node_monitor_period: float = 5.0  # how often the node-lifecycle controller looks at the nodes
    node_monitor_grace: float = 50.0  # silence after which a node's Ready condition turns Unknown
    kubelet_root: str = DEFAULT_KUBELET_ROOT  # the kubelet directory's path on the simulated nodes (hostPath volumes)
    runtime_dir: str | None = None  # short directory for containers' run directories (default: a fresh temp dir)
    pod_dns: bool = True  # give Pods the cluster DNS in their /etc/resolv.conf (where this machine allows it)


class TokenIssuer(Protocol):
    """Issues ServiceAccount tokens (``kubesim.auth.serviceaccounts.ServiceAccountTokens``)."""

    def issue(self, namespace: str, service_account: str, *, pod_name: str | None = None,
              pod_uid: str | None = None, expiration_seconds: int = ...) -> str: ...

    def revoke_pod(self, pod_uid: str) -> None: ...


@dataclass(frozen=True)
class ApiAccess:
    """How Pods reach the API server: its loopback address and port (``KUBERNETES_SERVICE_HOST``/``PORT``), the CA
    that signed its certificate (``ca.crt`` of the token volume), and the ServiceAccount tokens."""

    host: str
    port: int
    ca_pem: bytes | None
    tokens: TokenIssuer

    def service_env(self) -> dict[str, str]:
        """The variables the kubelet gives every container for the ``kubernetes`` Service."""
        port = str(self.port)
        url = f"tcp://{self.host}:{port}"
        prefix = f"KUBERNETES_PORT_{port}_TCP"
        return {"KUBERNETES_SERVICE_HOST": self.host, "KUBERNETES_SERVICE_PORT": port,
                "KUBERNETES_SERVICE_PORT_HTTPS": port, "KUBERNETES_PORT": url, prefix: url,
                f"{prefix}_PROTO": "tcp", f"{prefix}_PORT": port, f"{prefix}_ADDR": self.host}


class PodIpAllocator:
    """Hands out Pod IPs from the address block's Pod range (loopback, distinct from every other range); an address
    a Pod holds (handed out here or adopted from a stored Pod's status) is never handed out again until released."""

    def __init__(self, cidr: str) -> None:
        self._network = ipaddress.IPv4Network(cidr)
        self._next = 1
        self._by_uid: dict[str, str] = {}
        self._held: set[str] = set()
        self._free: list[str] = []

    def allocate(self, uid: str) -> str:
        if uid in self._by_uid:
            return self._by_uid[uid]
        address = self._take_free() or self._take_next()
        self._hold(uid, address)
        return address

    def _take_free(self) -> str | None:
        while self._free:
            address = self._free.pop(0)
            if address not in self._held:
                return address
        return None

    def _take_next(self) -> str:
        while self._next < self._network.num_addresses - 1:
            address = str(self._network[self._next])
            self._next += 1
            if address not in self._held:
                return address
        raise RuntimeError(f"Pod IP range {self._network} is exhausted")

    def _hold(self, uid: str, address: str) -> None:
        self._by_uid[uid] = address
        self._held.add(address)

    def adopt(self, uid: str, address: str) -> None:
        """Remember an address already in a Pod's status (so it is not handed out twice)."""
        if uid not in self._by_uid:
            self._hold(uid, address)

    def release(self, uid: str) -> None:
        address = self._by_uid.pop(uid, None)
        if address is None:
            return
        self._held.discard(address)
        if self._in_range(address):
            self._free.append(address)

    def _in_range(self, address: str) -> bool:
        try:
            return ipaddress.ip_address(address) in self._network
        except ValueError:
            return False


@dataclass
class Context:
    api: Api
    state_dir: Path
    options: Options
    block: AddressBlock
    informers: dict[str, Informer] = field(default_factory=dict)
    pod_ips: PodIpAllocator = field(init=False)
    api_access: ApiAccess | None = None
    runtime_dir: Path | None = None  # set when the cluster starts
    cluster_dns: str | None = None  # the cluster DNS's address on port 53, when Pods get it (set when it starts)
    run_dir_numbers: Iterator[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.pod_ips = PodIpAllocator(self.block.pod_cidr)

    @property
    def load_balancer_ips(self) -> tuple[str, ...]:
        if self.options.load_balancer_ips is None:
            return (self.block.load_balancer_range,)
        return self.options.load_balancer_ips

    def informer(self, resource: str) -> Informer:
        return self.informers[resource]

    async def patch_status(self, resource: str, obj: Obj, status: dict[str, Any]) -> None:
        """Merge ``status`` into ``obj``'s status subresource; an object deleted meanwhile (404) is fine."""
        try:
            await self.api.patch(
                resource,
                name_of(obj),
                {"status": status},
                namespace=obj["metadata"].get("namespace"),
                subresource="status",
            )
        except ApiError as error:
            if error.code != 404:
                raise

    def kubelet_dir(self, node: str) -> Path:
        return self.state_dir / "kubelet" / node

    def nodefs(self, node: str) -> NodeFilesystem:
        return NodeFilesystem(node, self.kubelet_dir(node), self.state_dir / "nodefs" / node,
                              self.options.kubelet_root)
