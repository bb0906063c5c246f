"""What MLflow tracking costs the training loop, for ``make bench``.

The figure is the wall time a `MlflowTracker.log_step` call takes on the training
thread while the tracker's background thread is really working (writing every record
to a run in a fresh local store, so its share of the GIL is included),
set against a measured step time. Training calls it once per ``log_every`` steps;
the bench reports the worst case, a call on every step.

The store is MLflow's file store: the training image carries `mlflow-skinny` (the
client), which has no SQLAlchemy and so cannot open a ``sqlite:`` store, and starting a
tracking server is another image's job. MLflow 3 keeps the file store in maintenance
mode behind ``MLFLOW_ALLOW_FILE_STORE``, set here for this run only. When the run cannot
be created at all, the bench says why in one line instead of a figure.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from unittest import mock

from workloads.training.metrics import WindowStats
from workloads.training.tracking import MlflowTracker

#: The issue's budget: logging must cost under 1% of step time.
BUDGET_RATIO = 0.01


class TrackingUnavailableError(Exception):
    """The tracker could not create its run: nothing to measure (the message says why)."""


def log_step_cost_s(calls: int = 2000) -> float:
    """Mean seconds one ``log_step`` takes on the calling thread.

    Raises:
        TrackingUnavailableError: the run could not be created in the local store.
    """
    stats = WindowStats(1, 0.1, 1000.0, 1.0, None, 0.0)
    with (
        tempfile.TemporaryDirectory(prefix="tracking-overhead-") as tmp,
        mock.patch.dict(os.environ, {"MLFLOW_ALLOW_FILE_STORE": "true"}),
    ):
        tracker = MlflowTracker(
            Path(tmp).as_uri(),
            experiment="bench-overhead",
            run_name="overhead",
            params={"bench": "overhead"},
            tags={},
        )
        # Steady state: time the calls once the run exists (its creation is a one-off).
        tracker.started.wait()
        if tracker.start_error:
            tracker.finish()
            raise TrackingUnavailableError(tracker.start_error)
        start = time.perf_counter()
        for step in range(calls):
            tracker.log_step(step, 1.0, stats)
        cost = (time.perf_counter() - start) / calls
        tracker.finish()
    return cost


def overhead_lines(step_time_s: float) -> list[str]:
    """The bench's report lines for a step of ``step_time_s``."""
    try:
        cost = log_step_cost_s()
    except TrackingUnavailableError as err:
        return [f"- tracking (MLflow): not measured, a run could not be created ({err})"]
    ratio = cost / step_time_s
    verdict = "within" if ratio < BUDGET_RATIO else "OVER"
    return [
        f"- tracking (MLflow, background thread): `log_step` costs {cost * 1e6:.1f} us on the "
        f"training thread = {100 * ratio:.3f}% of the fastest step ({step_time_s * 1000:.1f} ms) "
        f"when logged every step; {verdict} the 1% budget",
    ]
