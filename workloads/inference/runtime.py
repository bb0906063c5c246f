"""`OnnxLM`: the exported language model on ONNX Runtime's CPU execution provider.

The graph is KV-free (token ids in, logits for every position out), so generation runs
the whole sequence each step. Batches of prompts of different lengths are padded on
the right: the model is causal, so padding after a row's last token never changes that
row's logits, and each row reads its next-token logits at its own last position.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from workloads.inference.card import INPUT_NAME, ModelCard, read_card
from workloads.inference.errors import (
    ContextLengthError,
    ExportError,
    InvalidInputError,
    UnmappableInputError,
)
from workloads.inference.tokenizer import BYTE_TOKENIZER, ByteTokenizer

Variant = Literal["fp32", "int8"]
GraphOptimization = Literal["disable", "basic", "extended", "all"]

_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def physical_cores() -> int:
    """Physical cores available to this process (hyper-threads share one core's
    matmul units, so more threads than cores only adds contention)."""
    try:
        import psutil  # noqa: PLC0415 - optional: the library works without it

        cores = psutil.cpu_count(logical=False)
    except ImportError:
        cores = None
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    candidates = [n for n in (cores, available, os.cpu_count()) if n]
    return max(1, min(candidates)) if candidates else 1


@dataclass(frozen=True)
class SessionSettings:
    """How ONNX Runtime runs the model on this machine.

    Args:
        intra_op_threads: threads inside one operator (0: the physical cores this
            process may use).
        inter_op_threads: threads running independent operators (1: the graph is a
            chain, parallel execution only adds overhead).
        graph_optimization: ``all`` fuses attention, GELU, LayerNorm and MatMul+Add.
        memory_arena: reuse activation buffers between runs (a large speed-up for
            repeated calls; costs resident memory).
        spin: let idle intra-op threads spin-wait (faster on a dedicated machine,
            wasteful on a shared one).
    """

    intra_op_threads: int = 0
    inter_op_threads: int = 1
    graph_optimization: GraphOptimization = "all"
    memory_arena: bool = True
    spin: bool = True

    def __post_init__(self) -> None:
        if self.intra_op_threads < 0 or self.inter_op_threads < 1:
            raise InvalidInputError(
                "intra_op_threads must be >= 0 (0: all physical cores) and inter_op_threads >= 1"
            )
        if self.graph_optimization not in _LEVELS:
            raise InvalidInputError(f"graph_optimization must be one of {', '.join(_LEVELS)}")

    def session_options(self) -> ort.SessionOptions:
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.intra_op_threads or physical_cores()
        options.inter_op_num_threads = self.inter_op_threads
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = _LEVELS[self.graph_optimization]
        options.enable_cpu_mem_arena = self.memory_arena
        options.enable_mem_pattern = self.memory_arena
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if self.spin else "0"
        )
        options.log_severity_level = 3  # errors only: no per-session warnings in a server log
        return options


class OnnxLM:
    """A language model loaded from an export directory (see `OnnxLM.load`).

    Attributes:
        card: the export's model card.
        variant: ``fp32`` or ``int8``.
        context_length: longest sequence (prompt plus new tokens) the model takes.
        vocab_size: token ids are in ``[0, vocab_size)``.
        tokenizer: the byte tokenizer, or ``None`` for an ``external`` vocabulary.
    """

    def __init__(self, session: ort.InferenceSession, card: ModelCard, variant: Variant) -> None:
        self.session = session
        self.card = card
        self.variant = variant
        self.context_length = card.context_length
        self.vocab_size = card.vocab_size
        self.tokenizer = ByteTokenizer() if card.tokenizer == BYTE_TOKENIZER else None

    @classmethod
    def load(
        cls,
        export_dir: str | Path,
        variant: Variant = "int8",
        settings: SessionSettings | None = None,
    ) -> OnnxLM:
        """Load ``variant`` of the export in ``export_dir``.

        Raises:
            ExportError: not an export directory, or its ONNX file is missing or broken.
        """
        export_dir = Path(export_dir)
        card = read_card(export_dir)
        if variant not in card.files:
            raise ExportError(f"{export_dir}: no {variant!r} model (has {', '.join(card.files)})")
        path = export_dir / card.files[variant]
        if not path.is_file():
            raise ExportError(f"{path}: missing; export again")
        options = (settings or SessionSettings()).session_options()
        try:
            session = ort.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as err:  # ORT raises its own untyped errors for broken files
            raise ExportError(f"{path}: ONNX Runtime cannot load it ({err}); export again") from err
        return cls(session, card, variant)

    # --- token ids in, logits out -----------------------------------------------------

    def _check_ids(self, rows: Sequence[Sequence[int]]) -> None:
        if not rows:
            raise InvalidInputError("the batch is empty; send at least one sequence")
        for index, row in enumerate(rows):
            if len(row) == 0:
                raise InvalidInputError(f"sequence {index} is empty; send at least one token")
            if len(row) > self.context_length:
                raise ContextLengthError(len(row), self.context_length)
            bad = [t for t in row if not 0 <= int(t) < self.vocab_size]
            if bad:
                raise UnmappableInputError(
                    f"sequence {index} has token id {bad[0]} outside the vocabulary "
                    f"[0, {self.vocab_size})"
                )

    def _run(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        (logits,) = self.session.run(None, {INPUT_NAME: ids})
        out: npt.NDArray[np.float32] = logits[..., : self.vocab_size]
        return out

    def logits(
        self, token_ids: Sequence[Sequence[int]] | npt.NDArray[np.integer]
    ) -> npt.NDArray[np.float32]:
        """Logits of every position: ``(batch, seq, vocab_size)`` float32.

        Args:
            token_ids: a rectangular batch (every row the same length) of token ids.

        Raises:
            InvalidInputError: empty or ragged batch; `ContextLengthError` for rows
                longer than the context; `UnmappableInputError` for ids outside the
                vocabulary.
        """
        rows = [list(map(int, row)) for row in token_ids]
        self._check_ids(rows)
        if len({len(row) for row in rows}) != 1:
            raise InvalidInputError(
                "logits() takes sequences of one length; use next_token_logits() for a ragged batch"
            )
        return self._run(np.asarray(rows, dtype=np.int64))

    def next_token_logits(self, token_ids: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
        """Logits of the token after each row's last: ``(batch, vocab_size)``; rows
        may differ in length."""
        rows = [list(map(int, row)) for row in token_ids]
        self._check_ids(rows)
        return self._next(rows)

    def _next(self, rows: list[list[int]]) -> npt.NDArray[np.float32]:
        lengths = np.array([len(row) for row in rows])
        ids = np.zeros((len(rows), int(lengths.max())), dtype=np.int64)
        for index, row in enumerate(rows):
            ids[index, : len(row)] = row
        logits = self._run(ids)
        out: npt.NDArray[np.float32] = logits[np.arange(len(rows)), lengths - 1]
        return out

    # --- generation -------------------------------------------------------------------

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_k: int | None = None,
        seed: int | None = None,
    ) -> list[list[int]]:
        """New tokens for each prompt, generated together as one batch.

        Args:
            prompts: token ids of each prompt (lengths may differ).
            max_new_tokens: tokens to add to each prompt (>= 1).
            temperature: 0 for greedy decoding (argmax), else the softmax temperature.
            top_k: sample only among the ``top_k`` most likely tokens (``None``: all).
            seed: seed of the sampler, for repeatable samples.

        Raises:
            ContextLengthError: a prompt plus ``max_new_tokens`` exceeds the context.
            InvalidInputError: bad arguments; `UnmappableInputError` for bad ids.
        """
        if max_new_tokens < 1:
            raise InvalidInputError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise InvalidInputError(f"temperature must be >= 0 (0: greedy), got {temperature}")
        if top_k is not None and top_k < 1:
            raise InvalidInputError(f"top_k must be >= 1, got {top_k}")
        rows = [list(map(int, row)) for row in prompts]
        self._check_ids(rows)
        longest = max(len(row) for row in rows) + max_new_tokens
        if longest > self.context_length:
            raise ContextLengthError(longest, self.context_length)
        rng = np.random.default_rng(seed)
        new: list[list[int]] = [[] for _ in rows]
        for _ in range(max_new_tokens):
            logits = self._next(rows)
            for index, choice in enumerate(self._choose(logits, temperature, top_k, rng)):
                rows[index].append(choice)
                new[index].append(choice)
        return new

    @staticmethod
    def _choose(
        logits: npt.NDArray[np.float32],
        temperature: float,
        top_k: int | None,
        rng: np.random.Generator,
    ) -> list[int]:
        if temperature == 0:
            return [int(t) for t in logits.argmax(axis=-1)]
        scaled = logits.astype(np.float64) / temperature
        if top_k is not None and top_k < scaled.shape[-1]:
            cutoff = np.partition(scaled, -top_k, axis=-1)[:, -top_k][:, None]
            scaled = np.where(scaled < cutoff, -np.inf, scaled)
        scaled -= scaled.max(axis=-1, keepdims=True)
        probs = np.exp(scaled)
        probs /= probs.sum(axis=-1, keepdims=True)
        return [int(rng.choice(probs.shape[-1], p=row)) for row in probs]

    # --- text in, text out ------------------------------------------------------------

    def generate_text(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_k: int | None = None,
        seed: int | None = None,
    ) -> list[str]:
        """The continuation of each text prompt (arguments as `generate`).

        Raises:
            InvalidInputError: the export has no text tokenizer; otherwise as `generate`
                (`UnmappableInputError` for text the tokenizer cannot encode).
        """
        if self.tokenizer is None:
            raise InvalidInputError(
                f"this model's vocabulary ({self.card.tokenizer}) has no tokenizer here; "
                "send token ids"
            )
        tokenizer = self.tokenizer
        ids = [tokenizer.encode(prompt) for prompt in prompts]
        new = self.generate(ids, max_new_tokens, temperature=temperature, top_k=top_k, seed=seed)
        return [tokenizer.decode(tokens) for tokens in new]
