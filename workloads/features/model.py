"""Training the churn model on CPUs, its ONNX export and the parity check.

- `training_set`: Feast's point-in-time-correct historical retrieval for the label
  events, as a float32 matrix in `MODEL_FEATURES` order;
- `train`: LightGBM on the earlier 80% of label events (by time), evaluated on the later
  20% (a time split: the model is judged on a future it has not seen);
- `export_onnx`: onnxmltools' LightGBM converter, then the parity check: ONNX Runtime's
  churn probabilities against LightGBM's on the held-out rows.

Why the parity bound is what it is: both sides read the same float32 inputs, and
onnxmltools writes LightGBM's split thresholds as float32, so the trees take the same
branches; what differs is arithmetic. LightGBM sums the trees' leaf values in float64,
ONNX Runtime's TreeEnsemble in float32. Summing ``T`` leaves in float32 is off by at
most ``T * u * sum_t max|leaf_t|`` (``u = 2**-24``, the unit round-off, per addition on a
running sum no larger than the sum of magnitudes); the sigmoid's slope is at most 1/4;
and the probability itself is rounded to float32 (a few ``u``). `parity_bound` is that
worst case for the trained model. A difference above it means a different branch was
taken or a tree was dropped, i.e. a broken conversion, and fails the export.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from workloads.features.errors import ModelError
from workloads.features.repo import LABEL, MODEL_FEATURES, feature_refs

__all__ = ["ModelError"]

#: ONNX graph input and the probability output's name.
ONNX_INPUT = "features"
ONNX_PROBABILITIES = "probabilities"
ONNX_OPSET = 15  # the highest opset onnxmltools 1.16 converts LightGBM to
#: The unit round-off of float32.
FLOAT32_U = 2.0**-24

Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True)
class TrainingSet:
    """Rows of the historical retrieval, split by time.

    Attributes:
        frame: the retrieval (entity, timestamp, label, features), sorted by time.
        requested: label events asked for.
        x_train, y_train, x_valid, y_valid: float32 features and 0/1 labels.
        cutoff: the first timestamp of the validation rows.
    """

    frame: pd.DataFrame
    requested: int
    x_train: Matrix
    y_train: npt.NDArray[np.int64]
    x_valid: Matrix
    y_valid: npt.NDArray[np.int64]
    cutoff: pd.Timestamp


def as_matrix(frame: pd.DataFrame) -> Matrix:
    """The model's input matrix of a frame with `MODEL_FEATURES` columns."""
    matrix: Matrix = frame[list(MODEL_FEATURES)].to_numpy(dtype=np.float64).astype(np.float32)
    return matrix


def training_set(store: Any, labels: pd.DataFrame, valid_share: float = 0.2) -> TrainingSet:
    """Retrieve `MODEL_FEATURES` for every label event as of its timestamp.

    Rows with a missing feature (a label event before the customer's first activity
    snapshot, or after its snapshots went stale) are left out of training.
    """
    frame = store.get_historical_features(entity_df=labels, features=feature_refs()).to_df()
    frame = frame.dropna(subset=list(MODEL_FEATURES))
    frame = frame.sort_values("event_timestamp", ignore_index=True)
    if len(frame) < 100:
        raise ModelError(
            f"only {len(frame)} label events have all features; generate more data "
            "(--customers) or check that the feature views were applied"
        )
    split = int(len(frame) * (1 - valid_share))
    cutoff = frame["event_timestamp"].iloc[split]
    train, valid = (
        frame[frame["event_timestamp"] < cutoff],
        frame[frame["event_timestamp"] >= cutoff],
    )
    return TrainingSet(
        frame=frame,
        requested=len(labels),
        x_train=as_matrix(train),
        y_train=train[LABEL].to_numpy(dtype=np.int64),
        x_valid=as_matrix(valid),
        y_valid=valid[LABEL].to_numpy(dtype=np.int64),
        cutoff=cutoff,
    )


#: LightGBM's parameters (logged with the run). Small trees and a modest learning rate:
#: a few thousand rows of eleven features.
PARAMS: dict[str, Any] = {
    "objective": "binary",
    "n_estimators": 200,
    "learning_rate": 0.05,
    "num_leaves": 15,
    "min_child_samples": 20,
    "subsample": 0.8,
    "subsample_freq": 1,
    "colsample_bytree": 0.9,
    "reg_lambda": 1.0,
}


def train(data: TrainingSet, *, seed: int = 7, threads: int = 2) -> tuple[Any, dict[str, float]]:
    """Fit LightGBM; returns the classifier and its validation metrics."""
    import lightgbm as lgb  # noqa: PLC0415
    from sklearn.metrics import log_loss, roc_auc_score  # noqa: PLC0415

    model = lgb.LGBMClassifier(
        **PARAMS, random_state=seed, n_jobs=threads, deterministic=True, verbose=-1
    )
    model.fit(data.x_train, data.y_train)
    probabilities = np.asarray(model.predict_proba(data.x_valid))[:, 1]
    if len(set(data.y_valid.tolist())) < 2:
        raise ModelError("the validation rows have one class only; generate more data")
    metrics = {
        "valid_auc": float(roc_auc_score(data.y_valid, probabilities)),
        "valid_log_loss": float(log_loss(data.y_valid, probabilities)),
        "valid_churn_rate": float(data.y_valid.mean()),
        "train_rows": float(len(data.y_train)),
        "valid_rows": float(len(data.y_valid)),
    }
    return model, metrics


@dataclass(frozen=True)
class Parity:
    """ONNX Runtime against LightGBM on the held-out rows."""

    rows: int
    max_abs_diff: float
    bound: float
    trees: int

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def parity_bound(booster: Any) -> tuple[float, int]:
    """The worst-case float32 difference of probabilities for ``booster`` (see the
    module docstring) and its number of trees."""
    trees = booster.dump_model()["tree_info"]

    def leaves(node: dict[str, Any]) -> list[float]:
        if "leaf_value" in node:
            return [abs(float(node["leaf_value"]))]
        return leaves(node["left_child"]) + leaves(node["right_child"])

    largest = sum(max(leaves(tree["tree_structure"])) for tree in trees)
    return 0.25 * len(trees) * FLOAT32_U * largest + 4 * FLOAT32_U, len(trees)


def onnx_session(model_bytes: bytes, threads: int = 0) -> Any:
    """An ONNX Runtime CPU session with the inference library's settings."""
    import onnxruntime as ort  # noqa: PLC0415

    from workloads.inference.runtime import SessionSettings  # noqa: PLC0415

    options = SessionSettings(intra_op_threads=threads, spin=False).session_options()
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def onnx_probability(session: Any, x: Matrix) -> npt.NDArray[np.float32]:
    """Churn probabilities (class 1) from an ONNX session."""
    (probabilities,) = session.run([ONNX_PROBABILITIES], {ONNX_INPUT: x})
    return np.asarray(probabilities, dtype=np.float32)[:, 1]


def export_onnx(model: Any, x_check: Matrix) -> tuple[bytes, Parity]:
    """Convert the LightGBM classifier to ONNX and check it on ``x_check``.

    Raises:
        ModelError: the ONNX probabilities differ by more than `parity_bound`.
    """
    import onnxmltools  # noqa: PLC0415
    from onnxmltools.convert.common.data_types import FloatTensorType  # noqa: PLC0415

    onnx_model = onnxmltools.convert_lightgbm(
        model,
        initial_types=[(ONNX_INPUT, FloatTensorType([None, len(MODEL_FEATURES)]))],
        zipmap=False,  # a plain (batch, 2) tensor rather than a list of maps
        target_opset=ONNX_OPSET,
    )
    outputs = [o.name for o in onnx_model.graph.output]
    if ONNX_PROBABILITIES not in outputs:
        raise ModelError(f"the converter's outputs are {outputs}, not {ONNX_PROBABILITIES!r}")
    # onnxmltools declares the label output as shape [1] whatever the batch (ONNX Runtime
    # then warns on every batch); both outputs have one row per input row.
    for output in onnx_model.graph.output:
        output.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx_model.doc_string = "SMB churn: LightGBM, features " + ",".join(MODEL_FEATURES)
    data = onnx_model.SerializeToString()
    native = model.predict_proba(x_check)[:, 1]
    onnx_p = onnx_probability(onnx_session(data, threads=1), x_check)
    bound, trees = parity_bound(model.booster_)
    parity = Parity(
        rows=len(x_check),
        max_abs_diff=float(np.max(np.abs(native - onnx_p.astype(np.float64)))),
        bound=bound,
        trees=trees,
    )
    if not parity.max_abs_diff <= parity.bound:
        raise ModelError(
            f"ONNX probabilities differ from LightGBM's by {parity.max_abs_diff:.3g} "
            f"(bound {parity.bound:.3g} over {parity.rows} rows): the conversion is wrong; "
            "nothing was written"
        )
    return data, parity


CARD_FILE = "model_card.json"
ONNX_FILE = "model.onnx"
NATIVE_FILE = "model.lgb.txt"


def model_card(
    *, metrics: dict[str, float], parity: Parity, data_seed: int, project: str, service: str
) -> dict[str, Any]:
    """What the predictor needs to serve the model, and where it came from."""
    import lightgbm  # noqa: PLC0415
    import onnxmltools  # noqa: PLC0415
    import onnxruntime  # noqa: PLC0415

    from workloads.training.lineage import git_revision  # noqa: PLC0415

    return {
        "task": "binary classification: churn within 30 days",
        "features": list(MODEL_FEATURES),
        "feature_refs": feature_refs(),
        "feast_project": project,
        "feature_service": service,
        "onnx_input": ONNX_INPUT,
        "onnx_probabilities": ONNX_PROBABILITIES,
        "metrics": metrics,
        "parity": parity.to_dict(),
        "params": PARAMS,
        "data_seed": data_seed,
        "git_revision": git_revision(),
        "versions": {
            "lightgbm": lightgbm.__version__,
            "onnxmltools": onnxmltools.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
    }


def write_export(directory: Path, model: Any, onnx_bytes: bytes, card: dict[str, Any]) -> None:
    """Write the native model, the ONNX model and the card into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    model.booster_.save_model(str(directory / NATIVE_FILE))
    (directory / ONNX_FILE).write_bytes(onnx_bytes)
    (directory / CARD_FILE).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")


def read_card(directory: Path) -> dict[str, Any]:
    """The card of a model directory: an export (``model_card.json``) or an MLflow ONNX
    model (the card is the ``metadata`` of its ``MLmodel`` file).

    Raises:
        ModelError: neither, or a card without the features.
    """
    card_path = directory / CARD_FILE
    mlmodel = directory / "MLmodel"
    card: Any
    if card_path.is_file():
        card = json.loads(card_path.read_text())
    elif mlmodel.is_file():
        import yaml  # noqa: PLC0415

        card = (yaml.safe_load(mlmodel.read_text()) or {}).get("metadata") or {}
    else:
        raise ModelError(
            f"{directory} has neither {CARD_FILE} nor MLmodel; give a directory written by "
            "`python -m workloads.features run` (model/) or a registered version's artifacts"
        )
    if not isinstance(card, dict) or not isinstance(card.get("features"), list):
        raise ModelError(f"{directory}: the model card names no features; export again")
    if not (directory / ONNX_FILE).is_file():
        raise ModelError(f"{directory / ONNX_FILE}: missing; export again")
    return card


def check_features(card: dict[str, Any], expected: Sequence[str] = MODEL_FEATURES) -> None:
    """The model must take this code's features, in this order."""
    if list(card["features"]) != list(expected):
        raise ModelError(
            f"the model takes {card['features']}, this code computes {list(expected)}; "
            "serve it with the code version it was trained with, or train again"
        )
