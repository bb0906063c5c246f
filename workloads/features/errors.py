"""The feature workload's user-facing errors (kept free of heavy imports, so that the
command line can report them without loading pandas, Feast or MLflow)."""

from __future__ import annotations


class ModelError(RuntimeError):
    """Training, export or a model directory cannot be used; the message says why."""


class TrackingError(RuntimeError):
    """The tracking server cannot be used; the message says what to do."""
