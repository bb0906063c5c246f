"""Experiment tracking of training runs with MLflow, the local tracking server, and the
model registry commands (register, promote, rollback).

`start_tracking` is the one call the training loop makes: on rank 0, with a tracking
URI configured (``--tracking-uri`` or ``MLFLOW_TRACKING_URI``), it returns an
`MlflowTracker` whose MLflow calls all happen on a background thread; everywhere else a
`NullTracker`. Either way training never waits for, or fails because of, the server.

The names below are imported on first use: the Pulumi program imports
`workloads.tracking.layout` (where a version's files are), which must not pull in the
tracker's dependencies (the plan set has no prometheus_client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workloads.tracking.tracker import (
        MlflowTracker,
        NullTracker,
        Tracker,
        resolve_tracking_uri,
        start_tracking,
    )

__all__ = ["MlflowTracker", "NullTracker", "Tracker", "resolve_tracking_uri", "start_tracking"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from workloads.tracking import tracker  # noqa: PLC0415

        return getattr(tracker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
