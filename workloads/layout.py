"""Where a registered model version's files are, for the registry and for serving.

`make register` logs each ONNX model as an MLflow model. MLflow 3 keeps a logged
model's files under ``<experiment artifact root>/models/<model id>/artifacts/``; the
cluster's tracking server proxies artifacts into ``s3://<data bucket>/mlflow/`` (on AWS),
so the same files are at the key prefix ``mlflow/<experiment id>/models/<model id>/
artifacts/`` of the stack's data bucket, which is what an InferenceService's
``storagePath`` names. This module is that mapping, shared by the register command (which
prints and tags the paths) and the InferenceService spec (which checks them), so the two
cannot drift apart, and by the export (which writes the Triton repository). Pure
standard library: the Pulumi program imports it. It sits at the root of `workloads`
because three stages share it (ARCHITECTURE.md).
"""

from __future__ import annotations

import re

#: The data bucket's key prefix under which the tracking server keeps artifacts.
ARTIFACT_PREFIX = "mlflow/"
#: The Triton model repository inside an export and inside a registered model's
#: artifacts: ``triton/<model>/config.pbtxt`` and ``triton/<model>/<n>/model.onnx``.
TRITON_DIR = "triton"

_ID = r"[A-Za-z0-9][A-Za-z0-9._-]*"
#: A registered model's name, which its Triton models take (``<name>``, ``<name>-int8``):
#: a directory name, a V2 URL path segment and a quoted pbtxt string at once. Checked by
#: the export and the registry commands, and by `make pipeline` before any step runs.
MODEL_NAME = re.compile(rf"^{_ID}$")
#: A registered version's Triton repository in the data bucket (what Triton serves).
TRITON_STORAGE_PATH = re.compile(
    rf"^{re.escape(ARTIFACT_PREFIX)}(?P<experiment>{_ID})/models/(?P<model>{_ID})"
    rf"/artifacts/{TRITON_DIR}/?$"
)
#: A logged model's artifact directory in the data bucket (what the CPU predictor serves).
MODEL_STORAGE_PATH = re.compile(
    rf"^{re.escape(ARTIFACT_PREFIX)}(?P<experiment>{_ID})/models/(?P<model>{_ID})/artifacts/?$"
)


def model_storage_path(experiment_id: str, model_id: str) -> str:
    """A logged model's artifact directory, relative to the data bucket."""
    return f"{ARTIFACT_PREFIX}{experiment_id}/models/{model_id}/artifacts"


def triton_storage_path(experiment_id: str, model_id: str) -> str:
    """The Triton repository `make register` logs with a model, relative to the bucket."""
    return f"{model_storage_path(experiment_id, model_id)}/{TRITON_DIR}"
