"""Leader election on a ``coordination.k8s.io/v1`` Lease, so that several controller replicas are safe.

Protocol (the one client-go's leaderelection follows): a candidate reads the Lease; it may take it when it is absent,
released (empty holder) or expired (``renewTime + leaseDurationSeconds`` in the past by our own clock); every write
is a PUT carrying the observed ``resourceVersion`` (optimistic concurrency), so of two candidates only one wins.
The leader renews every ``retry_period``; if it cannot renew for ``renew_deadline`` it stops leading (cancels the
leading work, so nothing more is written) before the lease can expire for others. On a clean stop it releases the
Lease so that a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .api import KubeApi
from .errors import Conflict, NotFound
from .kinds import LEASE
from .objects import JsonDict, mapping

log = logging.getLogger(__name__)


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class LeaderElector:
    def __init__(self, api: KubeApi, *, name: str, namespace: str, identity: str, lease_duration: float = 15.0,
                 renew_deadline: float = 10.0, retry_period: float = 2.0) -> None:
        if not (retry_period < renew_deadline < lease_duration):
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")
        self.api = api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.is_leader = False
        # The expiry of a lease held by someone else is judged by when *we* saw its renewTime change, so clock skew
        # between replicas cannot make us steal a live lease.
        self._observed: tuple[str, float] | None = None

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Campaign forever; while leading, run ``lead()`` and cancel it when leadership is lost."""
        try:
            while True:
                await self._acquire()
                if await self._lead(lead):
                    return
        finally:
            await self.release()  # no-op unless we hold it (also after _lead already stopped leading)

    async def _acquire(self) -> None:
        while True:
            try:
                acquired = await self.try_acquire_or_renew()
            except Exception as exc:  # API unreachable or refusing: keep campaigning
                log.warning("leader election: could not read or write the lease: %s", exc)
                acquired = False
            if acquired:
                log.info("leader election: %s became leader of %s/%s", self.identity, self.namespace, self.name)
                return
            await asyncio.sleep(self.retry_period)

    async def _lead(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Lead until the work ends (True) or the lease is lost (False)."""
        task = asyncio.create_task(lead(), name="leader-work")
        renewer = asyncio.create_task(self._renew_loop(), name="leader-renew")
        try:
            done, _ = await asyncio.wait({task, renewer}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                task.result()  # propagate the work's failure to the caller
                return True
            log.error("leader election: %s lost the lease %s/%s; stopping work", self.identity, self.namespace,
                      self.name)
            return False
        finally:
            for t in (task, renewer):
                t.cancel()
            await asyncio.gather(task, renewer, return_exceptions=True)
            self.is_leader = False

    async def _renew_loop(self) -> None:
        last_renew = time.monotonic()
        while True:
            await asyncio.sleep(self.retry_period)
            # A renewal that hangs must not carry us past the deadline: others may take the lease after it.
            remaining = max(0.0, last_renew + self.renew_deadline - time.monotonic())
            try:
                ok = await asyncio.wait_for(self.try_acquire_or_renew(), remaining)
            except (TimeoutError, Exception) as exc:  # any failure counts against the deadline
                log.warning("leader election: renew failed: %s", exc)
                ok = False
            now = time.monotonic()
            if ok:
                last_renew = now
            elif not self.is_leader or now - last_renew >= self.renew_deadline:
                self.is_leader = False
                return

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the lease afterwards."""
        now = _now_micro()
        try:
            lease = await self.api.get(LEASE, self.name, self.namespace)
        except NotFound:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now, acquire_time=now, transitions=0)}
            try:
                await self.api.create(LEASE, body, self.namespace)
            except Conflict:  # another candidate created it first
                return False
            self.is_leader = True
            return True
        spec = mapping(lease, "spec")
        holder = spec.get("holderIdentity") or ""
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != self.identity:
            if holder and not self._expired(spec):
                self.is_leader = False
                return False
            new_spec = self._spec(now, acquire_time=now, transitions=transitions + 1)
        else:
            new_spec = self._spec(now, acquire_time=spec.get("acquireTime") or now, transitions=transitions)
        updated = {**lease, "spec": new_spec}
        try:
            await self.api.replace(LEASE, updated, name=self.name, namespace=self.namespace)
        except Conflict:  # someone else wrote first
            self.is_leader = False
            return False
        self.is_leader = True
        return True

    def _expired(self, spec: Mapping[str, Any]) -> bool:
        renew = str(spec.get("renewTime") or "")
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        now = time.monotonic()
        if self._observed is None or self._observed[0] != renew:
            self._observed = (renew, now)
            # First sight of this renewTime: only a lease that already looks long dead by the wall clock counts.
            renewed_at = _parse_time(renew)
            return renewed_at is None or time.time() - renewed_at > duration * 2
        return now - self._observed[1] > duration

    def _spec(self, now: str, *, acquire_time: str, transitions: int) -> JsonDict:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, round(self.lease_duration)),
                "acquireTime": acquire_time, "renewTime": now, "leaseTransitions": transitions}

    async def release(self) -> None:
        """Give the lease up (empty holder) so that a standby replica can take over immediately."""
        try:
            lease = await self.api.get(LEASE, self.name, self.namespace)
            spec = mapping(lease, "spec")
            if spec.get("holderIdentity") != self.identity:
                return
            released = {**lease, "spec": {**spec, "holderIdentity": "", "leaseDurationSeconds": 1,
                                          "renewTime": _now_micro()}}
            await self.api.replace(LEASE, released, name=self.name, namespace=self.namespace)
            log.info("leader election: %s released %s/%s", self.identity, self.namespace, self.name)
        except Exception as exc:
            log.warning("leader election: release failed: %s", exc)
        finally:
            self.is_leader = False


@dataclass(frozen=True)
class LeaseOptions:
    """Where the Lease is and how it is held (client-go's defaults)."""

    name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeadingWork:
    """A controller's work, run behind leader election when ``lease`` is given (else directly), until stopped.

    ``on_leading(True/False)`` is told when the work starts and ends (a leader gauge); :attr:`standing_by` is true
    while another replica holds the lease (a standby is healthy and ready).
    """

    def __init__(self, api: KubeApi, work: Callable[[], Coroutine[Any, Any, None]], lease: LeaseOptions | None,
                 on_leading: Callable[[bool], None] | None = None) -> None:
        self.work = work
        self.on_leading = on_leading
        self.elector = None if lease is None else LeaderElector(
            api, name=lease.name, namespace=lease.namespace, identity=lease.identity,
            lease_duration=lease.lease_duration, renew_deadline=lease.renew_deadline, retry_period=lease.retry_period)

    @property
    def standing_by(self) -> bool:
        return self.elector is not None and not self.elector.is_leader

    async def _lead(self) -> None:
        if self.on_leading is not None:
            self.on_leading(True)
        try:
            await self.work()
        finally:
            if self.on_leading is not None:
                self.on_leading(False)

    def start(self) -> asyncio.Task[None]:
        """The task running the work (through the elector when there is one)."""
        if self.elector is not None:
            return asyncio.create_task(self.elector.run(self._lead), name="leader")
        return asyncio.create_task(self._lead(), name="controller")

    async def run_until(self, stop: asyncio.Event, task: asyncio.Task[None] | None = None) -> int:
        """Wait for ``stop`` (0) or for the work to end by itself (its failure raised; 1 if it just returned).
        The work is cancelled (a leader releases its Lease) either way."""
        task = task or self.start()
        stopper = asyncio.create_task(stop.wait(), name="stop")
        try:
            done, _ = await asyncio.wait({stopper, task}, return_when=asyncio.FIRST_COMPLETED)
            if task in done and not stopper.done():
                task.result()
                log.error("controller stopped unexpectedly")
                return 1
            log.info("shutting down")
            return 0
        finally:
            for pending in (stopper, task):
                pending.cancel()
            await asyncio.gather(stopper, task, return_exceptions=True)
