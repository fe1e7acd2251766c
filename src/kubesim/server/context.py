"""What the request handlers use of the API server (``ServerContext``): the store and its registry, the injected
faults, the ServiceAccount token issuer, the watch bookmark interval, and the simulated cluster's hooks for
``pods/log``, ``pods/exec`` and ``/kubesim/nodes`` (``KubeSim`` connects them while it runs a cluster).

``ApiServer`` owns one and hands it to every handler, so a handler never imports the server that calls it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kubesim.auth.serviceaccounts import ServiceAccountTokens
from kubesim.faults import Faults
from kubesim.kinds.resources import Registry
from kubesim.store.store import Store

#: (namespace, pod, container) -> the container's log file, or None when there is none
LogPath = Callable[[str, str, str], Path | None]
#: (namespace, pod, container, argv) -> an object with ``code``, ``stdout``, ``stderr``; or why it cannot run
ExecCommand = Callable[[str, str, str, list[str]], Any]


class NodeControl(Protocol):
    """The simulated cluster's side of ``/kubesim/nodes`` (``kubesim.cluster.cluster.Cluster``)."""

    async def control_node(self, name: str, action: str) -> bool: ...

    def node_states(self) -> dict[str, bool]: ...


@dataclass
class ServerContext:
    store: Store
    registry: Registry
    faults: Faults
    service_accounts: ServiceAccountTokens
    bookmark_interval: float
    pod_logs: LogPath | None = None
    exec_command: ExecCommand | None = None
    node_control: NodeControl | None = None
