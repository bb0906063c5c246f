"""What MLflow tracking costs the training loop, for ``make bench``.

The figure is the wall time a `MlflowTracker.log_step` call takes on the training
thread while the tracker's background thread is really working (writing every record
to a run in a fresh SQLite store, so its share of the GIL is included),
set against a measured step time. Training calls it once per ``log_every`` steps;
the bench reports the worst case, a call on every step.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from workloads.training.metrics import WindowStats
from workloads.training.tracking import MlflowTracker

#: The issue's budget: logging must cost under 1% of step time.
BUDGET_RATIO = 0.01


def log_step_cost_s(calls: int = 2000) -> float:
    """Mean seconds one ``log_step`` takes on the calling thread."""
    stats = WindowStats(1, 0.1, 1000.0, 1.0, None, 0.0)
    with tempfile.TemporaryDirectory(prefix="tracking-overhead-") as tmp:
        tracker = MlflowTracker(
            f"sqlite:///{Path(tmp) / 'mlflow.db'}",
            experiment="bench-overhead",
            run_name="overhead",
            params={"bench": "overhead"},
            tags={},
        )
        # Steady state: time the calls once the run exists (its creation is a one-off).
        deadline = time.monotonic() + 180
        while not tracker.run_id and time.monotonic() < deadline:
            time.sleep(0.1)
        start = time.perf_counter()
        for step in range(calls):
            tracker.log_step(step, 1.0, stats)
        cost = (time.perf_counter() - start) / calls
        tracker.finish()
    return cost


def overhead_lines(step_time_s: float) -> list[str]:
    """The bench's report lines for a step of ``step_time_s``."""
    cost = log_step_cost_s()
    ratio = cost / step_time_s
    verdict = "within" if ratio < BUDGET_RATIO else "OVER"
    return [
        f"- tracking (MLflow, background thread): `log_step` costs {cost * 1e6:.1f} us on the "
        f"training thread = {100 * ratio:.3f}% of the fastest step ({step_time_s * 1000:.1f} ms) "
        f"when logged every step; {verdict} the 1% budget",
    ]
