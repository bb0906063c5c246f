"""Batching of concurrent requests into one model call.

KServe's Python server calls a model once per request, and its batcher is a sidecar of
the in-cluster agent, absent from a local server. ONNX Runtime runs a batch of N rows in
far less than N single calls on a CPU, so requests arriving together are answered by one
call: the first request waits at most ``max_delay_s`` for companions with the same
call key (the same kind of call and generation parameters), up to ``max_batch_rows``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

Row = TypeVar("Row")
Result = TypeVar("Result")


@dataclass
class _Pending(Generic[Row, Result]):
    rows: list[Row]
    future: asyncio.Future[list[Result]]


@dataclass
class _Group(Generic[Row, Result]):
    pending: list[_Pending[Row, Result]] = field(default_factory=list)
    rows: int = 0


class MicroBatcher(Generic[Row, Result]):
    """Collects requests for ``run(key, rows)`` and answers each with its own results.

    Args:
        run: the blocking model call, ``(key, rows) -> one result per row``; it runs in
            the event loop's executor, one call at a time per batcher.
        max_batch_rows: most rows in one call.
        max_delay_s: longest a request waits for others before its call starts.
        on_batch: called with the number of requests each call answered (metrics).
    """

    def __init__(
        self,
        run: Callable[[Any, list[Row]], Sequence[Result]],
        max_batch_rows: int = 16,
        max_delay_s: float = 0.005,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self._run = run
        self._max_rows = max_batch_rows
        self._max_delay_s = max_delay_s
        self._on_batch = on_batch
        self._groups: dict[Hashable, _Group[Row, Result]] = {}
        self._lock = asyncio.Lock()
        # The event loop keeps only weak references to tasks: hold them until they end.
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, key: Hashable, rows: list[Row]) -> list[Result]:
        """The results of ``rows`` (in order), computed in a batch with other requests."""
        loop = asyncio.get_running_loop()
        pending: _Pending[Row, Result] = _Pending(rows, loop.create_future())
        group = self._groups.get(key)
        if group is None or group.rows + len(rows) > self._max_rows:
            group = _Group()
            self._groups[key] = group
            task = loop.create_task(self._dispatch(key, group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        group.pending.append(pending)
        group.rows += len(rows)
        return await pending.future

    async def _dispatch(self, key: Hashable, group: _Group[Row, Result]) -> None:
        await asyncio.sleep(self._max_delay_s)
        if self._groups.get(key) is group:
            del self._groups[key]
        rows = [row for pending in group.pending for row in pending.rows]
        async with self._lock:  # one model call at a time: ORT already uses every core
            try:
                results = await asyncio.get_running_loop().run_in_executor(
                    None, self._run, key, rows
                )
            except Exception as err:  # handed to every waiting request, never lost
                for pending in group.pending:
                    if not pending.future.done():
                        pending.future.set_exception(err)
                return
        if self._on_batch is not None:
            self._on_batch(len(group.pending))
        start = 0
        for pending in group.pending:
            end = start + len(pending.rows)
            if not pending.future.done():  # a timed-out request's future is cancelled
                pending.future.set_result(list(results[start:end]))
            start = end
