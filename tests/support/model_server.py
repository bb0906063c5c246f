"""A model server started as a subprocess for a test module: started from the repository
root with its output in a log file, waited for until it says it is ready, failed with
the log's tail when it exits or is not ready in time, and stopped at the end (SIGTERM,
then SIGKILL). Standard library only: every environment's tests use it."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ready(probe: Callable[[], bool]) -> bool:
    try:
        return probe()
    except Exception:  # not listening yet: connection refused, a reset, a 503
        return False


@contextlib.contextmanager
def model_server(
    command: Sequence[str],
    ready: Callable[[], bool],
    log: Path,
    *,
    deadline_s: float = 300,
    poll_s: float = 0.5,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` until the block ends; yield once ``ready()`` is true.

    Args:
        command: the server's command line (run in the repository root).
        ready: true when the server answers (its exceptions count as not yet).
        log: where the server's stdout and stderr go (its tail is in a failure).
        deadline_s: how long the server may take to be ready.
        poll_s: the pause between two ``ready()`` calls.
    """
    with log.open("wb") as sink:
        process = subprocess.Popen(list(command), cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + deadline_s
        while not _ready(ready):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the model server did not start: {log.read_text()[-3000:]}")
            time.sleep(poll_s)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
