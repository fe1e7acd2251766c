"""The demo's proof that published addresses work: connect to every address a Listener publishes and say which Pod
answered (``127.1.1.2:30017 -> broker-1``).

:func:`probe_listeners` does the I/O (bounded: a few connections per address, each with a short timeout, loopback
only through :mod:`kubesim.testing.traffic`); :func:`format_reach` renders the result; :func:`unexpected` says which
addresses failed although Pods stand behind them (an address of a Listener no Pod mounts is expected to refuse).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubesim.testing.traffic import published_targets, who_answers
from operator_runtime.objects import items, mapping

#: Connections per published address: enough to show a shared Listener spreading over its replicas.
MAX_CONNECTIONS = 6
CONNECT_SECONDS = 3.0


@dataclass
class Reach:
    listener: str  # namespace/name
    target: str  # address:port as published
    answered: list[str] = field(default_factory=list)  # Pod names, one per connection
    error: str | None = None
    backends: int = 0  # ready endpoints behind the Listener's Service

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.answered)

    @property
    def expected_refusal(self) -> bool:
        return self.backends == 0 and not self.answered


def ready_endpoints(slices: list[dict[str, Any]]) -> int:
    """Endpoints of a Service's EndpointSlices that receive traffic (ready, or serving while terminating)."""
    count = 0
    for slice_ in slices:
        for endpoint in items(slice_, "endpoints"):
            conditions = mapping(endpoint, "conditions")
            if conditions.get("ready", True) or conditions.get("serving"):
                count += 1
    return count


async def probe_listeners(sim: Any, namespace: str = "default") -> list[Reach]:
    """Connect to every published address of every Listener in ``namespace`` of the running kubesim ``sim``."""
    api = sim.api
    listeners, _ = await api.list("listeners.listeners.stackable.tech", namespace)
    results: list[Reach] = []
    for listener in sorted(listeners, key=lambda obj: obj["metadata"]["name"]):
        name = listener["metadata"]["name"]
        service = mapping(listener, "status").get("serviceName") or name
        slices, _ = await api.list("endpointslices.discovery.k8s.io", namespace,
                                   label_selector=f"kubernetes.io/service-name={service}")
        backends = ready_endpoints(slices)
        connections = min(MAX_CONNECTIONS, max(1, 2 * backends))
        for target in published_targets(items(listener, "status", "ingressAddresses")):
            reach = Reach(f"{namespace}/{name}", str(target), backends=backends)
            results.append(reach)
            ip = sim.cluster.resolve(target.address)
            if ip is None:
                reach.error = f"{target.address} does not resolve in the local cluster"
                continue
            for _ in range(connections):
                try:
                    reach.answered.append(await who_answers(ip, target.port, seconds=CONNECT_SECONDS))
                except (OSError, ConnectionError, TimeoutError) as error:
                    reach.error = _describe(error)
                    break
    return results


def _describe(error: BaseException) -> str:
    cause = getattr(error, "os_error", None)  # aiohttp wraps the socket error of a failed connect
    if isinstance(cause, OSError):
        error = cause
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, TimeoutError):
        return f"no answer within {CONNECT_SECONDS:.0f}s"
    return (str(error) or type(error).__name__)[:200]


def format_reach(results: list[Reach]) -> list[str]:
    """One line per published address: who answered, or why nobody did."""
    width_listener = max((len(r.listener) for r in results), default=0)
    width_target = max((len(r.target) for r in results), default=0)
    lines = []
    for reach in results:
        if reach.answered and reach.error is None:
            pods = sorted(set(reach.answered))
            outcome = ", ".join(pods)
            if len(reach.answered) > 1:
                outcome += f" ({len(reach.answered)} connections)"
        elif reach.expected_refusal:
            outcome = f"{reach.error or 'no answer'} (expected: no Pod mounts this Listener)"
        else:
            outcome = f"FAILED: {reach.error or 'no answer'}"
        lines.append(f"{reach.listener.ljust(width_listener)}  {reach.target.ljust(width_target)} -> {outcome}")
    return lines


def unexpected(results: list[Reach]) -> list[Reach]:
    """Addresses that should have answered (Pods stand behind them) but did not."""
    return [r for r in results if not r.ok and not r.expected_refusal]
