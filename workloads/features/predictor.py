"""The tabular CPU predictor: the churn model over V2, its features from Feast.

A KServe custom model (`TabularPredictor`) served by the same V2 server as the
language-model predictor (`workloads.serving.app`: KServe's data plane, bound where it
is told, admission control and the ``uae_predictor_*`` metrics). Two kinds of request,
told apart by their inputs' names:

- **by entity key**: one input ``customer_id`` (INT64 or INT32, ``[batch]``). The
  predictor reads the customers' features from the Feast online store (the on-demand
  ratios computed by Feast as in training), in the model's feature order;
- **by raw values**: one input per stored feature (``plan_price_aed``, ``seats``, ...,
  each numeric, ``[batch]``); the predictor derives the on-demand ratios with the same
  function Feast runs (`workloads.features.repo.derive`).

Outputs: ``churn_probability`` (FP32, ``[batch]``) and ``features`` (FP32,
``[batch, n_features]``): the exact input row the model saw, so a caller can see
which feature values were behind each prediction.

No micro-batching here (unlike the language model): one ONNX call on a tree ensemble
takes tens of microseconds, less than the batcher's wait for companions would add.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from kserve import Model
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from workloads.features.model import (
    Matrix,
    ModelError,
    check_features,
    onnx_probability,
    onnx_session,
    read_card,
)
from workloads.features.repo import BASE_FEATURES, JOIN_KEY, MODEL_FEATURES, derive

log = logging.getLogger(__name__)

PROBABILITY = "churn_probability"
FEATURES = "features"
#: Most rows one request may carry: a bound on one request's work and lookup.
MAX_ROWS = 1024
_INTEGER = ("INT64", "INT32")
_NUMERIC = ("FP64", "FP32", "INT64", "INT32", "INT16", "INT8", "UINT8", "UINT16", "UINT32")


def model_version(directory: Path, card: dict[str, Any]) -> str:
    """The version label of a model directory: the MLflow run of a registered version,
    else the export's git revision."""
    mlmodel = directory / "MLmodel"
    if mlmodel.is_file():
        import yaml  # noqa: PLC0415

        run_id = (yaml.safe_load(mlmodel.read_text()) or {}).get("run_id")
        if run_id:
            return str(run_id)
    return str(card.get("git_revision", "export"))[:12]


class TabularPredictor(Model):  # type: ignore[misc]  # kserve ships no types
    """The churn model of ``model_dir``, served under ``name``.

    Args:
        name: the model name in V2 paths (``/v2/models/<name>/infer``).
        model_dir: an export directory (``model_card.json``, ``model.onnx``) or a
            registered MLflow version's artifacts (``MLmodel``, ``model.onnx``).
        feature_repo: a Feast repository directory (``feature_store.yaml``); without
            one, only raw-value requests are served.
        threads: ONNX Runtime intra-op threads (0: the physical cores).
    """

    def __init__(
        self, name: str, model_dir: Path, feature_repo: Path | None, threads: int = 1
    ) -> None:
        super().__init__(name)
        self.model_dir = model_dir
        self.feature_repo = feature_repo
        self.threads = threads
        self.version = ""
        self.card: dict[str, Any] = {}
        self.session: Any = None
        self.store: Any = None

    def load(self) -> bool:
        """Open the ONNX session and the feature store; raises `ModelError`."""
        self.card = read_card(self.model_dir)
        check_features(self.card)
        try:
            self.session = onnx_session(
                (self.model_dir / "model.onnx").read_bytes(), threads=self.threads
            )
        except Exception as err:  # onnxruntime raises its own untyped errors
            raise ModelError(
                f"{self.model_dir / 'model.onnx'}: not a loadable model ({err})"
            ) from err
        self.version = model_version(self.model_dir, self.card)
        if self.feature_repo is not None:
            self.store = open_store(self.feature_repo, self.card)
        self.ready = True
        return True

    # --- V2 metadata --------------------------------------------------------------------

    def get_input_types(self) -> list[dict[str, Any]]:
        raw = [{"name": name, "datatype": "FP64", "shape": [-1]} for name in BASE_FEATURES]
        return [{"name": JOIN_KEY, "datatype": "INT64", "shape": [-1]}, *raw]

    def get_output_types(self) -> list[dict[str, Any]]:
        return [
            {"name": PROBABILITY, "datatype": "FP32", "shape": [-1]},
            {"name": FEATURES, "datatype": "FP32", "shape": [-1, len(MODEL_FEATURES)]},
        ]

    # --- inference ----------------------------------------------------------------------

    async def predict(
        self, payload: InferRequest, headers: dict[str, str] | None = None
    ) -> InferResponse:
        if not isinstance(payload, InferRequest):
            raise InvalidInput("send an Open Inference Protocol (V2) request")
        names = [tensor.name for tensor in payload.inputs]
        if names == [JOIN_KEY]:
            x = await self._by_key(payload.inputs[0])
        elif sorted(names) == sorted(BASE_FEATURES):
            x = self._by_value({tensor.name: tensor for tensor in payload.inputs})
        else:
            raise InvalidInput(
                f"send either one input {JOIN_KEY!r} (INT64, [batch]) or one input per "
                f"feature: {', '.join(BASE_FEATURES)}; got {', '.join(names) or 'none'}"
            )
        probability = onnx_probability(self.session, x)
        out_p = InferOutput(PROBABILITY, [len(probability)], "FP32")
        out_p.set_data_from_numpy(probability, binary_data=False)
        out_x = InferOutput(FEATURES, list(x.shape), "FP32")
        out_x.set_data_from_numpy(x, binary_data=False)
        return InferResponse(
            response_id=payload.id or str(uuid.uuid4()),
            model_name=self.name,
            model_version=self.version,
            infer_outputs=[out_p, out_x],
        )

    async def _by_key(self, tensor: Any) -> Matrix:
        if self.store is None:
            raise InvalidInput(
                "this server has no feature store (--feature-repo); send raw feature values"
            )
        if tensor.datatype not in _INTEGER:
            raise InvalidInput(f"{JOIN_KEY!r} must be INT64 or INT32, got {tensor.datatype}")
        keys = [int(k) for k in _column(tensor, JOIN_KEY)]
        loop = asyncio.get_running_loop()
        # The online store is I/O (SQLite here, Redis on the cluster): off the event loop.
        values = await loop.run_in_executor(None, lookup, self.store, self.card, keys)
        missing = [
            k for i, k in enumerate(keys) if any(values[name][i] is None for name in MODEL_FEATURES)
        ]
        if missing:
            raise InvalidInput(
                f"no features in the online store for {JOIN_KEY} {sorted(set(missing))[:10]}: "
                "an unknown customer, or its features are not materialised yet"
            )
        return _matrix(values)

    def _by_value(self, tensors: dict[str, Any]) -> Matrix:
        columns: dict[str, list[float]] = {}
        for name in BASE_FEATURES:
            tensor = tensors[name]
            if tensor.datatype not in _NUMERIC:
                raise InvalidInput(f"{name!r} must be numeric (FP64, FP32, INT64 ...)")
            values = _column(tensor, name).astype(np.float64)
            if not np.all(np.isfinite(values)):
                raise InvalidInput(f"{name!r} has a missing or infinite value")
            columns[name] = values.tolist()
        lengths = {len(v) for v in columns.values()}
        if len(lengths) != 1:
            raise InvalidInput("every feature input must have the same batch size")
        return _matrix({**columns, **derive(columns)})


def _column(tensor: Any, name: str) -> np.ndarray[Any, Any]:
    if len(tensor.shape) != 1:
        raise InvalidInput(f"{name!r} must have shape [batch], got {tensor.shape}")
    if not 1 <= tensor.shape[0] <= MAX_ROWS:
        raise InvalidInput(f"{name!r}: send 1 to {MAX_ROWS} rows, got {tensor.shape[0]}")
    try:
        return np.asarray(tensor.as_numpy()).reshape(-1)
    except (ValueError, TypeError) as err:
        raise InvalidInput(f"{name!r}: data does not match shape {tensor.shape}") from err


def _matrix(values: Mapping[str, Sequence[Any]]) -> Matrix:
    """Rows in `MODEL_FEATURES` order, as the model's float32 input."""
    columns = [np.asarray(values[name], dtype=np.float64) for name in MODEL_FEATURES]
    return np.stack(columns, axis=1).astype(np.float32)


def open_store(feature_repo: Path, card: dict[str, Any]) -> Any:
    """The Feast store of ``feature_repo``, checked to serve the card's feature service.

    Raises:
        ModelError: no ``feature_store.yaml``, or the repository was not applied.
    """
    if not (feature_repo / "feature_store.yaml").is_file():
        raise ModelError(f"{feature_repo} has no feature_store.yaml; give the feature repository")
    from feast import FeatureStore  # noqa: PLC0415 - slow import

    store = FeatureStore(repo_path=str(feature_repo))
    try:
        store.get_feature_service(card["feature_service"])
    except Exception as err:  # feast's FeatureServiceNotFoundException and registry errors
        raise ModelError(
            f"the feature repository {feature_repo} has no feature service "
            f"{card['feature_service']!r}; apply it first (python -m workloads.features run)"
        ) from err
    return store


def lookup(store: Any, card: dict[str, Any], keys: Sequence[int]) -> dict[str, list[Any]]:
    """Online features (the model's, by short name) of ``keys``; ``None`` where absent."""
    response = store.get_online_features(
        features=list(card["feature_refs"]), entity_rows=[{JOIN_KEY: k} for k in keys]
    )
    result: dict[str, list[Any]] = response.to_dict()
    return result
