"""Batching of concurrent requests into one model call, without waiting for company.

KServe's Python server calls a model once per request, and its batcher is a sidecar of
the in-cluster agent, absent from a local server. ONNX Runtime runs a batch of N rows in
far less than N single calls on a CPU, so requests that arrive while the model is busy
are answered together by its next call. A request that finds the model idle is run at
once, alone: there is no window to wait out, so one client sees no added latency, and
batches form only from requests already queued.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

Row = TypeVar("Row")
Result = TypeVar("Result")


@dataclass
class _Pending(Generic[Row, Result]):
    key: Hashable
    rows: list[Row]
    future: asyncio.Future[list[Result]]


class MicroBatcher(Generic[Row, Result]):
    """Queues requests for ``run(key, rows)`` and answers each with its own results.

    Args:
        run: the blocking model call, ``(key, rows) -> one result per row``; it runs in
            the event loop's executor, one call at a time per batcher (ONNX Runtime
            already uses every core), so the loop keeps reading requests meanwhile.
        max_batch_rows: most rows in one call (a larger request is still one call).
        on_batch: called with the number of requests each call answered (metrics).
    """

    def __init__(
        self,
        run: Callable[[Any, list[Row]], Sequence[Result]],
        max_batch_rows: int = 16,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self._run = run
        self._max_rows = max_batch_rows
        self._on_batch = on_batch
        self._queue: deque[_Pending[Row, Result]] = deque()
        # The event loop keeps only a weak reference to a task: hold the running one.
        self._worker: asyncio.Task[None] | None = None

    async def submit(self, key: Hashable, rows: list[Row]) -> list[Result]:
        """The results of ``rows`` (in order), computed alone when the model is idle,
        else in one call with the requests of the same ``key`` queued meanwhile."""
        loop = asyncio.get_running_loop()
        pending: _Pending[Row, Result] = _Pending(key, rows, loop.create_future())
        self._queue.append(pending)
        if self._worker is None:
            self._worker = loop.create_task(self._work())
        return await pending.future

    def _next_batch(self) -> list[_Pending[Row, Result]]:
        """The oldest queued request and the queued ones with its key that fit with it;
        the others keep their places."""
        first = self._queue.popleft()
        batch, rows, others = [first], len(first.rows), deque[_Pending[Row, Result]]()
        while self._queue:
            pending = self._queue.popleft()
            if pending.key == first.key and rows + len(pending.rows) <= self._max_rows:
                batch.append(pending)
                rows += len(pending.rows)
            else:
                others.append(pending)
        self._queue = others
        return batch

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                batch = [p for p in self._next_batch() if not p.future.done()]  # timed out
                if not batch:
                    continue
                rows = [row for pending in batch for row in pending.rows]
                try:
                    results = await loop.run_in_executor(None, self._run, batch[0].key, rows)
                except Exception as err:  # handed to every waiting request, never lost
                    for pending in batch:
                        if not pending.future.done():
                            pending.future.set_exception(err)
                    continue
                if self._on_batch is not None:
                    self._on_batch(len(batch))
                start = 0
                for pending in batch:
                    end = start + len(pending.rows)
                    if not pending.future.done():
                        pending.future.set_result(list(results[start:end]))
                    start = end
        finally:
            self._worker = None
