"""`listener-operator network-demo [--sites 2|3] [--once]`: a service network across local clusters, end to end.

Two (or three) local clusters run side by side (:mod:`devenv.multicluster`: distinct address blocks, a site
controller each). Each gets a namespace and a Site that accepts links; East runs backend Pods (agnhost
``serve-hostname``) behind a Connector, West a Listener for them. The sites are linked as a user links them: an
AccessGrant in one site, its url, code and CA copied into an AccessToken in the next (two sites: issued in West,
redeemed in East, as upstream's hello-world; three: West - Middle - East in a chain). Then a client in West connects
to the Listener's Service and the name of the Pod in East that answered is printed, with every object's status.
Last, the link towards East is cut (its Link deleted) and the demo shows what follows: the Listener
loses its connector in the status and the client is refused.

``--once`` prints all that and exits 0 only if the client got through before the cut. Loopback addresses only;
connections are bounded in number and time.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from devenv.multicluster import LocalSites, SiteOptions, site_names
from devenv.observer import show_observer
from devenv.sysdemo import system_demo
from devenv.up import Console, absolute, run_command
from kubesim.errors import ApiError
from kubesim.testing.traffic import who_answers
from operator_runtime.objects import items, mapping

#: The ``listener-operator network-demo`` help line (a command of the ``listener_operator.commands`` group).
HELP = "run two or three local clusters as linked sites and show a client in West reaching a backend in East"

GV = "skupper.io/v2alpha1"
RESOURCES = {"Site": "sites.skupper.io", "Listener": "listeners.skupper.io", "Connector": "connectors.skupper.io",
             "AccessGrant": "accessgrants.skupper.io", "AccessToken": "accesstokens.skupper.io",
             "Link": "links.skupper.io"}
BACKEND_IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.53"
BACKEND_PORT = 9376
ROUTING_KEY = "backend"
SERVICE_PORT = 8080
BACKENDS = 2
CONNECTIONS = 6
CONNECT_SECONDS = 3.0
DEFAULT_TIMEOUT = 120.0
CUT_SECONDS = 15.0
STATUS_SECONDS = 20.0
FIELD_MANAGER = "listener-operator-network-demo"

T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--system", action="store_true",
                        help="a local cluster and a system site on this host, linked with skupper commands")
    parser.add_argument("--sites", type=int, choices=[2, 3], default=2,
                        help="2: West and East; 3: West - Middle - East in a chain (default 2)")
    parser.add_argument("--once", action="store_true",
                        help="exit after showing the link cut (exit code 0 only if the client got through)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds to wait for the sites, the links and the first answer (default "
                             f"{DEFAULT_TIMEOUT:.0f})")
    parser.add_argument("--state-dir", type=Path,
                        default=Path(os.environ.get("NETWORK_DEMO_STATE_DIR", ".state/network-demo")),
                        help="directory of each site's state, kubeconfig and logs: <dir>/<site> "
                             "(default .state/network-demo)")


# ---- what is applied (pure) ----------------------------------------------------------------------------------------

def namespace_of(site: str) -> str:
    """Each site lives in a namespace named after it (upstream's hello-world: west and east)."""
    return site


def _object(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": GV, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def site_objects(site: str, *, listener: bool, backend: bool) -> list[dict[str, Any]]:
    """What a user applies in ``site``: its namespace, a Site accepting links, and the Listener (in West) or the
    backend Deployment and its Connector (in East)."""
    namespace = namespace_of(site)
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        _object("Site", site, namespace, {"linkAccess": "default"}),
    ]
    if listener:
        objects.append(_object("Listener", ROUTING_KEY, namespace,
                               {"routingKey": ROUTING_KEY, "host": ROUTING_KEY, "port": SERVICE_PORT}))
    if backend:
        labels = {"app": ROUTING_KEY}
        objects.append({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": ROUTING_KEY, "namespace": namespace},
            "spec": {"replicas": BACKENDS, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "backend", "image": BACKEND_IMAGE,
                                         "args": ["serve-hostname", f"--port={BACKEND_PORT}", "--http=true"],
                                         "ports": [{"containerPort": BACKEND_PORT}]}]}}}})
        objects.append(_object("Connector", ROUTING_KEY, namespace,
                               {"routingKey": ROUTING_KEY, "selector": f"app={ROUTING_KEY}", "port": BACKEND_PORT}))
    return objects


def grant_object(granting: str, redeeming: str) -> dict[str, Any]:
    """The AccessGrant ``granting`` issues for ``redeeming``: one redemption within 15 minutes."""
    return _object("AccessGrant", f"to-{redeeming}", namespace_of(granting),
                   {"redemptionsAllowed": 1, "expirationWindow": "15m"})


def token_object(grant: Mapping[str, Any], granting: str, redeeming: str) -> dict[str, Any] | None:
    """The AccessToken ``redeeming`` applies, made from the grant's status (None until url, code and CA are
    published): what `skupper token issue` writes into the token file."""
    status = mapping(grant, "status")
    if not all(status.get(key) for key in ("url", "code", "ca")):
        return None
    return _object("AccessToken", f"to-{granting}", namespace_of(redeeming),
                   {"url": status["url"], "code": status["code"], "ca": status["ca"]})


def link_pairs(sites: tuple[str, ...]) -> list[tuple[str, str]]:
    """(granting, redeeming) per link: each site grants the next one in the chain (West - East, or West - Middle -
    East), so the token is issued in West and redeemed in East for two sites, as upstream's hello-world."""
    return list(itertools.pairwise(sites))


def links_between(links: Iterable[Mapping[str, Any]], remote_block: IPv4Network) -> list[str]:
    """Names of the Links (of one site) whose endpoints are addresses of the other cluster's block."""
    names = []
    for link in links:
        for endpoint in items(link, "spec", "endpoints"):
            try:
                if IPv4Address(str(endpoint.get("host") or "")) in remote_block:
                    names.append(link["metadata"]["name"])
                    break
            except ValueError:
                continue
    return sorted(names)


# ---- what is shown (pure) ------------------------------------------------------------------------------------------

@dataclass
class StatusRow:
    site: str
    kind: str
    name: str
    status: str
    details: str


def _condition(obj: Mapping[str, Any], kind: str) -> str | None:
    for condition in items(obj, "status", "conditions"):
        if condition.get("type") == kind:
            return f"{kind}={condition.get('status')}" + (f" ({condition.get('reason')})"
                                                         if condition.get("status") != "True" and
                                                         condition.get("reason") else "")
    return None


def details_of(kind: str, obj: Mapping[str, Any]) -> str:
    """The status fields a person looks at, per kind, in one line."""
    status = mapping(obj, "status")
    parts: list[str] = []
    if kind == "Site":
        network = [str(site.get("name")) for site in items(obj, "status", "network")]
        parts.append(f"sitesInNetwork={status.get('sitesInNetwork', 0)}"
                     + (f" ({', '.join(network)})" if network else ""))
    elif kind == "Listener":
        parts.append(f"hasMatchingConnector={str(bool(status.get('hasMatchingConnector'))).lower()}")
    elif kind == "Connector":
        parts.append(f"hasMatchingListener={str(bool(status.get('hasMatchingListener'))).lower()}")
        parts.append(f"pods={len(items(obj, 'status', 'selectedPods'))}")
    elif kind == "Link":
        operational = _condition(obj, "Operational")
        if operational:
            parts.append(operational)
        if status.get("remoteSiteName"):
            parts.append(f"remote site {status['remoteSiteName']}")
        endpoints = [f"{e.get('host')}:{e.get('port')}" for e in items(obj, "spec", "endpoints")
                     if e.get("name") in (None, "inter-router")]
        if endpoints:
            parts.append("to " + ", ".join(endpoints))
        parts.append(f"cost {mapping(obj, 'spec').get('cost', 1)}")
    elif kind == "AccessGrant":
        parts.append(f"redemptions {status.get('redemptions', 0)}/{mapping(obj, 'spec').get('redemptionsAllowed', 1)}")
        if status.get("url"):
            parts.append(f"url {status['url']}")
        if status.get("expirationTime"):
            parts.append(f"expires {status['expirationTime']}")
    elif kind == "AccessToken":
        parts.append(f"redeemed={str(bool(status.get('redeemed'))).lower()}")
    message = str(status.get("message") or "")
    if message and message != "OK":
        parts.append(message[:200])
    return "; ".join(parts)


def status_rows(site: str, objects: Iterable[tuple[str, Mapping[str, Any]]]) -> list[StatusRow]:
    rows = []
    for kind, obj in objects:
        rows.append(StatusRow(site, kind, str(obj["metadata"]["name"]),
                              str(mapping(obj, "status").get("status") or "-"), details_of(kind, obj)))
    return rows


def format_rows(rows: list[StatusRow]) -> list[str]:
    table = [["SITE", "KIND", "NAME", "STATUS", "DETAILS"]] + [[r.site, r.kind, r.name, r.status, r.details]
                                                               for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4] for row in table]


@dataclass
class ClientResult:
    """What a client in West saw through the Listener's Service: the Pods that answered, or the error."""

    target: str
    answered: list[str] = field(default_factory=list)
    error: str | None = None

    def ok_for(self, backends: set[str]) -> bool:
        return bool(self.answered) and self.error is None and set(self.answered) <= backends

    def describe(self, site: str) -> str:
        if self.error is not None and not self.answered:
            return f"client in west -> {self.target} -> FAILED: {self.error[:200]}"
        counts = ", ".join(f"{name} ({count})" for name, count in sorted(Counter(self.answered).items()))
        line = f"client in west -> {self.target} -> answered by Pods in {site}: {counts}"
        return line + (f"; then FAILED: {self.error[:200]}" if self.error else "")


# ---- I/O -------------------------------------------------------------------------------------------------------------

async def _until(check: Callable[[], Awaitable[T | None]], seconds: float) -> T | None:
    """The first truthy result of ``check`` within ``seconds`` (None when time is up); an object not yet there
    counts as not yet."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            result = await check()
        except ApiError as error:
            if error.code != 404:
                raise
            result = None
        if result:
            return result
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.25)


RESOURCE_OF = {**RESOURCES, "Namespace": "namespaces", "Deployment": "deployments.apps"}


async def apply(api: Any, obj: dict[str, Any]) -> None:
    await api.patch(RESOURCE_OF[obj["kind"]], obj["metadata"]["name"], obj,
                    namespace=obj["metadata"].get("namespace"), patch_type="apply", field_manager=FIELD_MANAGER,
                    force=True)


async def site_statuses(api: Any, site: str) -> list[StatusRow]:
    found: list[tuple[str, Mapping[str, Any]]] = []
    for kind in ("Site", "AccessGrant", "AccessToken", "Link", "Listener", "Connector"):
        objects, _ = await api.list(RESOURCES[kind], namespace_of(site))
        found.extend((kind, obj) for obj in sorted(objects, key=lambda o: o["metadata"]["name"]))
    return status_rows(site, found)


async def backend_pods(api: Any, site: str) -> set[str]:
    pods, _ = await api.list("pods", namespace_of(site), label_selector=f"app={ROUTING_KEY}")
    return {pod["metadata"]["name"] for pod in pods if not pod["metadata"].get("deletionTimestamp")}


async def ask(ip: str, count: int) -> ClientResult:
    """``count`` connections to the Listener's Service, one after another; stops at the first failure."""
    result = ClientResult(f"{ROUTING_KEY}.{namespace_of('west')}:{SERVICE_PORT} ({ip}:{SERVICE_PORT})")
    for _ in range(count):
        try:
            result.answered.append(await who_answers(ip, SERVICE_PORT, seconds=CONNECT_SECONDS))
        except (OSError, TimeoutError, aiohttp.ClientError) as error:   # refused, reset, closed before answering
            result.error = str(error) or type(error).__name__
            break
    return result


class NetworkDemo:
    """The demo's steps on running sites; each step prints what it did."""

    def __init__(self, sites: LocalSites, console: Console, timeout: float) -> None:
        self.sites = sites
        self.console = console
        self.timeout = timeout
        self.names = sites.names
        self.west, self.east = self.names[0], self.names[-1]

    def api(self, site: str) -> Any:
        return self.sites.sim(site).api

    async def apply_sites(self) -> None:
        for site in self.names:
            objects = site_objects(site, listener=site == self.west, backend=site == self.east)
            for obj in objects:
                await apply(self.api(site), obj)
            self.console.step(f"[{site}] applied " + ", ".join(f"{o['kind']} {o['metadata']['name']}"
                                                               for o in objects))

    async def link(self, granting: str, redeeming: str) -> bool:
        grant = grant_object(granting, redeeming)
        await apply(self.api(granting), grant)

        async def token() -> dict[str, Any] | None:
            current = await self.api(granting).get(RESOURCES["AccessGrant"], grant["metadata"]["name"],
                                                   namespace_of(granting))
            return token_object(current, granting, redeeming)

        made = await _until(token, self.timeout)
        if made is None:
            self.console.step(f"[{granting}] AccessGrant {grant['metadata']['name']} published no url/code/ca "
                              f"within {self.timeout:.0f}s")
            return False
        self.console.step(f"[{granting}] AccessGrant {grant['metadata']['name']}: url {made['spec']['url']}")
        await apply(self.api(redeeming), made)

        async def redeemed() -> Mapping[str, Any] | None:
            status = mapping(await self.api(redeeming).get(RESOURCES["AccessToken"], made["metadata"]["name"],
                                                           namespace_of(redeeming)), "status")
            return status if status.get("redeemed") or status.get("status") == "Error" else None

        status = await _until(redeemed, self.timeout)
        if not status or not status.get("redeemed"):
            self.console.step(f"[{redeeming}] AccessToken {made['metadata']['name']} not redeemed: "
                              f"{(status or {}).get('message', 'no answer in time')}")
            return False
        self.console.step(f"[{redeeming}] AccessToken {made['metadata']['name']} redeemed at {granting}")
        return True

    async def west_service_ip(self) -> str | None:
        sim = self.sites.sim(self.west)
        return sim.cluster.resolve(f"{ROUTING_KEY}.{namespace_of(self.west)}.svc.cluster.local")  # type: ignore[no-any-return]

    async def first_answer(self) -> ClientResult:
        """Connections to the Listener's Service until one is answered by an East Pod, then a few more."""
        ip = await _until(self.west_service_ip, self.timeout)
        if ip is None:
            return ClientResult(f"{ROUTING_KEY}.{namespace_of(self.west)}:{SERVICE_PORT}",
                                error="the Listener's Service does not exist")
        last = ClientResult(ip)

        async def answered() -> ClientResult | None:
            nonlocal last
            last = await ask(ip, 1)
            return last if last.answered else None

        if await _until(answered, self.timeout) is None:
            return last
        return await ask(ip, CONNECTIONS)

    async def statuses(self) -> list[StatusRow]:
        rows: list[StatusRow] = []
        for site in self.names:
            rows.extend(await site_statuses(self.api(site), site))
        return rows

    async def cut(self, a: str, b: str) -> list[tuple[str, str]]:
        """Delete the Links between sites ``a`` and ``b`` (both directions); the (site, link) pairs deleted."""
        deleted = []
        for here, there in ((a, b), (b, a)):
            links, _ = await self.api(here).list(RESOURCES["Link"], namespace_of(here))
            for name in links_between(links, self.sites.sim(there).address_block.network):
                try:
                    await self.api(here).delete(RESOURCES["Link"], name, namespace_of(here))
                    deleted.append((here, name))
                except ApiError as error:
                    if error.code != 404:
                        raise
        return deleted

    async def settled(self, connected: bool) -> bool:
        """Whether the statuses tell what the traffic does: linked (``connected``), every Link Ready, each Site
        seeing every site and West's Listener matched; cut, West's Listener unmatched and no Site seeing the far
        end from the other side of the cut."""
        listener = await self.api(self.west).get(RESOURCES["Listener"], ROUTING_KEY, namespace_of(self.west))
        matched = bool(mapping(listener, "status").get("hasMatchingConnector"))
        if not connected:
            return not matched
        if not matched:
            return False
        for site in self.names:
            site_obj = await self.api(site).get(RESOURCES["Site"], site, namespace_of(site))
            if mapping(site_obj, "status").get("sitesInNetwork") != len(self.names):
                return False
            links, _ = await self.api(site).list(RESOURCES["Link"], namespace_of(site))
            if any(mapping(link, "status").get("status") != "Ready" for link in links):
                return False
        return True

    async def after_cut(self, ip: str) -> tuple[float | None, float | None]:
        """Seconds until the West Listener's status says no connector, and until the client is refused."""
        started = time.monotonic()
        status_at: float | None = None
        refused_at: float | None = None
        deadline = started + CUT_SECONDS
        while time.monotonic() < deadline and (status_at is None or refused_at is None):
            if status_at is None and await self.settled(connected=False):
                status_at = time.monotonic() - started
            if refused_at is None and (await ask(ip, 1)).error is not None:
                refused_at = time.monotonic() - started
            await asyncio.sleep(0.1)
        return status_at, refused_at


async def _sites_alone(demo: NetworkDemo) -> bool:
    """After the cut: East's Site no longer counts West in its network (the status caught up)."""
    site = await demo.api(demo.east).get(RESOURCES["Site"], demo.east, namespace_of(demo.east))
    return demo.west not in {str(s.get("name")) for s in items(site, "status", "network")}


async def run_demo(sites: LocalSites, console: Console, limit_seconds: float, observer: bool = True) -> bool:
    """The demo's story on running sites; True when the client in West got through to East. With ``observer``, a
    NetworkObserver in West, whose console URL and view of the network are printed."""
    demo = NetworkDemo(sites, console, limit_seconds)
    console.line()
    console.line("Sites:")
    for name in sites.names:
        cluster = sites[name]
        console.line(f"  {name.ljust(7)} {cluster.sim.address_block.network}  kubeconfig {cluster.kubeconfig_path}")
    console.line()
    await demo.apply_sites()
    linked = True
    for granting, redeeming in link_pairs(sites.names):
        linked = await demo.link(granting, redeeming) and linked
    result = await demo.first_answer() if linked else ClientResult("-", error="the sites are not linked")
    east_pods = await backend_pods(demo.api(demo.east), demo.east)
    ok = result.ok_for(east_pods)
    if ok and await _until(lambda: demo.settled(connected=True), STATUS_SECONDS) is None:
        console.line(f"(the statuses did not all agree with the traffic within {STATUS_SECONDS:.0f}s)")
    console.line()
    console.line("Statuses:")
    for line in format_rows(await demo.statuses()):
        console.line(f"  {line}")
    console.line()
    console.line(result.describe(demo.east))
    if ok:
        console.line(f"  path: client -> Service -> router in {' -> router in '.join(sites.names)} -> backend Pod "
                     f"(each link mutual TLS); East's backend Pods: {', '.join(sorted(east_pods))}")
    if ok and observer:
        # the connection that was answered first, and the CONNECTIONS after it
        await show_observer(demo.api(demo.west), namespace_of(demo.west), "West", console,
                            sites=len(sites.names), connections=len(result.answered) + 1, seconds=STATUS_SECONDS)
    ip = await demo.west_service_ip()
    if ok and ip is not None:
        a, b = sites.names[-2], sites.names[-1]
        console.line()
        console.line(f"Cutting the link {a} - {b}:")
        deleted = await demo.cut(a, b)
        console.line("  deleted " + (", ".join(f"Link {name} in {site}" for site, name in deleted) or "no Link"))
        status_at, refused_at = await demo.after_cut(ip)
        console.line("  West's Listener: hasMatchingConnector=false " +
                     (f"after {status_at:.1f}s" if status_at is not None else f"not within {CUT_SECONDS:.0f}s"))
        console.line("  client in west -> refused " +
                     (f"after {refused_at:.1f}s" if refused_at is not None else f"? still answered after "
                                                                                f"{CUT_SECONDS:.0f}s"))
        await _until(lambda: _sites_alone(demo), STATUS_SECONDS)
        for line in format_rows([row for row in await demo.statuses() if row.kind in ("Site", "Link", "Listener",
                                                                                      "Connector")]):
            console.line(f"  {line}")
    return ok


async def run(args: argparse.Namespace) -> int:
    console = Console()
    state_dir = absolute(args.state_dir)

    async def body() -> int:
        if args.system:
            console.line("listener-operator network-demo --system: a local cluster (West) and a system site on this "
                         "host, linked with skupper commands")
            ok = await system_demo(state_dir, console)
            console.line("")
            console.line("Both clients got through." if ok else f"Not every client got through (logs: {state_dir}).")
            return 0 if ok else 1
        names = site_names(args.sites)
        console.line(f"listener-operator network-demo: {len(names)} local clusters side by side as sites "
                     f"{' - '.join(names)}")
        async with LocalSites(names, SiteOptions(state_dir=state_dir), console) as sites:
            ok = await run_demo(sites, console, args.timeout)
            console.line()
            if args.once:
                console.line("The client in West reached the backend in East." if ok else
                             "The client in West did NOT reach the backend in East (logs: "
                             f"{state_dir}/<site>/logs).")
                return 0 if ok else 1
            console.line("The sites keep running; kubectl with the kubeconfigs above. Press Ctrl-C to stop.")
            await sites.watch_children()
        return 0

    return await run_command(body, console, state_dir)
