"""`listener-operator demo`: `local up`, the examples applied, a live progress line, then a readable summary.

The summary is what a person wants to see: every Listener with its class, service type and the addresses (with
ports) it publishes, which Pod answers at each of those addresses (a real TCP connection through kubesim's
kube-proxy), and the listener volume of one Pod exactly as the Pod reads it. Then the service network: the
Skupper-style example (``examples/service-network/``, a Site, a Listener and a Connector) with its statuses, and a
client reaching a backend Pod through the Listener's Service and the site's router (``devenv.network_demo``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devenv.network_demo import EXAMPLES_DIR as NETWORK_EXAMPLES_DIR
from devenv.network_demo import format_network, probe_network, wait_network_ready
from devenv.observer import show_observer
from devenv.reach import format_reach, probe_listeners, unexpected
from devenv.up import (
    Console,
    LocalCluster,
    LocalError,
    absolute,
    add_local_arguments,
    options_from_args,
    run_command,
    serve_until_stopped,
)
from operator_runtime.objects import items, mapping

#: The namespace of the service-network example (examples/service-network/).
NETWORK_NAMESPACE = "hello-world"

#: The ``listener-operator demo`` help line (a command of the ``listener_operator.commands`` entry-point group).
HELP = "run the local cluster and the examples, then show the result"

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
DEFAULT_TIMEOUT = 90.0

# kind -> resource name (plural.group) for the kinds the examples use.
RESOURCES = {
    ("listeners.stackable.tech/v1alpha1", "ListenerClass"): "listenerclasses.listeners.stackable.tech",
    ("listeners.stackable.tech/v1alpha1", "Listener"): "listeners.listeners.stackable.tech",
    ("skupper.io/v2alpha1", "Site"): "sites.skupper.io",
    ("skupper.io/v2alpha1", "Listener"): "listeners.skupper.io",
    ("skupper.io/v2alpha1", "Connector"): "connectors.skupper.io",
    ("observability.skupper.io/v2alpha1", "NetworkObserver"): "networkobservers.observability.skupper.io",
    ("apps/v1", "StatefulSet"): "statefulsets.apps",
    ("apps/v1", "Deployment"): "deployments.apps",
    ("v1", "Service"): "services",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Namespace"): "namespaces",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("v1", "Pod"): "pods",
}

#: the scripts install the commands in the checkout's virtual environment, which a user's shell does not have yet
_PATH_HINT = ("The commands (listener-operator, kubesim, skupper, service-network, kubectl, helm) are in .venv/bin: "
              "run '. .venv/bin/activate' to have them on PATH.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_local_arguments(parser)
    parser.add_argument("--examples", type=Path, default=EXAMPLES_DIR, help="directory of example manifests")
    parser.add_argument("--network-examples", type=Path, default=NETWORK_EXAMPLES_DIR,
                        help="directory of the service-network example manifests (Site, Listener, Connector)")
    parser.add_argument("--once", action="store_true", help="exit after the summary (exit code 0 only if everything "
                                                            "came up)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds to wait for everything to come up")


def load_examples(directory: Path) -> list[dict[str, Any]]:
    if not directory.is_dir():
        raise LocalError(f"examples directory {directory} does not exist")
    objects: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as error:
            raise LocalError(f"{path} is not valid YAML: {error}") from None
        for document in documents:
            if not document:
                continue
            key = (document.get("apiVersion"), document.get("kind"))
            if key not in RESOURCES:
                raise LocalError(f"{path}: the demo does not know how to apply {key[1]} ({key[0]})")
            objects.append(document)
    return objects


async def apply_examples(cluster: LocalCluster, objects: list[dict[str, Any]]) -> None:
    api = cluster.sim.api
    for obj in objects:
        resource = RESOURCES[(obj["apiVersion"], obj["kind"])]
        namespace = obj["metadata"].get("namespace")
        await api.patch(resource, obj["metadata"]["name"], obj, namespace=namespace, patch_type="apply",
                        field_manager="listener-operator-demo", force=True)


@dataclass
class Progress:
    pods_total: int = 0
    pods_ready: int = 0
    listeners_total: int = 0
    listeners_addressed: int = 0

    @property
    def done(self) -> bool:
        return (self.pods_total > 0 and self.pods_ready == self.pods_total
                and self.listeners_total > 0 and self.listeners_addressed == self.listeners_total)

    def render(self) -> str:
        return (f"pods ready {self.pods_ready}/{self.pods_total}, "
                f"listeners with addresses {self.listeners_addressed}/{self.listeners_total}")


def _pod_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in items(pod, "status", "conditions"))


async def measure(cluster: LocalCluster, expected_pods: int) -> Progress:
    api = cluster.sim.api
    pods, _ = await api.list("pods", "default")
    listeners, _ = await api.list("listeners.listeners.stackable.tech", "default")
    return Progress(
        pods_total=max(expected_pods, len(pods)),
        pods_ready=sum(1 for pod in pods if _pod_ready(pod)),
        listeners_total=len(listeners),
        listeners_addressed=sum(1 for item in listeners if items(item, "status", "ingressAddresses")))


async def wait_until_up(cluster: LocalCluster, console: Console, expected_pods: int,
                        limit_seconds: float) -> Progress:
    """Follow pods and listeners through watches; redraw the progress line on every change."""
    api = cluster.sim.api
    changed = asyncio.Event()

    async def follow(resource: str) -> None:
        async for _ in api.watch(resource, "default"):
            changed.set()

    followers = [asyncio.ensure_future(follow(resource))
                 for resource in ("pods", "listeners.listeners.stackable.tech")]
    interactive = sys.stdout.isatty()
    deadline = time.monotonic() + limit_seconds
    last = ""
    try:
        while True:
            progress = await measure(cluster, expected_pods)
            text = progress.render()
            if text != last:
                if interactive:
                    console.stream.write(f"\r  - {text}   ")
                    console.stream.flush()
                else:
                    console.step(text)
                last = text
            if progress.done:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            changed.clear()
            watcher = asyncio.ensure_future(changed.wait())
            crash = asyncio.ensure_future(cluster.watch_children())
            done, _ = await asyncio.wait({watcher, crash}, timeout=min(remaining, 1.0),
                                         return_when=asyncio.FIRST_COMPLETED)
            watcher.cancel()
            crash.cancel()
            if crash in done:
                crash.result()
        if interactive:
            console.line()
        return progress
    finally:
        for follower in followers:
            follower.cancel()


async def listener_rows(cluster: LocalCluster) -> list[list[str]]:
    api = cluster.sim.api
    classes = {item["metadata"]["name"]: item for item in
               (await api.list("listenerclasses.listeners.stackable.tech"))[0]}
    listeners, _ = await api.list("listeners.listeners.stackable.tech")
    rows = []
    for item in sorted(listeners, key=lambda obj: (obj["metadata"]["namespace"], obj["metadata"]["name"])):
        class_name = mapping(item, "spec").get("className") or ""
        service_type = mapping(classes.get(class_name), "spec").get("serviceType", "?")
        addresses = []
        for entry in items(item, "status", "ingressAddresses"):
            ports = ",".join(f"{name}={port}" for name, port in sorted(mapping(entry, "ports").items()))
            addresses.append(f"{entry['address']} [{ports}]")
        rows.append([f"{item['metadata']['namespace']}/{item['metadata']['name']}", class_name, service_type,
                     "; ".join(addresses) or "(none yet)"])
    return rows


def format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [header, *rows]]
    return "\n".join(lines)


def render_volume_tree(root: Path, shown_as: Path | None = None) -> str:
    """The listener volume as the Pod sees it: directories, files with their contents, symlinks with targets;
    the first line names the directory as ``shown_as`` (default ``root``)."""
    lines: list[str] = []
    # The driver swaps the tree atomically through a `..data` symlink (as kubelet does for ConfigMap volumes); the
    # top-level names are links into it. Show what a Pod reads through those names, not the swap machinery.
    data = (root / "..data").resolve() if (root / "..data").exists() else root.resolve()

    def through_data(entry: Path) -> bool:
        return entry.is_symlink() and str(entry.readlink()) == f"..data/{entry.name}"

    def shown_target(entry: Path) -> str:
        target = entry.resolve()
        try:
            return str(target.relative_to(data))
        except ValueError:
            return str(entry.readlink())

    def walk(directory: Path, prefix: str) -> None:
        entries = sorted((p for p in directory.iterdir() if not p.name.startswith("..")), key=lambda p: p.name)
        for index, entry in enumerate(entries):
            last = index == len(entries) - 1
            branch = "`-- " if last else "|-- "
            if through_data(entry):
                entry = data / entry.name
            if entry.is_symlink():
                lines.append(f"{prefix}{branch}{entry.name} -> {shown_target(entry)}")
            elif entry.is_dir():
                lines.append(f"{prefix}{branch}{entry.name}/")
                walk(entry, prefix + ("    " if last else "|   "))
            else:
                lines.append(f"{prefix}{branch}{entry.name}: {entry.read_text(errors='replace')!r}")

    lines.append(f"{shown_as or root}/")
    walk(root, "")
    return "\n".join(lines)


async def find_volume_of(cluster: LocalCluster, pod_name: str, volume: str) -> Path | None:
    """The target directory kubelet handed the CSI driver for `volume` of the Pod."""
    api = cluster.sim.api
    pod = await api.get("pods", pod_name, "default")
    claim = None
    for entry in items(pod, "spec", "volumes"):
        if entry.get("name") == volume:
            if "persistentVolumeClaim" in entry:
                claim = entry["persistentVolumeClaim"]["claimName"]
            elif "ephemeral" in entry:
                claim = f"{pod_name}-{volume}"
    if claim is None or not pod["spec"].get("nodeName"):
        return None
    pvc = await api.get("persistentvolumeclaims", claim, "default")
    pv_name = mapping(pvc, "spec").get("volumeName")
    if not pv_name:
        return None
    path = (cluster.sim.cluster.kubelet_dir(pod["spec"]["nodeName"]) / "pods" / pod["metadata"]["uid"] / "volumes"
            / "kubernetes.io~csi" / pv_name / "mount")
    return path if path.is_dir() else None


def expected_pod_count(objects: list[dict[str, Any]]) -> int:
    return sum(int(mapping(obj, "spec").get("replicas", 1)) for obj in objects
               if obj["kind"] in ("StatefulSet", "Deployment"))


async def show_summary(cluster: LocalCluster, console: Console) -> bool:
    """Print the summary; True when every published address with Pods behind it answered."""
    console.line()
    console.line("Listeners:")
    console.line(format_table(["LISTENER", "CLASS", "TYPE", "ADDRESSES [PORTS]"], await listener_rows(cluster)))
    console.line()
    console.line("Connecting to every published address (which Pod answered):")
    reach = await probe_listeners(cluster.sim)
    for line in format_reach(reach):
        console.line(f"  {line}")
    console.line()
    path = await find_volume_of(cluster, "broker-0", "listener")
    if path is None:
        console.line("Listener volume of pod default/broker-0: not mounted")
    else:
        console.line("Listener volume of pod default/broker-0 (mounted at /stackable/listener in the container):")
        console.line(render_volume_tree(path, shown_as=cluster.shown_path(path)))
    return not unexpected(reach)


async def show_network(cluster: LocalCluster, console: Console, limit_seconds: float) -> bool:
    """Print the service network's statuses and who answers through its Listeners; True when all is well."""
    await wait_network_ready(cluster.sim.api, limit_seconds)
    reach = await probe_network(cluster.sim)
    console.line()
    console.line("Service network (skupper.io): statuses, and a client through each Listener's Service:")
    for line in format_network(reach):
        console.line(f"  {line}")
    return reach.ok


async def run(args: argparse.Namespace) -> int:
    console = Console()

    async def body() -> int:
        options = options_from_args(args)
        objects = load_examples(args.examples)
        network_objects = load_examples(args.network_examples)
        console.line(f"listener-operator demo: {options.nodes} simulated nodes, preset {options.preset}")
        async with LocalCluster(options, console) as cluster:
            await apply_examples(cluster, objects + network_objects)
            console.step(f"applied {len(objects)} example objects from {args.examples} and "
                         f"{len(network_objects)} from {args.network_examples}")
            started = time.monotonic()
            progress = await wait_until_up(cluster, console, expected_pod_count(objects), args.timeout)
            reachable = await show_summary(cluster, console)
            network_ok = await show_network(cluster, console, max(1.0, args.timeout - (time.monotonic() - started)))
            if not network_ok:
                console.line("The service-network example did not come up (see above).")
                reachable = False
            else:
                # the examples hold a NetworkObserver: the console of the hello-world site
                await show_observer(cluster.sim.api, NETWORK_NAMESPACE, "the hello-world site", console, sites=1,
                                    create=False)
            console.line()
            if progress.done and not reachable:
                console.line("Some published addresses did not answer (see FAILED above).")
                console.line(f"Logs: {cluster.log_dir}")
                if args.once:
                    return 1
            if not progress.done:
                console.line(f"Not everything came up within {args.timeout:.0f}s: {progress.render()}")
                console.line(f"Logs: {cluster.log_dir}")
                if args.once:
                    return 1
            if args.once:
                console.line("Everything came up, and every published address reached its Pods.")
                console.line(_PATH_HINT)
                return 0
            console.line(f"kubeconfig: {cluster.kubeconfig_path}")
            console.line(f"Try:   {cluster.kubectl_hint()}")
            console.line(_PATH_HINT)
            console.line("Press Ctrl-C to stop.")
            await serve_until_stopped(cluster)
        return 0

    return await run_command(body, console, absolute(args.state_dir))
