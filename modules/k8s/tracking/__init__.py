"""Experiment tracking: `spec` (`TrackingSpec` and its inputs), `manifests` (the MLflow
chart values, database, fences and monitors) and `component` (`Tracking`)."""
