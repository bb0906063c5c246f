"""The trainer's image logs to MLflow with mlflow-skinny, the client alone (the training
environment): a tiny run tracked against a real MLflow server, the full package from the
lifecycle environment as `make track` runs it, and read back through the client."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support.environments import python
from tests.workloads.lifecycle_helpers import mlflow_server, tiny_config, train_tiny
from workloads.training.lineage import read_run_record


@pytest.mark.slow
def test_the_training_image_client_tracks_a_run(tmp_path: Path) -> None:
    server = python("lifecycle").with_name("mlflow")
    with mlflow_server(tmp_path / "mlflow", mlflow=server) as uri:
        train_tiny(tiny_config(tmp_path, steps="10", log_every="5", tracking_uri=uri))
        record = read_run_record(tmp_path / "ckpt")
        assert record is not None and record.tracking_run_id
        client = MlflowClient(tracking_uri=uri)
        run = client.get_run(record.tracking_run_id)
        assert run.info.status == "FINISHED"
        assert run.data.params["model.n_layer"] == "2"
        assert run.data.tags["checkpoint"].endswith("step_00000010")
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "tokens_per_s")]
        assert steps == [1, 5, 10]


def test_the_trainer_takes_the_uri_a_cluster_job_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster job's trainer is given MLFLOW_TRACKING_URI (modules/k8s/trainer/pods.py
    tracking_wiring, tests/workloads/test_job_tracking.py); with no URI in its config,
    the trainer's client takes it."""
    from workloads.training.config import preset  # noqa: PLC0415
    from workloads.training.tracking import resolve_tracking_uri  # noqa: PLC0415

    uri = "https://mlflow.mlflow.svc.cluster.local"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert resolve_tracking_uri(preset("tiny")) == uri
