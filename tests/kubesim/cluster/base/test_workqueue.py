"""The reconcile queue: de-duplication, no concurrent runs per key, retries after failures."""

from __future__ import annotations

import asyncio

from kubesim.cluster.base.workqueue import Backoff, Reconciler, Retry


async def test_keys_added_while_running_are_processed_once_more_and_never_concurrently() -> None:
    runs: list[str] = []
    active: set[str] = set()
    overlap: list[str] = []
    gate = asyncio.Event()
    started = asyncio.Event()
    second_run = asyncio.Event()

    async def reconcile(key: str) -> None:
        if key in active:
            overlap.append(key)
        active.add(key)
        runs.append(key)
        if len(runs) == 1:
            started.set()
            await gate.wait()
        else:
            second_run.set()
        active.discard(key)

    queue: Reconciler[str] = Reconciler("t", reconcile, workers=3)
    queue.start()
    try:
        queue.add("a")
        await asyncio.wait_for(started.wait(), 5)
        for _ in range(5):
            queue.add("a")  # while "a" runs: remembered once
        gate.set()
        await asyncio.wait_for(second_run.wait(), 5)
        for _ in range(10):
            await asyncio.sleep(0)
        assert runs == ["a", "a"]
        assert overlap == []
    finally:
        await queue.stop()


async def test_failures_are_retried_and_do_not_block_other_keys() -> None:
    attempts: dict[str, int] = {}
    done = asyncio.Event()
    other = asyncio.Event()

    async def reconcile(key: str) -> None:
        attempts[key] = attempts.get(key, 0) + 1
        if key == "flaky":
            if attempts[key] == 1:
                raise RuntimeError("boom")
            if attempts[key] == 2:
                raise Retry("not yet")
            done.set()
        else:
            other.set()

    queue: Reconciler[str] = Reconciler("t", reconcile, workers=1, backoff=(0.001, 0.01))
    queue.start()
    try:
        queue.add("flaky")
        queue.add("steady")
        await asyncio.wait_for(asyncio.gather(done.wait(), other.wait()), 5)
        assert attempts == {"flaky": 3, "steady": 1}
    finally:
        await queue.stop()


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    backoff = Backoff(0.1, 0.5)
    assert [backoff.next("k") for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    backoff.forget("k")
    assert backoff.next("k") == 0.1
