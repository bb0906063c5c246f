"""Experiment tracking of training runs with MLflow, and the local tracking server.

`start_tracking` is the one call the training loop makes: on rank 0, with a tracking
URI configured (``--tracking-uri`` or ``MLFLOW_TRACKING_URI``), it returns an
`MlflowTracker` whose MLflow calls all happen on a background thread; everywhere else a
`NullTracker`. Either way training never waits for, or fails because of, the server.
"""

from workloads.tracking.tracker import (
    MlflowTracker,
    NullTracker,
    Tracker,
    resolve_tracking_uri,
    start_tracking,
)

__all__ = ["MlflowTracker", "NullTracker", "Tracker", "resolve_tracking_uri", "start_tracking"]
