"""The demo's service-network part: the examples in ``examples/service-network/`` (a Site, backend Pods, a Connector
selecting them and a Listener) applied to the local cluster, the statuses a user sees, and a client connecting to
the Listener's Service: through kube-proxy to the site's router Pod, and from there to a backend Pod, whose name is
printed (``backend.hello-world:8080 -> backend-...``). Loopback addresses only, bounded in connections and time.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubesim.testing.traffic import who_answers
from operator_runtime.objects import mapping

__all__ = ["EXAMPLES_DIR", "NetworkReach", "format_network", "probe_network", "wait_network_ready"]

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples" / "service-network"
CONNECTIONS = 6
CONNECT_SECONDS = 3.0
KINDS = (("Site", "sites.skupper.io"), ("Listener", "listeners.skupper.io"), ("Connector", "connectors.skupper.io"))


@dataclass
class NetworkReach:
    """What the service-network example looks like: statuses, and who answered through each Listener."""

    statuses: list[tuple[str, str, str, str]] = field(default_factory=list)   # kind, namespace/name, status, message
    answers: dict[str, list[str]] = field(default_factory=dict)              # "svc.ns:port" -> Pod names
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.answers) and not self.errors and all(s[2] == "Ready" for s in self.statuses)


async def _objects(api: Any) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for kind, resource in KINDS:
        for obj in (await api.list(resource))[0]:
            found.append((kind, obj))
    return found


async def wait_network_ready(api: Any, limit_seconds: float) -> bool:
    """Wait until every Site, Listener and Connector is Ready (or the time is up)."""
    deadline = time.monotonic() + limit_seconds
    while True:
        objects = await _objects(api)
        if objects and all(mapping(obj, "status").get("status") == "Ready" for _, obj in objects):
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)


async def probe_network(sim: Any) -> NetworkReach:
    """The statuses, then a few connections to each Listener's Service (its cluster IP and port)."""
    reach = NetworkReach()
    objects = await _objects(sim.api)
    for kind, obj in sorted(objects, key=lambda o: (o[0], o[1]["metadata"]["namespace"], o[1]["metadata"]["name"])):
        status = mapping(obj, "status")
        reach.statuses.append((kind, f"{obj['metadata']['namespace']}/{obj['metadata']['name']}",
                               str(status.get("status") or "-"), str(status.get("message") or "")))
    for kind, obj in objects:
        if kind != "Listener":
            continue
        namespace, spec = obj["metadata"]["namespace"], mapping(obj, "spec")
        target = f"{spec.get('host')}.{namespace}:{spec.get('port')}"
        ip = sim.cluster.resolve(f"{spec.get('host')}.{namespace}.svc.cluster.local")
        if ip is None:
            reach.errors[target] = "the Service does not resolve"
            continue
        answered: list[str] = []
        for _ in range(CONNECTIONS):
            try:
                answered.append(await who_answers(ip, int(spec.get("port") or 0), seconds=CONNECT_SECONDS))
            except (OSError, TimeoutError) as error:
                reach.errors[target] = str(error) or type(error).__name__
                break
        reach.answers[target] = answered
    return reach


def format_network(reach: NetworkReach) -> list[str]:
    lines = []
    width = max((len(s[1]) for s in reach.statuses), default=0)
    for kind, name, status, message in reach.statuses:
        lines.append(f"{kind.ljust(9)}  {name.ljust(width)}  {status.ljust(7)}  {message}")
    for target, answered in reach.answers.items():
        if target in reach.errors:
            lines.append(f"client -> {target} -> FAILED: {reach.errors[target][:200]}")
        else:
            pods = ", ".join(sorted(set(answered)))
            lines.append(f"client -> {target} -> router -> {pods} ({len(answered)} connections)")
    return lines

