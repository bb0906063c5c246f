"""The CPU predictor: a KServe custom model wrapping the inference library.

One `LanguageModelPredictor` serves one variant (fp32 or int8) of one export over the
Open Inference Protocol (V2). Two kinds of request, told apart by the input's name:

- ``text`` (BYTES, shape ``[batch]``) -> ``text`` (BYTES, ``[batch]``): the continuation
  of each prompt; request parameters ``max_new_tokens`` (default 32), ``temperature``
  (0: greedy), ``top_k``, ``seed``;
- ``token_ids`` (INT64 or INT32, ``[batch, seq]``) -> ``logits`` (FP32,
  ``[batch, seq, vocab]``).

Every request is checked on its own (a bad one is a 400 naming what to fix and never
reaches a batch), then answered in a batch with concurrent requests (`MicroBatcher`),
and its prompts feed the model version's drift window.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from kserve import Model
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from workloads.inference import ContextLengthError, InvalidInputError, OnnxLM, SessionSettings
from workloads.inference.drift import REFERENCE_FILE, DriftReference, DriftWindow
from workloads.serving import metrics
from workloads.serving.batching import MicroBatcher
from workloads.serving.protocol import model_parameters

log = logging.getLogger(__name__)

DEFAULT_NEW_TOKENS = 32
#: Most tokens one generation request may ask for: a bound on one request's work.
MAX_NEW_TOKENS = 256
TEXT = "text"
TOKEN_IDS = "token_ids"
LOGITS = "logits"


def model_version(lm: OnnxLM) -> str:
    """The version label of an export: its tracking run, else its checkpoint step."""
    source = lm.card.source
    return source.get("run_id") or f"step-{source.get('step', '0')}"


class LanguageModelPredictor(Model):  # type: ignore[misc]  # kserve ships no types
    """One variant of one export, served under ``name``.

    Args:
        name: the model name in V2 paths (``/v2/models/<name>/infer``).
        export_dir: a directory `make export` wrote.
        variant: ``fp32`` or ``int8``.
        settings: ONNX Runtime session settings.
        max_batch_rows: most rows answered by one model call.
        drift_window: prompts in the sliding window of the drift scores (0: no drift
            scores here; on the cluster the drift service computes them).
    """

    def __init__(
        self,
        name: str,
        export_dir: Path,
        variant: str,
        *,
        settings: SessionSettings | None = None,
        max_batch_rows: int = 16,
        drift_window: int = 500,
    ) -> None:
        super().__init__(name)
        self.export_dir = export_dir
        self.variant = variant
        self.settings = settings
        self.max_batch_rows = max_batch_rows
        self.drift_window_size = drift_window
        self.lm: OnnxLM | None = None
        self.version = ""
        self.drift: DriftWindow | None = None
        self.batcher: MicroBatcher[Any, Any] | None = None

    def load(self) -> bool:
        """Open the ONNX session and the drift reference; raises `ExportError`."""
        lm = OnnxLM.load(self.export_dir, variant=self.variant, settings=self.settings)  # type: ignore[arg-type]
        self.lm = lm
        self.version = model_version(lm)
        reference_path = self.export_dir / REFERENCE_FILE
        if self.drift_window_size == 0:
            self.drift = None  # measured outside (the drift service, fed by KServe's logger)
        elif reference_path.is_file():
            self.drift = DriftWindow(DriftReference.read(reference_path), self.drift_window_size)
        else:
            log.warning("%s: no %s; drift is not measured", self.export_dir, REFERENCE_FILE)
        batch_sizes = metrics.BATCH_SIZE.labels(self.name, self.version)
        self.batcher = MicroBatcher(self._run, self.max_batch_rows, on_batch=batch_sizes.observe)
        self.ready = True
        return True

    def unload(self) -> None:
        """Release the ONNX session (the repository extension's unload)."""
        self.lm = None
        self.batcher = None
        self.drift = None
        self.ready = False

    # --- V2 metadata --------------------------------------------------------------------

    def get_input_types(self) -> list[dict[str, Any]]:
        return [
            {"name": TEXT, "datatype": "BYTES", "shape": [-1]},
            {"name": TOKEN_IDS, "datatype": "INT64", "shape": [-1, -1]},
        ]

    def get_output_types(self) -> list[dict[str, Any]]:
        vocab = self.lm.vocab_size if self.lm else -1
        return [
            {"name": TEXT, "datatype": "BYTES", "shape": [-1]},
            {"name": LOGITS, "datatype": "FP32", "shape": [-1, -1, vocab]},
        ]

    # --- inference ----------------------------------------------------------------------

    def _run(self, key: tuple[Any, ...], rows: list[list[int]]) -> Sequence[Any]:
        """The batched model call (in the executor)."""
        assert self.lm is not None
        if key[0] == LOGITS:
            return list(self.lm.logits(rows))
        _, new_tokens, temperature, top_k, seed = key
        return self.lm.generate(rows, new_tokens, temperature=temperature, top_k=top_k, seed=seed)

    async def predict(
        self, payload: InferRequest, headers: dict[str, str] | None = None
    ) -> InferResponse:
        if not isinstance(payload, InferRequest):
            raise InvalidInput("send an Open Inference Protocol (V2) request")
        if len(payload.inputs) != 1:
            raise InvalidInput(f"send exactly one input, {TEXT!r} or {TOKEN_IDS!r}")
        tensor = payload.inputs[0]
        try:
            parameters = model_parameters(payload)
            if tensor.name == TEXT:
                output = await self._generate(tensor, parameters)
            elif tensor.name == TOKEN_IDS:
                if parameters:
                    raise InvalidInput(
                        f"a {TOKEN_IDS!r} request returns logits and takes no parameters; got "
                        f"{', '.join(sorted(parameters))}"
                    )
                output = await self._logits(tensor)
            else:
                raise InvalidInput(
                    f"unknown input {tensor.name!r}; send {TEXT!r} (BYTES) or {TOKEN_IDS!r} (INT64)"
                )
        except InvalidInputError as err:
            raise InvalidInput(str(err)) from err
        return InferResponse(
            response_id=payload.id or str(uuid.uuid4()),
            model_name=self.name,
            model_version=self.version,
            infer_outputs=[output],
        )

    async def _logits(self, tensor: Any) -> InferOutput:
        assert self.lm is not None and self.batcher is not None
        if tensor.datatype not in ("INT64", "INT32"):
            raise InvalidInput(f"{TOKEN_IDS!r} must be INT64 or INT32, got {tensor.datatype}")
        if len(tensor.shape) != 2:
            raise InvalidInput(f"{TOKEN_IDS!r} must have shape [batch, seq], got {tensor.shape}")
        try:
            ids = tensor.as_numpy()
        except ValueError as err:
            raise InvalidInput(f"{TOKEN_IDS!r}: data does not match shape {tensor.shape}") from err
        rows = [list(map(int, row)) for row in ids]
        self._check(rows)
        self._observe(rows)
        logits = await self.batcher.submit((LOGITS, len(rows[0])), rows)
        array = np.stack(logits).astype(np.float32)
        # A flat list, as set_data_from_numpy(binary_data=False) makes it element by element
        # (kserve/protocol/infer_type.py InferOutput), at a millisecond per logits request.
        return InferOutput(LOGITS, list(array.shape), "FP32", data=array.ravel().tolist())

    async def _generate(self, tensor: Any, parameters: dict[str, Any]) -> InferOutput:
        assert self.lm is not None and self.batcher is not None
        if self.lm.tokenizer is None:
            raise InvalidInput("this model has no text tokenizer; send token_ids")
        if tensor.datatype != "BYTES" or len(tensor.shape) != 1:
            raise InvalidInput(f"{TEXT!r} must be BYTES with shape [batch]")
        try:
            values = tensor.as_numpy()
        except ValueError as err:  # numpy's reshape: the data has another element count
            raise InvalidInput(
                f"{TEXT!r}: the data does not match shape {tensor.shape} (one prompt per "
                f"row of the batch)"
            ) from err
        try:
            prompts = [p.decode("utf-8") if isinstance(p, bytes) else str(p) for p in values]
        except UnicodeDecodeError as err:
            raise InvalidInput(f"{TEXT!r}: prompts must be UTF-8 text ({err})") from err
        new_tokens, temperature, top_k, seed = generation_parameters(parameters)
        rows = [self.lm.tokenizer.encode(prompt) for prompt in prompts]
        self._check(rows, new_tokens)
        self._observe(rows)
        new = await self.batcher.submit(("generate", new_tokens, temperature, top_k, seed), rows)
        texts = [self.lm.tokenizer.decode(tokens) for tokens in new]
        return InferOutput(TEXT, [len(texts)], "BYTES", data=texts)

    def _check(self, rows: list[list[int]], new_tokens: int = 0) -> None:
        """The checks the library makes of a whole batch, made of this request alone so
        that a bad request is refused on its own and never fails a batch."""
        assert self.lm is not None
        if not rows:
            raise InvalidInput("the batch is empty; send at least one prompt")
        for index, row in enumerate(rows):
            if not row:
                raise InvalidInput(f"prompt {index} is empty; send at least one token")
            if len(row) + new_tokens > self.lm.context_length:
                raise InvalidInput(
                    str(ContextLengthError(len(row) + new_tokens, self.lm.context_length))
                )
            bad = [t for t in row if not 0 <= t < self.lm.vocab_size]
            if bad:
                raise InvalidInput(
                    f"prompt {index} has token id {bad[0]} outside the vocabulary "
                    f"[0, {self.lm.vocab_size})"
                )

    def _observe(self, rows: list[list[int]]) -> None:
        if self.drift is None:
            return
        for row in rows:
            self.drift.add(row)
        for statistic, score in self.drift.scores().items():
            metrics.DRIFT.labels(self.name, self.version, statistic).set(score)


#: The generation parameters a text request may carry, and what each must be.
GENERATION_PARAMETERS = ("max_new_tokens", "temperature", "top_k", "seed")


def _integer(parameters: dict[str, Any], key: str) -> int | None:
    value = parameters.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{key} must be an integer, got {value!r}")
    return value


def generation_parameters(parameters: dict[str, Any]) -> tuple[int, float, int | None, int | None]:
    """``max_new_tokens``, ``temperature``, ``top_k``, ``seed`` of a request, checked:
    any other parameter, and any value of the wrong type (``1.5`` tokens, ``"7"``), is
    refused rather than guessed at."""
    unknown = sorted(set(parameters) - set(GENERATION_PARAMETERS))
    if unknown:
        raise InvalidInput(
            f"unknown parameter(s) {', '.join(unknown)}; text generation takes "
            f"{', '.join(GENERATION_PARAMETERS)}"
        )
    new_tokens = _integer(parameters, "max_new_tokens")
    new_tokens = DEFAULT_NEW_TOKENS if new_tokens is None else new_tokens
    temperature = parameters.get("temperature", 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise InvalidInput(f"temperature must be a number, got {temperature!r}")
    top_k = _integer(parameters, "top_k")
    seed = _integer(parameters, "seed")
    if not 1 <= new_tokens <= MAX_NEW_TOKENS:
        raise InvalidInput(f"max_new_tokens must be in [1, {MAX_NEW_TOKENS}], got {new_tokens}")
    if temperature < 0:
        raise InvalidInput(f"temperature must be >= 0 (0: greedy), got {temperature}")
    if top_k is not None and top_k < 1:
        raise InvalidInput(f"top_k must be >= 1, got {top_k}")
    return new_tokens, float(temperature), top_k, seed
