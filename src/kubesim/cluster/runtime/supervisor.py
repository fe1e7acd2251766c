"""Running the containers of one Pod: start through the registry's handler, readiness, restarts with back-off.

Each container gets a ``ContainerRunner`` task that starts it, watches its readiness (its ``readinessProbe``; without
one it is ready once started, as the kubelet has it), waits for it to exit and restarts it per the Pod's
``restartPolicy`` with the kubelet's crash-loop back-off (the first restart at once, then ``initial * 2**n`` up to
``max``; reset after a run longer than twice ``max``). Every change of a container's state calls ``on_change`` so the
kubelet can publish the Pod status; the state itself is plain data (``ContainerState``) that ``status.py`` turns into
the Pod status.

Init containers (``PodRuntime(init_specs=...)``) run first, one after the other, each to completion (restarted on
failure with the same back-off unless the Pod's policy is ``Never``); the containers start once all have succeeded
and wait with reason ``PodInitializing`` until then. An init container that fails for good leaves the Pod
``Failed`` and its containers never start.

A container whose image has no handler never runs: it waits in ``ImagePullBackOff`` with a message naming the
images that do run here (a ``Failed`` Event says the same), so its Pod stays Pending and not Ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubesim.cluster.base.objects import now
from kubesim.cluster.runtime.probes import ProbeResult, run_probe, timing
from kubesim.cluster.runtime.registry import Container, ContainerSpec, RuntimeHandler

log = logging.getLogger(__name__)

EventSink = Callable[[str, str, str], Awaitable[None]]  # (type, reason, message)


@dataclass
class ContainerState:
    """What the kubelet reports for one container (see ``status.container_status``)."""

    name: str
    image: str
    simulated: bool
    restart_count: int = 0
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    last_terminated: dict[str, Any] | None = None
    ready: bool = False
    final: bool = False  # terminated and not restarted any more
    ever_started: bool = False


def should_restart(policy: str, exit_code: int) -> bool:
    if policy == "Never":
        return False
    if policy == "OnFailure":
        return exit_code != 0
    return True


def missing_image_message(image: str, images: Sequence[str]) -> str:
    """Why a container of ``image`` waits: no runtime here runs it, and which images do (all bounded)."""
    known = ", ".join(images)
    if len(known) > 400:
        known = known[:397] + "..."
    return (f'Back-off pulling image "{image[:200]}": kubesim runs no container images, only built-in programs '
            f"for these: {known or 'none'} (docs/kubesim.md, \"Images\")")


def backoff_delay(restarts_in_window: int, initial: float, maximum: float) -> float:
    """The kubelet's crash-loop back-off before restart number ``restarts_in_window + 1`` (first one at once)."""
    if restarts_in_window <= 0:
        return 0.0
    return float(min(initial * 2 ** (restarts_in_window - 1), maximum))


class ContainerRunner:
    def __init__(
        self,
        spec: ContainerSpec,
        handler: RuntimeHandler | None,
        *,
        restart_policy: str,
        backoff: tuple[float, float],
        on_change: Callable[[], None],
        on_event: EventSink,
        images: Sequence[str] = (),
        previous: dict[str, Any] | None = None,
        waiting_reason: str = "ContainerCreating",
    ) -> None:
        self.spec = spec
        self.images = images
        self.handler = handler
        self.restart_policy = restart_policy
        self.backoff = backoff
        self.on_change = on_change
        self.on_event = on_event
        self.state = ContainerState(spec.name, spec.image, simulated=handler is None, reason=waiting_reason)
        if previous is not None:
            # The container has a history in the API (it ran before its node went down): counting goes on from it.
            self.state.restart_count = int(previous.get("restartCount") or 0)
            last = (previous.get("lastState") or {}).get("terminated")
            if isinstance(last, dict):
                self.state.last_terminated = dict(last)
        self.first_attempt = asyncio.Event()
        self.finished = asyncio.Event()  # ended for good (not restarted any more)
        self._task: asyncio.Future[None] | None = None
        self._container: Container | None = None

    def start(self) -> None:
        if self.handler is None:
            # No runtime runs this image: it waits, as a node that cannot pull an image does, and never shows
            # Running with nothing behind it.
            self.state.state, self.state.reason = "waiting", "ImagePullBackOff"
            self.state.message = missing_image_message(self.spec.image, self.images)
            self._task = asyncio.ensure_future(self.on_event("Warning", "Failed", self.state.message))
            self.first_attempt.set()
            return
        self._task = asyncio.create_task(self._run(), name=f"runner:{self.spec.pod_name}/{self.spec.name}")

    async def stop(self, grace_seconds: float) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        container, self._container = self._container, None
        if container is not None:
            await container.stop(grace_seconds)

    def _changed(self) -> None:
        self.on_change()

    async def _run(self) -> None:
        assert self.handler is not None
        restarts_in_window = 0
        while True:
            self.state.state, self.state.reason, self.state.message = "running", "", ""
            self.state.started_at, self.state.finished_at, self.state.exit_code = now(), None, None
            self.state.ready = False
            started = time.monotonic()
            readiness: asyncio.Task[None] | None = None
            try:
                self._container = await self.handler.start(self.spec)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("starting %s/%s failed: %s", self.spec.pod_name, self.spec.name, error)
                code, reason = 128, "StartError"
                self.state.message = str(error)[:300]
            else:
                self.state.ever_started = True
                self.first_attempt.set()
                self._changed()
                readiness = asyncio.create_task(self._readiness())
                try:
                    code = await self._container.wait()
                finally:
                    await _cancel_until_done(readiness)
                self._container = None
                reason = "Completed" if code == 0 else "Error"
            self.first_attempt.set()
            finished = now()
            terminated = {
                "exitCode": code,
                "reason": reason,
                "startedAt": self.state.started_at,
                "finishedAt": finished,
            }
            if self.state.message:
                terminated["message"] = self.state.message
            self.state.ready = False
            if not should_restart(self.restart_policy, code):
                self.state.state, self.state.reason, self.state.exit_code = "terminated", reason, code
                self.state.finished_at, self.state.final = finished, True
                self.finished.set()
                self._changed()
                return
            self.state.last_terminated = terminated
            if time.monotonic() - started > 2 * self.backoff[1]:
                restarts_in_window = 0
            delay = backoff_delay(restarts_in_window, *self.backoff)
            restarts_in_window += 1
            if delay > 0:
                pod = f"{self.spec.pod_name}_{self.spec.namespace}({self.spec.pod_uid})"
                self.state.state, self.state.reason = "waiting", "CrashLoopBackOff"
                self.state.message = f"back-off {_seconds(delay)} restarting failed container={self.spec.name} pod={pod}"
                self._changed()
                await self.on_event(
                    "Warning", "BackOff", f"Back-off restarting failed container {self.spec.name} in pod {pod}"
                )
                await asyncio.sleep(delay)  # the back-off itself: a timer, not a wait for some other event
            self.state.restart_count += 1

    async def _readiness(self) -> None:
        container = self.spec.container
        probe = container.get("readinessProbe")
        if isinstance(probe, dict) and probe:
            await self._probe_loop(probe)
            return
        self._set_ready(True)  # no probe: ready once started

    async def _probe_loop(self, probe: dict[str, Any]) -> None:
        times = timing(probe)
        if times.initial_delay:
            await asyncio.sleep(times.initial_delay)
        successes = failures = 0
        while True:
            started = time.monotonic()
            result: ProbeResult = await run_probe(probe, self.spec.pod_ip, self.spec.container)
            if result.ok:
                successes, failures = successes + 1, 0
                if successes >= times.success_threshold:
                    self._set_ready(True)
            else:
                failures, successes = failures + 1, 0
                await self.on_event("Warning", "Unhealthy", f"Readiness probe failed: {result.message}")
                if failures >= times.failure_threshold:
                    self._set_ready(False)
            await asyncio.sleep(max(0.0, times.period - (time.monotonic() - started)))

    def _set_ready(self, ready: bool) -> None:
        if self.state.ready != ready and self.state.state == "running":
            self.state.ready = ready
            self._changed()


async def _cancel_until_done(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it, cancelling again should a library swallow a cancellation (a task that
    shrugs one off would otherwise hold its container's shutdown forever)."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.result()


def _seconds(delay: float) -> str:
    return f"{int(delay)}s" if delay == int(delay) else f"{delay:g}s"


class PodRuntime:
    """The runners of one Pod's init containers and containers."""

    def __init__(self, specs: list[tuple[ContainerSpec, RuntimeHandler | None]], *,
                 init_specs: Sequence[tuple[ContainerSpec, RuntimeHandler | None]] = (),
                 previous: dict[str, dict[str, Any]] | None = None, **runner_options: Any) -> None:
        """``previous``: container name -> its status in the API when the kubelet took the Pod up (a node that came
        back: restarts and the last state go on from there)."""
        waiting = "PodInitializing" if init_specs else "ContainerCreating"
        self.runners = [ContainerRunner(spec, handler, previous=(previous or {}).get(spec.name),
                                        waiting_reason=waiting, **runner_options) for spec, handler in specs]
        init_options = dict(runner_options)
        init_options["restart_policy"] = "Never" if runner_options.get("restart_policy") == "Never" else "OnFailure"
        self.init_runners = [ContainerRunner(spec, handler, **init_options) for spec, handler in init_specs]
        self._initializing: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the init containers in turn, then every container; returns once the first to run has made its
        first start attempt (every container's, without init containers)."""
        if not self.init_runners:
            self._start_containers()
            await asyncio.gather(*(runner.first_attempt.wait() for runner in self.runners))
            return
        self._initializing = asyncio.create_task(self._initialize(), name="init-containers")
        await self.init_runners[0].first_attempt.wait()

    def _start_containers(self) -> None:
        for runner in self.runners:
            runner.start()

    async def _initialize(self) -> None:
        for runner in self.init_runners:
            runner.start()
            if runner.handler is None:
                return  # waits in ImagePullBackOff: nothing after it runs
            await runner.finished.wait()
            if runner.state.exit_code != 0:
                return  # failed for good (restartPolicy Never): the Pod has failed
        self._start_containers()
        if self.runners:
            self.runners[0].on_change()

    @property
    def initialized(self) -> bool:
        return all(r.state.final and r.state.exit_code == 0 for r in self.init_runners)

    async def stop(self, grace_seconds: float) -> None:
        if self._initializing is not None:
            await _cancel_until_done(self._initializing)
        await asyncio.gather(*(runner.stop(grace_seconds) for runner in [*self.init_runners, *self.runners]))

    def states(self) -> list[ContainerState]:
        return [runner.state for runner in self.runners]

    def init_states(self) -> list[ContainerState]:
        return [runner.state for runner in self.init_runners]
