"""The micro-batcher (`workloads.serving.batching`) without a server: a lone request is
run at once, without waiting for company; requests that queue while the model is busy
are answered by its next call, by key and up to the row limit; a failure reaches every
request of its call.

The "at once" check runs in an event loop whose clock never moves, so anything waiting
on a timer (``asyncio.sleep(0.005)`` for a batching window) never ends there, however
slow the machine: the test depends on no timing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from workloads.serving.batching import MicroBatcher


class FrozenClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose timers never come due."""

    def time(self) -> float:
        return 0.0


def run_frozen(coroutine: Coroutine[Any, Any, Any], wall_s: float = 10.0) -> Any:
    """Run ``coroutine`` in a `FrozenClockLoop`; fail if it has not finished after
    ``wall_s`` seconds of real time (it waits on a timer)."""
    loop = FrozenClockLoop()
    try:
        task = loop.create_task(coroutine)
        deadline = time.monotonic() + wall_s
        while not task.done():
            if time.monotonic() > deadline:
                task.cancel()
                pytest.fail("the request waited on a timer: it was not dispatched at once")
            loop.run_until_complete(asyncio.sleep(0))  # one pass: ready callbacks only
            time.sleep(0.001)  # the executor's thread answers meanwhile
        return task.result()
    finally:
        loop.close()


def test_a_lone_request_is_dispatched_without_waiting() -> None:
    calls: list[tuple[Any, list[int]]] = []

    def run(key: Any, rows: list[int]) -> list[int]:
        calls.append((key, rows))
        return [row * 10 for row in rows]

    batcher: MicroBatcher[int, int] = MicroBatcher(run)
    assert run_frozen(batcher.submit("k", [1, 2])) == [10, 20]
    assert calls == [("k", [1, 2])]


def test_requests_queued_while_the_model_is_busy_share_its_next_call() -> None:
    calls: list[tuple[str, list[int]]] = []
    started, release = threading.Event(), threading.Event()
    sizes: list[int] = []

    def run(key: str, rows: list[int]) -> list[int]:
        calls.append((key, list(rows)))
        started.set()
        assert release.wait(30)
        return [row + 100 for row in rows]

    async def scenario() -> list[list[int]]:
        batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch_rows=3, on_batch=sizes.append)
        first = asyncio.ensure_future(batcher.submit("a", [1]))
        while not started.is_set():  # the first call is running, alone
            await asyncio.sleep(0)
        queued = [
            asyncio.ensure_future(batcher.submit(key, rows))
            for key, rows in (("a", [2]), ("b", [3]), ("a", [4, 5]), ("a", [6]))
        ]
        await asyncio.sleep(0)
        release.set()
        return list(await asyncio.gather(first, *queued))

    answers = asyncio.run(scenario())
    assert answers == [[101], [102], [103], [104, 105], [106]]
    # The lone first request ran alone; then the oldest queued request's key ("a") took
    # the queued "a" requests that fit in 3 rows; "b" and the "a" left over went next.
    assert calls == [("a", [1]), ("a", [2, 4, 5]), ("b", [3]), ("a", [6])]
    assert sizes == [1, 2, 1, 1]


def test_a_failed_call_fails_each_of_its_requests_and_the_next_call_runs() -> None:
    failing = {"yes"}

    def run(key: str, rows: list[int]) -> list[int]:
        if key in failing:
            raise RuntimeError("model failed")
        return rows

    async def scenario() -> tuple[list[Any], list[int]]:
        batcher: MicroBatcher[int, int] = MicroBatcher(run)
        results = await asyncio.gather(
            batcher.submit("yes", [1]), batcher.submit("yes", [2]), return_exceptions=True
        )
        return list(results), await batcher.submit("no", [3])

    failed, after = asyncio.run(scenario())
    assert [str(f) for f in failed] == ["model failed", "model failed"]
    assert after == [3]
