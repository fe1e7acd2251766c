"""Work queue semantics: de-duplication, one worker per key, re-run after, delays and per-key backoff."""

from __future__ import annotations

import asyncio

import pytest

from operator_runtime.workqueue import ExponentialBackoff, QueueShutDown, WorkQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_duplicate_adds_are_held_once() -> None:
    queue = WorkQueue()
    for _ in range(5):
        queue.add("ns/a")
    queue.add("ns/b")
    assert len(queue) == 2
    assert await queue.get() == "ns/a"
    assert await queue.get() == "ns/b"
    assert len(queue) == 0


async def test_key_added_while_processing_is_not_handed_out_twice_but_rerun_after_done() -> None:
    queue = WorkQueue()
    queue.add("k")
    key = await queue.get()
    queue.add("k")
    queue.add("k")
    assert len(queue) == 0  # not ready while a worker holds it
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    assert not second.done()
    queue.done(key)
    assert await asyncio.wait_for(second, 1) == "k"
    queue.done("k")
    assert len(queue) == 0


async def test_done_without_readd_does_not_requeue() -> None:
    queue = WorkQueue()
    queue.add("k")
    queue.done(await queue.get())
    assert len(queue) == 0 and queue.processing == 0


async def test_add_after_waits_for_the_clock() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock=clock)
    queue.add_after("k", 30)
    queue.poll()
    assert len(queue) == 0 and queue.delayed == 1
    clock.now += 29.9
    queue.poll()
    assert len(queue) == 0
    clock.now += 0.2
    queue.poll()
    assert len(queue) == 1 and queue.delayed == 0


async def test_earlier_delay_wins_and_later_one_is_ignored() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock=clock)
    queue.add_after("k", 50)
    queue.add_after("k", 10)
    queue.add_after("k", 40)
    clock.now += 11
    queue.poll()
    assert await queue.get() == "k"
    queue.done("k")
    clock.now += 100
    queue.poll()
    assert len(queue) == 0  # the superseded timers did not fire again


async def test_get_wakes_up_for_a_real_short_delay() -> None:
    queue = WorkQueue()
    queue.add_after("k", 0.02)
    assert await asyncio.wait_for(queue.get(), 2) == "k"


def test_backoff_doubles_per_key_caps_and_resets() -> None:
    backoff = ExponentialBackoff(base=1, cap=10)
    assert [backoff.when("a") for _ in range(6)] == [1, 2, 4, 8, 10, 10]
    assert backoff.when("b") == 1  # keys are independent
    backoff.forget("a")
    assert backoff.when("a") == 1


async def test_rate_limited_requeue_grows_until_forget() -> None:
    clock = FakeClock()
    queue = WorkQueue(backoff=ExponentialBackoff(base=2, cap=100), clock=clock)
    assert queue.add_rate_limited("k") == 2
    assert queue.add_rate_limited("k") == 4
    queue.forget("k")
    assert queue.add_rate_limited("k") == 2


async def test_shutdown_releases_waiting_workers() -> None:
    queue = WorkQueue()
    waiter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.shutdown()
    with pytest.raises(QueueShutDown):
        await asyncio.wait_for(waiter, 1)
    queue.add("ignored")
    assert len(queue) == 0


def test_backoff_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        ExponentialBackoff(base=0)
    with pytest.raises(ValueError):
        ExponentialBackoff(base=5, cap=1)
