"""``skupper debug dump [fileName]``: a gzip'd tarball of what a support engineer needs about the namespace's site:
every ``skupper.io`` object, the router's Deployment, Pods, ConfigMaps (its document and the network status),
Services and Events, the router Pods' logs, metrics and network status (``/metrics``, ``/network`` of their
adaptor), and the site controller's logs when it runs in a Pod. Named
as upstream's: ``<fileName or skupper-dump>-<namespace>-<YYYYMMDDhhmmss>`` plus ``.tar.gz`` when the name has no
extension. Secrets are never included (only their names, in the objects that refer to them)."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

from operator_runtime.errors import KubeError
from operator_runtime.kinds import (
    CONFIG_MAP,
    CRD,
    DEPLOYMENT,
    EVENT,
    POD,
    ROLE,
    ROLE_BINDING,
    SERVICE,
    ResourceInfo,
)
from operator_runtime.objects import JsonDict, mapping, meta

from .. import kinds
from ..constants import ADAPTOR_PORT, NETWORK_STATUS_NAME, ROUTER_NAME
from .cmdline import Args, Command
from .common import CliError, Invalid, Session
from .validate import file_name_problem
from .version import cli_version

__all__ = ["command", "dump_name"]

SKUPPER_KINDS: tuple[ResourceInfo, ...] = (
    kinds.SITE, kinds.LISTENER, kinds.CONNECTOR, kinds.LINK, kinds.ROUTER_ACCESS, kinds.ACCESS_GRANT,
    kinds.ACCESS_TOKEN, kinds.ATTACHED_CONNECTOR, kinds.ATTACHED_CONNECTOR_BINDING, kinds.MULTI_KEY_LISTENER,
    kinds.CERTIFICATE, kinds.SECURED_ACCESS)
MAX_LOG = 8 * 1024 * 1024
#: upstream's file names for these kinds' objects (``Accessgrant-<name>``, ``AccessTokens-<name>``); others: the kind
FILE_PREFIX = {"AccessGrant": "Accessgrant", "AccessToken": "AccessTokens"}
REPLICA_SET = ResourceInfo("apps/v1", "ReplicaSet", "replicasets", namespaced=True)
ROUTER_LABEL = "skupper.io/component=router"


async def components(session: Session) -> list[dict[str, Any]]:
    router = controller = "unknown"
    try:
        sites, _ = await session.api.list(kinds.SITE, namespace=session.namespace)
        for site in sites:
            controller = str(mapping(site, "status", "controller").get("version") or controller)
        deployment = await session.api.get(DEPLOYMENT, ROUTER_NAME, session.namespace)
        images = [str(c.get("image")) for c in mapping(deployment, "spec", "template", "spec").get("containers") or []
                  if isinstance(c, dict)]
        router = images[0].rpartition(":")[2] if images else router
    except KubeError:
        pass
    return [{"component": "router", "version": router}, {"component": "controller", "version": controller},
            {"component": "cli", "version": cli_version()}]



def command() -> Command:
    return Command(
        "debug", "debug site details", long="Tools to find out what a site is doing.",
        example="skupper debug dump <filename>",
        children=[Command("dump <fileName>", "Create a tarball containing various files with the site details",
                          long="Write a tarball with the site's resources and statuses, component versions, "
                               "configuration, logs and metrics (never a Secret).",
                          example="skupper debug dump <filename>", run=dump, positional="file", event_loop=True)])


def dump_name(base: str, namespace: str, when: datetime.datetime) -> str:
    name = f"{base}-{namespace}-{when.strftime('%Y%m%d%H%M%S')}"
    return name if Path(base).suffix else name + ".tar.gz"


class _Tar:
    def __init__(self, path: Path) -> None:
        import tarfile
        self.path = path
        self.file: tarfile.TarFile = tarfile.open(path, "w:gz")

    def add(self, name: str, data: bytes) -> None:
        import io
        import tarfile
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
        self.file.addfile(info, io.BytesIO(data))

    def add_object(self, name: str, obj: JsonDict) -> None:
        """``<name>.yaml`` and, as upstream writes it too, ``<name>.yaml.txt``."""
        import yaml
        data = yaml.safe_dump(obj, sort_keys=False).encode()
        self.add(f"{name}.yaml", data)
        self.add(f"{name}.yaml.txt", data)

    def close(self) -> None:
        self.file.close()

    def discard(self) -> None:
        self.file.close()
        self.path.unlink(missing_ok=True)


async def _raw(session: Session, path: str, params: dict[str, str] | None = None) -> bytes:
    status, body = await session.api.transport.request("GET", path, params=params)
    if status >= 400:
        raise KubeError(f"GET {path}: {status} {body[:200].decode('utf-8', 'replace')}")
    return body[:MAX_LOG]


async def _collect(session: Session, tar: _Tar) -> None:
    ns = session.namespace
    import yaml
    tar.add("/versions/skupper.yaml", yaml.safe_dump({"components": await components(session)}).encode())
    for info in SKUPPER_KINDS:
        try:
            objects, _ = await session.api.list(info, namespace=ns)
        except KubeError:
            continue
        for obj in objects:
            tar.add_object(f"/site-namespace/resources/{FILE_PREFIX.get(info.kind, info.kind)}-{meta(obj).name}", obj)
    try:                        # every CRD of the cluster, by name (as upstream; needs the right to list them)
        crds, _ = await session.api.list(CRD)
        tar.add("/site-namespace/resources/crds.txt",
                yaml.safe_dump(sorted(meta(c).name for c in crds)).encode())
    except KubeError:
        pass
    for name in (ROUTER_NAME, "skupper-router-2", NETWORK_STATUS_NAME):
        try:
            tar.add_object(f"/site-namespace/resources/Configmap-{name}",
                           await session.api.get(CONFIG_MAP, name, ns))
        except KubeError:
            pass
    services, _ = await session.api.list(SERVICE, namespace=ns)
    for service in services:
        if any(k.startswith("internal.skupper.io/") for k in meta(service).annotations):
            tar.add_object(f"/site-namespace/resources/Services-{meta(service).name}", service)
    deployments, _ = await session.api.list(DEPLOYMENT, namespace=ns, label_selector=ROUTER_LABEL)
    for deployment in deployments:
        tar.add_object(f"/site-namespace/resources/Deployment-{meta(deployment).name}", deployment)
        for info in (ROLE, ROLE_BINDING):       # named as the router's Deployment (a Site with its own
            try:                                # serviceAccount has none)
                tar.add_object(f"/site-namespace/resources/{info.kind}-{meta(deployment).name}",
                               await session.api.get(info, meta(deployment).name, ns))
            except KubeError:
                pass
    try:
        replica_sets, _ = await session.api.list(REPLICA_SET, namespace=ns, label_selector=ROUTER_LABEL)
    except KubeError:
        replica_sets = []
    for replica_set in replica_sets:
        tar.add_object(f"/site-namespace/resources/ReplicaSet-{meta(replica_set).name}", replica_set)
    pods, _ = await session.api.list(POD, namespace=ns, label_selector=ROUTER_LABEL)
    for pod in pods:
        await _pod(session, tar, pod, "/site-namespace")
        for path, name in (("metrics", f"/site-namespace/metrics/{meta(pod).name}.txt"),
                           ("network", f"/site-namespace/network/{meta(pod).name}.json")):
            tar.add(name, await _router_endpoint(session, pod, path))
    try:
        events, _ = await session.api.list(EVENT, namespace=ns)
        lines = [f"{e.get('eventTime') or mapping(e, 'metadata').get('creationTimestamp')}\t{e.get('type')}\t"
                 f"{e.get('reason')}\t{mapping(e, 'regarding').get('kind')}/{mapping(e, 'regarding').get('name')}\t"
                 f"{e.get('note')}" for e in events]
        tar.add("/site-namespace/events.txt", ("\n".join(lines) + "\n").encode())
    except KubeError as e:
        tar.add("/site-namespace/events.txt", f"events unavailable: {e}\n".encode())
    await _controller(session, tar)


async def _router_endpoint(session: Session, pod: JsonDict, path: str) -> bytes:
    """``/metrics`` or ``/network`` of a router Pod's adaptor: through the API server's Pod proxy, or (a local
    cluster, whose Pod IPs are loopback addresses of this machine) directly; else why not."""
    name, ns = meta(pod).name, meta(pod).namespace
    try:
        return await _raw(session, f"/api/v1/namespaces/{ns}/pods/{name}:{ADAPTOR_PORT}/proxy/{path}")
    except KubeError as e:
        proxy_problem = str(e)
    ip = str(mapping(pod, "status").get("podIP") or "")
    if ip.startswith("127."):
        import aiohttp
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as client, \
                    client.get(f"http://{ip}:{ADAPTOR_PORT}/{path}") as response:
                return (await response.content.read(MAX_LOG))
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            return f"{path} unavailable: {e}\n".encode()
    return f"{path} unavailable through the API server's Pod proxy: {proxy_problem[:300]}\n".encode()


async def _controller(session: Session, tar: _Tar) -> None:
    """The site controller's Pods and logs, in the namespace the Sites' status names."""
    sites, _ = await session.api.list(kinds.SITE, namespace=session.namespace)
    namespaces = {str(mapping(s, "status", "controller").get("namespace") or "") for s in sites} - {""}
    for ns in sorted(namespaces):
        try:
            pods, _ = await session.api.list(POD, namespace=ns,
                                             label_selector="app.kubernetes.io/component=service-network")
        except KubeError:
            continue
        for pod in pods:
            await _pod(session, tar, pod, "/controller-namespace")


async def _pod(session: Session, tar: _Tar, pod: JsonDict, prefix: str) -> None:
    """A Pod and the logs of its containers."""
    name, ns = meta(pod).name, meta(pod).namespace
    tar.add_object(f"{prefix}/resources/Pod-{name}", pod)
    for container in mapping(pod, "spec").get("containers") or []:
        cname = str(container.get("name"))
        try:
            log = await _raw(session, f"/api/v1/namespaces/{ns}/pods/{name}/log", {"container": cname})
        except KubeError as e:
            log = f"logs unavailable: {e}\n".encode()
        tar.add(f"{prefix}/logs/{name}-{cname}.txt", log)


async def dump(args: Args, session: Session) -> None:
    if len(args.file) > 1:
        raise Invalid(["only one argument is allowed for this command"])
    base = args.file[0] if args.file else "skupper-dump"
    if not base:
        raise Invalid(["filename must not be empty"])
    if problem := file_name_problem(base):
        raise Invalid([f"filename is not valid: {problem}"])
    path = Path(dump_name(base, session.namespace, datetime.datetime.now()))
    try:
        tar = _Tar(path)
    except OSError as e:
        raise CliError(f"Unable to save skupper dump details: {e}") from None
    try:
        await _collect(session, tar)
    except KubeError as e:
        tar.discard()                          # no half-written archive left behind
        raise CliError(f"Unable to save skupper dump details: {e}") from None
    tar.close()
    print(f"Skupper dump details written to compressed archive:  {path}")


