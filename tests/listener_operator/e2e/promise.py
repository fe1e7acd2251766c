"""What the promise tests need to watch a Listener address as a client of it does: an HTTP client that holds one
kept-alive connection, asks ``GET /hostname`` every few milliseconds, and reconnects when the connection breaks; and
the local cluster they run on (``listener-operator local up`` in this process, its node lifecycle scaled down)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devenv.up import Console, LocalCluster, LocalOptions
from kubesim.testing.patience import patience

NS = "default"
AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.53"
LISTENERS = "listeners.listeners.stackable.tech"
STEP = 0.02  # seconds between a client's requests
#: The node lifecycle, scaled down: a 2 s grace period (stretched on a loaded machine, so that heartbeats a busy
#: event loop delays are not taken for a silent node) stands for Kubernetes' 50 s.
SCALED_LIFECYCLE = {"node_lease_duration": 2.0, "node_lease_renew": 0.25, "node_monitor_grace": patience(2.0),
                    "node_monitor_period": 0.2}


@dataclass
class Outcome:
    at: float  # time.monotonic()
    answer: str | None  # the hostname that answered; None: the request failed
    error: str = ""


@dataclass
class KeepAliveClient:
    """One client of ``ip:port``: a kept-alive HTTP/1.1 connection, reopened whenever it breaks."""

    ip: str
    port: int
    outcomes: list[Outcome] = field(default_factory=list)
    connections: int = 0
    _task: asyncio.Task[None] | None = None

    def start(self, within: float) -> None:
        self._task = asyncio.ensure_future(self._run(time.monotonic() + within))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self, until: float) -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        while time.monotonic() < until:
            try:
                if writer is None or reader is None:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection(self.ip, self.port), 1.0)
                    self.connections += 1
                writer.write(b"GET /hostname HTTP/1.1\r\nHost: promise\r\n\r\n")
                await writer.drain()
                answer = await asyncio.wait_for(_response(reader), 1.0)
                self.outcomes.append(Outcome(time.monotonic(), answer))
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as error:
                self.outcomes.append(Outcome(time.monotonic(), None, f"{type(error).__name__}: {error}"[:200]))
                if writer is not None:
                    writer.close()
                reader = writer = None
            await asyncio.sleep(STEP)  # the client's own pace
        if writer is not None:
            writer.close()

    # ------------------------------------------------------------------------------------------ what it saw

    def answers(self) -> set[str]:
        return {o.answer for o in self.outcomes if o.answer is not None}

    def first_answer_after(self, moment: float) -> float | None:
        return next((o.at for o in self.outcomes if o.at >= moment and o.answer is not None), None)

    def longest_outage(self, start: float = 0.0, end: float = float("inf")) -> float:
        """The longest time from a failed request to the next answer, within ``[start, end]``."""
        longest, failing_since = 0.0, None
        for outcome in self.outcomes:
            if not start <= outcome.at <= end:
                continue
            if outcome.answer is None:
                failing_since = outcome.at if failing_since is None else failing_since
            elif failing_since is not None:
                longest, failing_since = max(longest, outcome.at - failing_since), None
        if failing_since is not None:
            longest = max(longest, min(end, time.monotonic()) - failing_since)
        return longest

    async def until_answered(self, after: float, within: float = 30.0) -> float:
        deadline = time.monotonic() + patience(within)
        while time.monotonic() < deadline:
            found = self.first_answer_after(after)
            if found is not None:
                return found
            await asyncio.sleep(STEP)
        raise AssertionError(f"{self.ip}:{self.port} did not answer within {within}s; last: {self.outcomes[-3:]}")


async def _response(reader: asyncio.StreamReader) -> str:
    status = await reader.readline()
    if not status.startswith(b"HTTP/1.1 200"):
        raise ValueError(f"unexpected answer {status[:60]!r}")
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    return (await reader.readexactly(length)).decode()


def broker_statefulset(replicas: int = 3) -> dict[str, Any]:
    """The example's brokers (examples/02-statefulset-per-replica.yaml) answering HTTP ``/hostname`` on 9092, each
    with its own pinned Listener through a listener volume of the stable-nodes preset's ``external-stable``."""
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "broker", "namespace": NS},
        "spec": {
            "replicas": replicas, "serviceName": "broker", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "broker"}},
            "template": {"metadata": {"labels": {"app": "broker"}}, "spec": {"containers": [{
                "name": "broker", "image": AGNHOST, "args": ["netexec", "--http-port=9092"],
                "ports": [{"name": "kafka", "containerPort": 9092}],
                "volumeMounts": [{"name": "listener", "mountPath": "/stackable/listener"}]}]}},
            "volumeClaimTemplates": [{
                "metadata": {"name": "listener",
                             "annotations": {"listeners.stackable.tech/listener-class": "external-stable"}},
                "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "listeners.stackable.tech",
                         "resources": {"requests": {"storage": "1"}}}}],
        },
    }


def local_cluster(state_dir: Path, **options: Any) -> LocalCluster:
    """``listener-operator local up`` in this process (3 nodes, stable-nodes), its output kept quiet."""
    settings = LocalOptions(state_dir=state_dir, nodes=3, preset="stable-nodes", **options)
    return LocalCluster(settings, Console(io.StringIO()))


def volume_files(root: Path, prefix: str = "") -> dict[str, str]:
    """A listener volume as the Pod reads it (through its links; the writer's ``..data`` entries are no part of what
    it reads): relative path -> file content."""
    found: dict[str, str] = {}
    for path in sorted(root.iterdir()):
        if path.name.startswith(".."):
            continue
        key = f"{prefix}{path.name}"
        if path.is_dir():
            found.update(volume_files(path, f"{key}/"))
        else:
            found[key] = path.read_text()
    return found
