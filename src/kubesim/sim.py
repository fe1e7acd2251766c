"""`KubeSim`: start the API server (and optionally the simulated cluster) in-process and write a kubeconfig."""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from kubesim.addresses import AddressBlock, AddressBlockClaim, claim_address_block, reserve_block
from kubesim.api import ApiClient
from kubesim.faults import Faults
from kubesim.server.app import ApiServer
from kubesim.store.persist import StoreFile, StoreFileError
from kubesim.taints import DEFAULT_TOLERATION_SECONDS
from kubesim.tls import make_self_signed, server_context


def kubeconfig_dict(
    url: str, token: str, ca_pem: bytes | None = None, name: str = "kubesim"
) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(path: Path, url: str, token: str, ca_pem: bytes | None = None) -> None:
    """Write atomically with mode 0600 (it holds the bearer token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(kubeconfig_dict(url, token, ca_pem), f, sort_keys=False)
    os.replace(tmp, path)


class KubeSim:
    """`async with KubeSim(...) as sim:` — `sim.url`, `sim.token`, `sim.kubeconfig_path`, `sim.api`, `sim.cluster`."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        kubeconfig_path: str | os.PathLike[str] | None = None,
        nodes: int = 0,
        state_dir: str | os.PathLike[str] | None = None,
        watch_window: int = 10_000,
        service_cidr: str | None = None,
        service_node_port_range: tuple[int, int] | str | None = None,
        address_block: int | AddressBlockClaim | None = None,
        bookmark_interval: float = 5.0,
        faults: Faults | dict[str, Any] | None = None,
        tls: bool = True,
        namespace_cleanup_delay: float = 0.2,
        gc_delay: float = 0.2,
        work_dir: str | os.PathLike[str] | None = None,
        host_names: bool = False,
        store_path: str | os.PathLike[str] | None = None,
        default_toleration_seconds: int = DEFAULT_TOLERATION_SECONDS,
        **cluster_options: Any,
    ) -> None:
        """`tls=True` (default) serves HTTPS with a fresh self-signed CA in the kubeconfig: kubectl only sends
        bearer tokens over TLS. `tls=False` serves plain HTTP (lightkube and the in-process client still work).
        `namespace_cleanup_delay`: seconds between a namespace's DELETE and the removal of its contents (the
        namespace controller's lag; 0 = inside the DELETE). `gc_delay`: seconds before objects whose owners do not
        exist are collected (0 = never).

        `address_block`: the loopback block every address of this cluster comes from (`kubesim.addresses`): a
        number 1-254, an `AddressBlockClaim` the caller holds, or None (default) for the lowest free block. It is
        claimed here and released by `stop()`; `service_cidr` defaults to the block's 127.B.16.0/20.

        `work_dir`: where the server's own files (TLS keys, the default kubeconfig) are kept while it runs, in a
        fresh directory removed by `stop()`; default the system temporary directory.

        `host_names`: with nodes, serve the cluster's names to the host (``kubesim.cluster.dns.hostnames``): a DNS
        server on the block's 127.B.0.10 (port 53, else a free port) and a SOCKS5 proxy on 127.B.0.11 (port 1080,
        else a free port); `dns_address` and `proxy_address` say where.

        `service_node_port_range`: where nodePorts come from, ``(first, last)`` or ``"first-last"`` (default
        30000-32767, as the apiserver's ``--service-node-port-range``).

        `store_path`: keep the cluster in this SQLite file (``kubesim.store.persist``) and resume what it holds: the
        objects, revisions going on, the address block it had (so Node, Pod, Service and load-balancer addresses stay
        the same); the nodes' kubelets start the stored Pods again, as after a reboot. Default: in memory only.
        `resumed` tells how many objects were read back.

        `default_toleration_seconds`: the DefaultTolerationSeconds admission plugin's ``tolerationSeconds`` for the
        not-ready and unreachable ``NoExecute`` tolerations every Pod gets (300, as kube-apiserver's
        ``--default-not-ready-toleration-seconds`` / ``--default-unreachable-toleration-seconds``)."""
        self.store_file = StoreFile(store_path) if store_path is not None else None
        try:
            address_block = self._stored_block(address_block)
            if isinstance(address_block, AddressBlockClaim):
                self._claim, self._own_claim = address_block, False
            else:
                self._claim, self._own_claim = claim_address_block(address_block), True
        except BaseException:
            if self.store_file is not None:
                self.store_file.close()
            raise
        self.address_block: AddressBlock = self._claim.block
        if self.store_file is not None:
            self.store_file.set_fact("address_block", str(self.address_block.index))
            reserve_block(self.address_block.index, self.store_file.path)
        self.host = host
        self.port = port
        if isinstance(faults, dict):
            settings = faults
            faults = Faults()
            faults.update(settings)
        self.server = ApiServer(
            token=token,
            watch_window=watch_window,
            service_cidr=service_cidr or self.address_block.service_cidr,
            service_node_port_range=service_node_port_range,
            bookmark_interval=bookmark_interval,
            faults=faults,
            namespace_cleanup_delay=namespace_cleanup_delay,
            gc_delay=gc_delay,
            persist=self.store_file,
            default_toleration_seconds=default_toleration_seconds,
        )
        self.resumed = self.server.store.resumed
        self.token = self.server.token
        self.faults = self.server.faults
        self.store = self.server.store
        self.api = ApiClient(self.server.store)
        self._nodes = nodes
        self._cluster_options = cluster_options
        self._state_dir_arg = Path(state_dir) if state_dir is not None else None
        self._kubeconfig_arg = Path(kubeconfig_path) if kubeconfig_path is not None else None
        self._own_dir: Path | None = None
        self._work_dir = Path(work_dir) if work_dir is not None else None
        self.state_dir: Path | None = self._state_dir_arg
        self.kubeconfig_path: Path | None = None
        self.cluster: Any = None
        self.url = ""
        self.tls = tls
        self.ca_pem: bytes | None = None
        self._host_names = host_names
        self._dns: Any = None
        self._proxy: Any = None
        self.dns_address: tuple[str, int] | None = None
        self.proxy_address: tuple[str, int] | None = None

    def _stored_block(self, asked: int | AddressBlockClaim | None) -> int | AddressBlockClaim | None:
        """The block of a stored cluster (its addresses are in its objects); a different one asked for is an
        error, since every stored address would point elsewhere."""
        stored = self.store_file.fact("address_block") if self.store_file is not None else None
        if stored is None:
            return asked
        wanted = asked.block.index if isinstance(asked, AddressBlockClaim) else asked
        if wanted is not None and wanted != int(stored):
            raise StoreFileError(f"the cluster stored in {self.store_file.path if self.store_file else ''} uses "
                                 f"address block {stored} (127.{stored}.0.0/16), not {wanted}: start it with that "
                                 "block (or auto)")
        return asked if isinstance(asked, AddressBlockClaim) else int(stored)

    async def start(self) -> KubeSim:
        try:
            # Short temp dir: kubelet plugin socket paths live under the state dir (107-byte limit).
            self._own_dir = Path(tempfile.mkdtemp(prefix="ks-", dir=self._work_dir))
            if self.state_dir is None and (self._nodes or self._cluster_options):
                self.state_dir = self._own_dir
            ssl_ctx = None
            if self.tls:
                cert, key = make_self_signed(self._own_dir / "pki", [self.host])
                self.ca_pem = cert.read_bytes()
                ssl_ctx = server_context(cert, key)
            self.url = await self.server.start(self.host, self.port, ssl_ctx)
            self.kubeconfig_path = self._kubeconfig_arg or self._own_dir / "kubeconfig"
            write_kubeconfig(self.kubeconfig_path, self.url, self.token, self.ca_pem)
            if self._nodes or self._cluster_options:
                from kubesim.cluster.cluster import Cluster

                assert self.state_dir is not None
                # Containers' run directories (with socket paths in them) go into the short private directory.
                options = {"runtime_dir": str(self._own_dir / "run"), **self._cluster_options}
                self.cluster = Cluster(
                    self.api,
                    state_dir=self.state_dir,
                    nodes=self._nodes,
                    address_block=self._claim,
                    api_access=self._api_access(),
                    **options,
                )
                await self.cluster.start()
                self.server.context.pod_logs = self.cluster.container_log_path
                self.server.context.exec_command = self.cluster.exec_command
                self.server.context.node_control = self.cluster
                if self._host_names:
                    await self._serve_host_names()
        except BaseException:
            await self.stop()
            raise
        return self

    async def _serve_host_names(self) -> None:
        from kubesim.cluster.dns.hostnames import ClusterDns, SocksProxy

        self.dns_address = self.cluster.pod_dns_address  # the Pods' cluster DNS, when it runs, serves the host too
        if self.dns_address is None:
            self._dns = ClusterDns(self.cluster.lookup)
            self.dns_address = await self._dns.start(self.address_block.dns_ip, 53)
        self._proxy = SocksProxy(self.cluster.lookup)
        self.proxy_address = await self._proxy.start(self.address_block.proxy_ip, 1080)

    def _api_access(self) -> Any:
        """Where the simulated Pods reach this server: its loopback address and port, CA and token issuer."""
        from urllib.parse import urlsplit

        from kubesim.cluster.base.context import ApiAccess

        parts = urlsplit(self.url)
        return ApiAccess(host=parts.hostname or self.host, port=parts.port or 443, ca_pem=self.ca_pem,
                         tokens=self.server.service_accounts)

    async def stop(self) -> None:
        for service in (self._proxy, self._dns):
            if service is not None:
                await service.stop()
        self._proxy = self._dns = None
        self.dns_address = self.proxy_address = None
        self.server.context.pod_logs = None
        self.server.context.exec_command = None
        self.server.context.node_control = None
        if self.cluster is not None:
            try:
                await self.cluster.stop()
            finally:
                self.cluster = None
        await self.server.stop()
        if self.store_file is not None:
            self.store_file.close()
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None
        if self._own_claim:
            self._claim.release()

    async def __aenter__(self) -> KubeSim:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
