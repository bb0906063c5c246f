"""The model card: ``model_card.json`` beside the ONNX files of an export.

It says what the files are (model shape, vocabulary, tokenizer, opset, the ONNX
files and how the int8 one was quantised), where they came from (checkpoint, step,
tracking run, git revision) and the parity figures measured when they were written.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workloads.inference.errors import ExportError
from workloads.training.config import ModelConfig

CARD_FILE = "model_card.json"
FP32_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
CARD_FORMAT = 1
#: Graph input and output names of every export.
INPUT_NAME = "token_ids"
OUTPUT_NAME = "logits"


@dataclass(frozen=True)
class Parity:
    """Figures measured at export time on held-out tokens.

    Args:
        heldout_tokens: tokens the figures were measured on.
        fp32_max_abs_logit_diff: largest |ONNX fp32 - PyTorch| logit difference.
        fp32_logit_atol: the tolerance it had to meet.
        torch_loss: PyTorch's mean cross-entropy (nats/token).
        fp32_loss: the fp32 ONNX model's.
        int8_loss: the int8 ONNX model's.
        int8_loss_margin: allowed relative increase of ``int8_loss`` over ``fp32_loss``.
    """

    heldout_tokens: int
    fp32_max_abs_logit_diff: float
    fp32_logit_atol: float
    torch_loss: float
    fp32_loss: float
    int8_loss: float
    int8_loss_margin: float


@dataclass(frozen=True)
class ModelCard:
    """What an export directory holds.

    Args:
        name: the export's name.
        model: the model's shape (``block_size`` is the context length).
        vocab_size: real vocabulary (logits beyond it are padding, never produced).
        logit_rows: rows of the model's logits (the padded vocabulary).
        tokenizer: ``byte-utf8`` or ``external`` (token ids only).
        opset: ONNX opset of both files.
        files: ``{"fp32": "model.onnx", "int8": "model.int8.onnx"}``.
        quantization: how the int8 file was made.
        source: checkpoint, step, preset, tracking run id and git revision.
        parity: figures measured at export time.
        versions: torch, onnx, onnxruntime versions of the export.
    """

    name: str
    model: ModelConfig
    vocab_size: int
    logit_rows: int
    tokenizer: str
    opset: int
    files: dict[str, str]
    quantization: dict[str, str]
    source: dict[str, str]
    parity: Parity
    versions: dict[str, str] = field(default_factory=dict)
    format: int = CARD_FORMAT

    @property
    def context_length(self) -> int:
        return self.model.block_size

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def read_card(export_dir: Path) -> ModelCard:
    """The card of ``export_dir``; `ExportError` naming what is wrong."""
    path = export_dir / CARD_FILE
    if not export_dir.is_dir():
        raise ExportError(f"{export_dir}: no such export directory; run `make export` first")
    if not path.is_file():
        raise ExportError(f"{export_dir}: no {CARD_FILE}; not an export (or an unfinished one)")
    try:
        body: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        if body.get("format") != CARD_FORMAT:
            raise ValueError(
                f"card format {body.get('format')!r}, this library reads {CARD_FORMAT}"
            )
        return ModelCard(
            **{
                **body,
                "model": ModelConfig(**body["model"]),
                "parity": Parity(**body["parity"]),
            }
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ExportError(f"{path}: not a readable model card ({err}); export again") from err
