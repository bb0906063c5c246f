"""Tracking and registration of the churn model in MLflow.

One run per training: the LightGBM parameters, the data's seed and size, the Feast
project, feature service and feature references as parameters; validation AUC, log
loss and the ONNX parity figures as metrics; the git revision as MLflow's source tag;
the native LightGBM model as an artifact. The ONNX model is logged as an MLflow model
(ONNX flavor) with its signature, an input example and the model card as its
metadata, and registered as a new version of ``smb-churn`` with the parity figures as
version tags, as the GPT's versions carry theirs (``make register``).

Locally the tracking URI defaults to a SQLite store under the working directory; any
MLflow URI works (``TRACKING_URI=http://127.0.0.1:5000`` with ``make track``).
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workloads.features.errors import TrackingError
from workloads.features.model import (
    NATIVE_FILE,
    ONNX_FILE,
    ONNX_INPUT,
    ONNX_PROBABILITIES,
    Matrix,
)

MODEL_NAME = "smb-churn"
EXPERIMENT = "smb-churn"
#: Same client settings as training's tracker: find out quickly that a server is down.
_CLIENT_ENV_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


@dataclass(frozen=True)
class Registered:
    """A registered model version."""

    run_id: str
    name: str
    version: str
    model_uri: str


def local_tracking_uri(workdir: Path) -> str:
    """The default: a SQLite store under ``workdir``."""
    return f"sqlite:///{(workdir / 'mlflow' / 'mlflow.db').resolve()}"


def register(
    *,
    tracking_uri: str,
    workdir: Path,
    export_dir: Path,
    card: dict[str, Any],
    example: Matrix,
    params: dict[str, Any],
) -> Registered:
    """Track one training run and register its ONNX model; returns the version."""
    for key, value in _CLIENT_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    import mlflow  # noqa: PLC0415 - slow import
    import onnx  # noqa: PLC0415
    import onnxruntime  # noqa: PLC0415
    from mlflow.exceptions import MlflowException  # noqa: PLC0415
    from mlflow.models import ModelSignature  # noqa: PLC0415
    from mlflow.types import Schema, TensorSpec  # noqa: PLC0415

    mlflow.set_tracking_uri(tracking_uri)
    try:
        experiment = mlflow.get_experiment_by_name(EXPERIMENT)
        if experiment is None:
            location = None
            if tracking_uri.startswith("sqlite:"):
                # A local store keeps its artifacts beside it, not in ./mlruns of the cwd.
                location = (workdir / "mlflow" / "artifacts").resolve().as_uri()
            experiment_id = mlflow.create_experiment(EXPERIMENT, artifact_location=location)
        else:
            experiment_id = experiment.experiment_id
    except MlflowException as err:
        raise TrackingError(f"{tracking_uri} refused the request: {str(err)[:300]}") from err
    except Exception as err:  # connection refused, timeouts: requests' own types
        raise TrackingError(
            f"cannot reach the tracking server at {tracking_uri}; start it with `make track` "
            "or leave TRACKING_URI unset for the local store under the working directory"
        ) from err

    features = card["features"]
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.float32), (-1, len(features)), ONNX_INPUT)]),
        outputs=Schema(
            [
                TensorSpec(np.dtype(np.int64), (-1,), "label"),
                TensorSpec(np.dtype(np.float32), (-1, 2), ONNX_PROBABILITIES),
            ]
        ),
    )
    flat = {f"lgbm.{k}": str(v) for k, v in card["params"].items()} | {
        f"data.{k}": str(v) for k, v in params.items()
    }
    with (
        contextlib.redirect_stderr(io.StringIO()),
        mlflow.start_run(experiment_id=experiment_id, run_name="smb-churn-lightgbm") as run,
    ):
        mlflow.set_tags(
            {
                "mlflow.source.git.commit": card["git_revision"],
                "feast.project": card["feast_project"],
                "feast.feature_service": card["feature_service"],
            }
        )
        mlflow.log_params(flat | {"feast.feature_refs": ",".join(card["feature_refs"])})
        mlflow.log_metrics(card["metrics"])
        mlflow.log_metrics({f"parity.{k}": v for k, v in card["parity"].items()})
        mlflow.log_artifact(str(export_dir / NATIVE_FILE), artifact_path="native")
        info = mlflow.onnx.log_model(
            onnx.load(str(export_dir / ONNX_FILE)),
            name="model",
            signature=signature,
            input_example={ONNX_INPUT: example},
            metadata=card,
            save_as_external_data=False,
            onnx_execution_providers=[
                "CPUExecutionProvider"
            ],  # one small file: what the predictor loads
            # Stated, not inferred: inference would import and probe the environment.
            pip_requirements=[
                f"onnx=={onnx.__version__}",
                f"onnxruntime=={onnxruntime.__version__}",
            ],
            registered_model_name=MODEL_NAME,
        )
    version = str(info.registered_model_version)
    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    for key, value in card["parity"].items():
        client.set_model_version_tag(MODEL_NAME, version, f"parity.{key}", f"{value:.3g}")
    client.set_model_version_tag(
        MODEL_NAME, version, "feast.feature_service", card["feature_service"]
    )
    client.set_model_version_tag(
        MODEL_NAME, version, "valid_auc", f"{card['metrics']['valid_auc']:.4f}"
    )
    return Registered(
        run_id=run.info.run_id,
        name=MODEL_NAME,
        version=version,
        model_uri=f"models:/{MODEL_NAME}/{version}",
    )


def download(tracking_uri: str, model_uri: str, destination: Path) -> Path:
    """Download a registered version's artifacts (what KServe's storage initializer
    puts in ``/mnt/models``) into ``destination``; returns the model directory."""
    import mlflow  # noqa: PLC0415

    mlflow.set_tracking_uri(tracking_uri)
    destination.mkdir(parents=True, exist_ok=True)
    path = mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=str(destination))
    return Path(path)
