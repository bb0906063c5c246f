"""Export to ONNX, int8 quantisation, and CPU inference with ONNX Runtime.

The public API (stable; a model server wraps it)::

    from workloads.inference import OnnxLM, SessionSettings

    lm = OnnxLM.load("build/export/tiny", variant="int8", settings=SessionSettings())
    lm.generate_text(["The "], max_new_tokens=32)                     # text in, text out
    lm.generate([[84, 104, 101]], 8, temperature=0.8, top_k=40, seed=1)  # ids in, ids out
    lm.logits([[84, 104, 101]])                                       # (batch, seq, vocab)
    lm.next_token_logits([[84], [84, 104]])                           # (batch, vocab)

Errors are typed (`workloads.inference.errors`): `ExportError` for an unusable
export, `InvalidInputError` for a bad request, with its subclasses
`ContextLengthError` and `UnmappableInputError`.
"""

from workloads.inference.card import ModelCard, Parity, read_card
from workloads.inference.errors import (
    ContextLengthError,
    ExportError,
    InferenceError,
    InvalidInputError,
    UnmappableInputError,
)
from workloads.inference.runtime import OnnxLM, SessionSettings
from workloads.inference.tokenizer import ByteTokenizer

__all__ = [
    "ByteTokenizer",
    "ContextLengthError",
    "ExportError",
    "InferenceError",
    "InvalidInputError",
    "ModelCard",
    "OnnxLM",
    "Parity",
    "SessionSettings",
    "UnmappableInputError",
    "read_card",
]
