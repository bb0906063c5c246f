"""Typed training configuration: frozen dataclasses, validated, presets by name.

A run is described by one `TrainConfig` (which holds its `ModelConfig`). Presets give
complete configs by name (``tiny`` for CPUs and CI up to ``gpt2-350m``); any field can
be overridden on the command line (``--steps 50 --compile off``). Every bad value is
collected and reported at once (`modules.validation.InvalidArgsError`).

The speed features are separate switches so their effect can be measured (``make
bench`` turns all of them off for its fp32-eager baseline). ``auto`` means "on where
it helps": on for CUDA, off on CPU where it would only cost time (compile) or
precision (bf16).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin
from urllib.parse import urlsplit

from modules.validation import Checker, InvalidArgsError, Problem

Toggle = Literal["auto", "on", "off"]
DType = Literal["auto", "fp32", "bf16"]
Parallelism = Literal["ddp", "fsdp2"]
#: ``torch``: the trainer's own DDP / FSDP2 (``--parallelism``); ``deepspeed``: DeepSpeed's
#: engine with ZeRO stage ``--zero-stage``.
Engine = Literal["torch", "deepspeed"]
#: ``torch.compile`` modes: ``reduce-overhead`` adds CUDA graphs, ``max-autotune``
#: benchmarks kernel choices at compile time (minutes) and adds CUDA graphs.
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]

TOGGLES: tuple[str, ...] = get_args(Toggle)
DTYPES: tuple[str, ...] = get_args(DType)
PARALLELISMS: tuple[str, ...] = get_args(Parallelism)
ENGINES: tuple[str, ...] = get_args(Engine)
ZERO_STAGES: tuple[int, ...] = (1, 2, 3)
COMPILE_MODES: tuple[str, ...] = get_args(CompileMode)
#: Float8 training (torchao, `workloads.training.float8`): off, or its scaling recipe.
Float8 = Literal["off", "tensorwise", "rowwise"]
FLOAT8_RECIPES: tuple[str, ...] = get_args(Float8)

#: Vocabulary rows are padded to a multiple of this so the embedding and LM-head
#: matmuls hit tensor-core friendly shapes (GPT-2's 50257 -> 50304).
VOCAB_PAD_MULTIPLE = 64

#: The ``workloads`` package (this module lives in its ``training/`` subpackage).
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: The small corpus shipped with the package, tokenised into shards on first use.
DEFAULT_CORPUS = PACKAGE_DIR / "data" / "corpus.txt"
DEFAULT_DATA_DIR = "build/data/byte"


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the GPT-style decoder.

    Args:
        n_layer: transformer blocks.
        n_head: attention heads per block; must divide ``n_embd``.
        n_embd: width of the residual stream.
        block_size: longest sequence the positional embedding covers.
        vocab_size: the tokenizer's vocabulary (256 for the byte tokenizer, 50257 for
            GPT-2's BPE); padded to a multiple of 64 in the model when ``pad_vocab``.
        dropout: dropout probability (0 for pre-training runs, and for exact resume).
        head_dim: width of each attention head (0: ``n_embd // n_head``, GPT-2's).
            Structured pruning (`workloads.training.prune`) removes whole heads and
            keeps their width, so a pruned model has ``n_head * head_dim < n_embd``.
        mlp_width: hidden width of every block's MLP (0: ``4 * n_embd``, GPT-2's);
            set by pruning, which removes the same number of neurons in each block.
    """

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int
    dropout: float = 0.0
    head_dim: int = 0
    mlp_width: int = 0

    def __post_init__(self) -> None:
        check = Checker()
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            value = getattr(self, name)
            check.require(value >= 1, name, value, "must be a positive integer")
        for name in ("head_dim", "mlp_width"):
            value = getattr(self, name)
            check.require(value >= 0, name, value, "0 (the GPT-2 default) or a positive integer")
        if self.n_head >= 1 and self.n_embd >= 1 and not self.head_dim:
            check.require(
                self.n_embd % self.n_head == 0,
                "n_embd",
                self.n_embd,
                f"must be a multiple of n_head ({self.n_head})",
            )
        check.require(
            self.vocab_size <= 65536,
            "vocab_size",
            self.vocab_size,
            "at most 65536 (tokens are stored as uint16)",
        )
        check.require(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "in [0, 1)")
        check.done()

    @property
    def attn_head_dim(self) -> int:
        """Width of one attention head."""
        return self.head_dim or self.n_embd // self.n_head

    @property
    def attn_width(self) -> int:
        """Width of the attention's queries, keys and values: every head's together."""
        return self.n_head * self.attn_head_dim

    @property
    def mlp_hidden(self) -> int:
        """Hidden width of the MLP."""
        return self.mlp_width or 4 * self.n_embd

    def padded_vocab_size(self, pad: bool = True) -> int:
        """Rows of the embedding / LM head: ``vocab_size`` rounded up to a multiple of 64."""
        if not pad:
            return self.vocab_size
        return -(-self.vocab_size // VOCAB_PAD_MULTIPLE) * VOCAB_PAD_MULTIPLE


@dataclass(frozen=True)
class TrainConfig:
    """One training run.

    Args:
        preset: the preset this config came from (for logs and benchmark records).
        model: the model's shape.
        seq_len: tokens per sequence (at most ``model.block_size``).
        micro_batch_size: sequences per process per micro-step.
        grad_accum_steps: micro-steps per optimizer step; gradients are only
            all-reduced on the last one (``no_sync_accum``).
        steps: optimizer steps to run (the run stops at this step, resumed or not).
        learning_rate: peak AdamW learning rate.
        min_lr_ratio: cosine decay floor as a fraction of ``learning_rate``.
        warmup_steps: linear warm-up steps.
        weight_decay: AdamW weight decay on matrices (not on biases or norms).
        beta1: AdamW beta1.
        beta2: AdamW beta2.
        grad_clip: global gradient-norm clip (0 disables).
        seed: seed of model initialisation and of every random draw.
        data_dir: directory of ``train_*.bin`` / ``val_*.bin`` token shards; made
            from ``corpus`` with the byte tokenizer when it is absent or empty (a
            directory holding other files but no shards is refused, never written
            into; `make train` fills only the default one or one named with --corpus).
        corpus: text file tokenised into ``data_dir`` when it is absent or empty
            (default: the corpus shipped in ``workloads/data/corpus.txt``).
        log_every: log (and export metrics) every N steps.
        log_jsonl: when set, rank 0 appends one JSON object per logged step here.
        ckpt_dir: checkpoint directory (FSx mount or local disk); empty disables
            checkpointing. The run resumes from the newest complete checkpoint in it.
        ckpt_every: save every N steps (0: only at the end and on SIGTERM).
        async_ckpt: save with ``torch.distributed.checkpoint.async_save`` so training
            continues while the files are written.
        ckpt_keep: complete checkpoints to keep (older ones are deleted).
        metrics_port: Prometheus port served by each node's local rank 0 (0 disables).
        metrics_host: the address it binds: every interface by default, which a pod
            needs (the cluster's Prometheus scrapes it over the pod network); `make
            train` binds 127.0.0.1 (`workloads.training.launch`), so that a workstation
            does not serve its metrics to the network.
        tracking_uri: MLflow tracking server that rank 0 logs the run to (default:
            ``MLFLOW_TRACKING_URI``; empty: not tracked).
        dtype: ``bf16`` autocast, ``fp32``, or ``auto`` (bf16 on CUDA, fp32 on CPU).
        tf32: TF32 for fp32 matmuls on CUDA (``auto``: on).
        compile: ``torch.compile`` the model (``auto``: on for CUDA, off on CPU).
        fused_adamw: fused AdamW kernel (``auto``: on for CUDA, off on CPU).
        sdpa: ``scaled_dot_product_attention`` (the flash kernel on CUDA) instead of
            the explicit masked-softmax attention.
        pad_vocab: pad the vocabulary to a multiple of 64.
        pin_memory: page-locked host batches and non-blocking copies (``auto``: CUDA).
        no_sync_accum: skip the gradient all-reduce on non-final micro-steps.
        parallelism: ``ddp`` (replicated) or ``fsdp2`` (sharded, for models that do
            not fit one device); the ``torch`` engine's.
        engine: ``torch`` (DDP or FSDP2 as ``parallelism`` says) or ``deepspeed``
            (``deepspeed.initialize`` with ZeRO stage ``zero_stage``; needs the
            deepspeed package, which the training image has).
        zero_stage: the DeepSpeed engine's ZeRO stage: 1 shards the optimizer state,
            2 also the gradients, 3 also the parameters.
        activation_checkpointing: keep only each block's input in the forward pass
            and recompute the block's activations in the backward pass (less memory,
            about one more forward pass of compute).
        global_batch_size: sequences per optimizer step over all ranks (0: the
            micro-batch x ``grad_accum_steps`` x the world size of the run's first
            start). Elastic runs keep it when the world size changes by choosing
            ``grad_accum_steps``; see `workloads.training.elastic`.
        compile_mode: ``torch.compile`` mode: ``default``, ``reduce-overhead`` (CUDA
            graphs), ``max-autotune`` (autotuned kernels and CUDA graphs; compiles for
            minutes) or ``max-autotune-no-cudagraphs``.
        compile_after_wrap: under DDP, compile the DDP-wrapped model (DDP first) so
            the compiled graph is split at gradient-bucket boundaries and each
            bucket's all-reduce overlaps the rest of the backward; off: compile the
            bare model, then wrap it (one graph, the all-reduces wait for its end).
        chunked_loss: compute the LM head and cross-entropy in chunks of
            ``loss_chunk_tokens`` rows, with their gradients, so the full
            (tokens x vocabulary) logits are never materialised nor up-cast to fp32
            (``auto``: on for CUDA).
        loss_chunk_tokens: rows of the logits computed at once by ``chunked_loss``.
        prefetch: read, convert and pin the next batch on a background thread while
            the current micro-step runs (``auto``: on for CUDA).
        stop_check_every: when distributed, all-reduce the SIGTERM stop flag every N
            steps (a host synchronisation each time); a SIGTERM then stops the run
            at most N - 1 steps later, so keep N x step time well under the
            grace period. A world of one checks every step.
        tp: tensor-parallel degree: each block's attention and MLP are split over
            groups of this many consecutive ranks (one node's GPUs), and FSDP2 shards
            over the groups (`workloads.training.tp`); 1: data parallelism only. Must
            divide n_head, seq_len and the world size; the torch engine only.
        fault_kill_rank: test hook: this rank SIGKILLs itself (first attempt only).
        fault_kill_at_step: test hook: the step after which ``fault_kill_rank`` dies
            (0: never).
        fault_kill_node: test hook: ``fault_kill_rank`` first SIGKILLs its torchrun
            agent (its parent process), as the loss of its node would, so the job
            must go on with fewer nodes.
        float8: float8 matmuls for the blocks' linear layers through torchao:
            ``tensorwise`` or ``rowwise`` scaling (``off``: none). Needs an NVIDIA GPU
            with float8 tensor cores (compute capability 8.9+: H100, H200, L4, L40S);
            refused elsewhere. The LM head stays in bf16.
    """

    preset: str
    model: ModelConfig
    seq_len: int
    micro_batch_size: int
    steps: int
    learning_rate: float
    warmup_steps: int
    grad_accum_steps: int = 1
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 1337
    data_dir: str = DEFAULT_DATA_DIR
    corpus: str = str(DEFAULT_CORPUS)
    log_every: int = 10
    log_jsonl: str = ""
    ckpt_dir: str = ""
    ckpt_every: int = 0
    async_ckpt: bool = True
    ckpt_keep: int = 2
    metrics_port: int = 9500
    metrics_host: str = "0.0.0.0"
    tracking_uri: str = ""
    dtype: DType = "auto"
    tf32: Toggle = "auto"
    compile: Toggle = "auto"
    fused_adamw: Toggle = "auto"
    sdpa: bool = True
    pad_vocab: bool = True
    pin_memory: Toggle = "auto"
    no_sync_accum: bool = True
    parallelism: Parallelism = "ddp"
    engine: Engine = "torch"
    zero_stage: int = 2
    activation_checkpointing: bool = False
    global_batch_size: int = 0
    compile_mode: CompileMode = "default"
    compile_after_wrap: bool = True
    chunked_loss: Toggle = "auto"
    loss_chunk_tokens: int = 4096
    prefetch: Toggle = "auto"
    stop_check_every: int = 10
    tp: int = 1
    fault_kill_rank: int = -1
    fault_kill_at_step: int = 0
    fault_kill_node: bool = False
    float8: Float8 = "off"

    def __post_init__(self) -> None:
        check = Checker()
        positive = (
            "seq_len",
            "micro_batch_size",
            "grad_accum_steps",
            "steps",
            "log_every",
            "loss_chunk_tokens",
            "stop_check_every",
        )
        for name in positive:
            value = getattr(self, name)
            check.require(value >= 1, name, value, "must be a positive integer")
        check.require(
            self.seq_len <= self.model.block_size,
            "seq_len",
            self.seq_len,
            f"at most the model's block_size ({self.model.block_size})",
        )
        check.require(self.learning_rate > 0, "learning_rate", self.learning_rate, "> 0")
        check.require(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", self.min_lr_ratio, "in [0, 1]")
        check.require(self.warmup_steps >= 0, "warmup_steps", self.warmup_steps, ">= 0")
        check.require(self.weight_decay >= 0, "weight_decay", self.weight_decay, ">= 0")
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            check.require(0 <= value < 1, name, value, "in [0, 1)")
        check.require(self.grad_clip >= 0, "grad_clip", self.grad_clip, ">= 0 (0 disables)")
        check.require(self.ckpt_every >= 0, "ckpt_every", self.ckpt_every, ">= 0")
        check.require(self.ckpt_keep >= 1, "ckpt_keep", self.ckpt_keep, ">= 1")
        check.require(
            self.metrics_port == 0 or 1024 <= self.metrics_port <= 65535,
            "metrics_port",
            self.metrics_port,
            "0 (off) or a port in 1024-65535",
        )
        check.require(
            self.metrics_port != 9400,
            "metrics_port",
            self.metrics_port,
            "any port but 9400, which the DCGM exporter uses on GPU nodes",
        )
        check.require(
            _is_ip_address(self.metrics_host),
            "metrics_host",
            self.metrics_host,
            "an IP address to bind (127.0.0.1: this machine only; 0.0.0.0: every interface)",
        )
        for name, allowed in (
            ("dtype", DTYPES),
            ("tf32", TOGGLES),
            ("compile", TOGGLES),
            ("fused_adamw", TOGGLES),
            ("pin_memory", TOGGLES),
            ("chunked_loss", TOGGLES),
            ("prefetch", TOGGLES),
            ("parallelism", PARALLELISMS),
            ("engine", ENGINES),
            ("compile_mode", COMPILE_MODES),
            ("float8", FLOAT8_RECIPES),
        ):
            value = getattr(self, name)
            check.require(value in allowed, name, value, f"one of {', '.join(allowed)}")
        self._check_float8(check)
        check.require(bool(self.data_dir), "data_dir", self.data_dir, "a directory path")
        check.require(
            self.zero_stage in ZERO_STAGES, "zero_stage", self.zero_stage, "one of 1, 2, 3"
        )
        check.require(
            self.global_batch_size >= 0,
            "global_batch_size",
            self.global_batch_size,
            ">= 0 (0: micro-batch x grad accumulation x world size)",
        )
        if self.engine == "deepspeed":
            check.require(
                self.parallelism == "ddp",
                "parallelism",
                self.parallelism,
                "leave it at ddp with --engine deepspeed: DeepSpeed shards by --zero-stage",
            )
            # Not tested together: DeepSpeed's engine.compile() is left out rather than
            # shipped untried.
            check.require(
                self.compile != "on",
                "compile",
                self.compile,
                "off or auto with --engine deepspeed (the DeepSpeed engine runs eager)",
            )
        self._check_tp(check)
        check.require(
            self.fault_kill_at_step >= 0, "fault_kill_at_step", self.fault_kill_at_step, ">= 0"
        )
        # A server that is down is carried on from (the run is kept, untracked); a URI that
        # names no server is a typo, refused before any worker starts.
        check.require(
            not self.tracking_uri or _is_tracking_uri(self.tracking_uri),
            "tracking_uri",
            self.tracking_uri,
            "an MLflow server's http(s)://host:port URL (make track's: http://127.0.0.1:5000)"
            " or sqlite:///<file>.db",
        )
        check.done()

    def _check_tp(self, check: Checker) -> None:
        """``--tp``: whole heads per rank, whole sequence slices for the sequence-parallel
        norms, and an engine it combines with (the world size is checked at start)."""
        check.require(self.tp >= 1, "tp", self.tp, "must be a positive integer")
        if self.tp <= 1:
            return
        for name, value in (("n_head", self.model.n_head), ("seq_len", self.seq_len)):
            check.require(
                value % self.tp == 0,
                "tp",
                self.tp,
                f"a divisor of {name} ({value}): each rank takes whole "
                + ("heads" if name == "n_head" else "slices of the sequence"),
            )
        check.require(
            self.engine == "torch",
            "tp",
            self.tp,
            "1 with --engine deepspeed (tensor parallelism runs on the torch engine's FSDP2)",
        )
        check.require(
            self.chunked_loss != "on",
            "chunked_loss",
            self.chunked_loss,
            "off or auto with --tp > 1 (the TP LM head gathers its logits)",
        )

    def _check_float8(self, check: Checker) -> None:
        """``--float8`` runs on the torch engine without tensor parallelism: neither
        DeepSpeed's bf16 weights nor TP's sharded linear layers were tried with torchao's
        float8 casts (TP would need torchao's float8 parallel styles)."""
        if self.float8 == "off":
            return
        check.require(
            self.engine == "torch",
            "float8",
            self.float8,
            "off with --engine deepspeed (float8 runs on the torch engine)",
        )
        check.require(
            self.tp == 1,
            "float8",
            self.float8,
            "off with --tp > 1 (float8 is not combined with tensor parallelism)",
        )

    @property
    def tokens_per_micro_step(self) -> int:
        """Tokens one process consumes per micro-step."""
        return self.micro_batch_size * self.seq_len


def _is_tracking_uri(value: str) -> bool:
    """An http(s) URL with a host (and a port that is a number, if it has one), or a
    SQLite store's ``sqlite:///<file>`` (where the full MLflow is installed)."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError:
        return False
    if parts.scheme == "sqlite":
        return parts.path not in ("", "/")
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _is_ip_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _tiny() -> TrainConfig:
    # Small enough for two torchrun processes on two CPU cores to show a clearly
    # falling loss in well under a minute.
    return TrainConfig(
        preset="tiny",
        model=ModelConfig(n_layer=2, n_head=2, n_embd=64, block_size=128, vocab_size=256),
        seq_len=64,
        micro_batch_size=16,
        steps=150,
        learning_rate=3e-3,
        warmup_steps=10,
        log_every=10,
        weight_decay=0.0,
    )


def _small() -> TrainConfig:
    return TrainConfig(
        preset="small",
        model=ModelConfig(n_layer=4, n_head=4, n_embd=128, block_size=256, vocab_size=256),
        seq_len=128,
        micro_batch_size=16,
        steps=300,
        learning_rate=2e-3,
        warmup_steps=20,
        log_every=20,
    )


def _gpt2_124m() -> TrainConfig:
    # GPT-2 small as llm.c trains it: 0.5M tokens per optimizer step on one GPU
    # (32 x 1024 x 16 micro-steps); with N GPUs lower grad_accum_steps by N.
    return TrainConfig(
        preset="gpt2-124m",
        model=ModelConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257),
        seq_len=1024,
        micro_batch_size=32,
        grad_accum_steps=16,
        steps=19073,
        learning_rate=6e-4,
        warmup_steps=700,
        log_every=10,
    )


def _gpt2_350m() -> TrainConfig:
    return TrainConfig(
        preset="gpt2-350m",
        model=ModelConfig(n_layer=24, n_head=16, n_embd=1024, block_size=1024, vocab_size=50257),
        seq_len=1024,
        micro_batch_size=16,
        grad_accum_steps=32,
        steps=19073,
        learning_rate=3e-4,
        warmup_steps=700,
        log_every=10,
    )


PRESETS: Mapping[str, Callable[[], TrainConfig]] = {
    "tiny": _tiny,
    "small": _small,
    "gpt2-124m": _gpt2_124m,
    "gpt2-350m": _gpt2_350m,
}


def preset(name: str) -> TrainConfig:
    """The named preset's config; `InvalidArgsError` naming the presets otherwise."""
    if name not in PRESETS:
        raise InvalidArgsError([Problem("preset", name, f"one of {', '.join(PRESETS)}")])
    return PRESETS[name]()


# --- command-line overrides -----------------------------------------------------------

_MODEL_FIELDS = {f.name for f in dataclasses.fields(ModelConfig)}
_TRAIN_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)} - {"preset", "model"}
_TRUE = {"1", "true", "on", "yes"}
_FALSE = {"0", "false", "off", "no"}


def _coerce(raw: str, annotation: Any) -> object:
    """Convert a command-line string to a field's type; ValueError with the reason."""
    if annotation is bool:
        lowered = raw.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError("expected on/off (or true/false, 1/0)")
    if annotation is int:
        return int(raw)
    if annotation is float:
        return float(raw)
    if annotation is str:
        return raw
    if get_origin(annotation) is Literal:
        allowed = get_args(annotation)
        if raw not in allowed:
            raise ValueError(f"expected one of {', '.join(map(str, allowed))}")
        return raw
    raise ValueError(f"unsupported field type {annotation}")


def override(config: TrainConfig, values: Mapping[str, str]) -> TrainConfig:
    """A copy of ``config`` with fields (of it or its model) set from strings.

    Every unknown key and every unconvertible value is reported together.
    """
    model_hints = typing.get_type_hints(ModelConfig)
    train_hints = typing.get_type_hints(TrainConfig)
    problems: list[Problem] = []
    model_changes: dict[str, object] = {}
    train_changes: dict[str, object] = {}
    for key, raw in values.items():
        if key in _MODEL_FIELDS:
            target, hints = model_changes, model_hints
        elif key in _TRAIN_FIELDS:
            target, hints = train_changes, train_hints
        else:
            problems.append(Problem(key, raw, "not a training or model setting"))
            continue
        try:
            target[key] = _coerce(raw, hints[key])
        except ValueError as err:
            problems.append(Problem(key, raw, str(err)))
    model = config.model
    try:
        model = dataclasses.replace(config.model, **model_changes)  # type: ignore[arg-type]
    except InvalidArgsError as err:
        problems += err.problems
    try:
        updated = dataclasses.replace(config, model=model, **train_changes)  # type: ignore[arg-type]
    except InvalidArgsError as err:
        problems += err.problems
    if problems:
        raise InvalidArgsError(problems)
    return updated


def field_docs(cls: type) -> dict[str, str]:
    """Each field's description from the class docstring's ``Args:`` section."""
    docs: dict[str, str] = {}
    current = None
    in_args = False
    for line in (cls.__doc__ or "").splitlines():
        stripped = line.strip()
        if stripped == "Args:":
            in_args = True
            continue
        if not in_args or not stripped:
            continue
        name, sep, text = stripped.partition(": ")
        if (
            sep
            and name.isidentifier()
            and line.startswith(" " * 8)
            and not line.startswith(" " * 12)
        ):
            current = name
            docs[name] = text
        elif current:
            docs[current] += " " + stripped
    return docs


def add_override_arguments(parser: argparse.ArgumentParser) -> None:
    """``--preset`` plus one ``--kebab-case`` option per config field."""
    parser.add_argument("--preset", default="tiny", help=f"one of {', '.join(PRESETS)}")
    docs = field_docs(ModelConfig) | field_docs(TrainConfig)
    group = parser.add_argument_group("overrides (any setting of the preset; on/off for switches)")
    for name in sorted(_MODEL_FIELDS | _TRAIN_FIELDS):
        group.add_argument(
            f"--{name.replace('_', '-')}",
            dest=f"set_{name}",
            metavar="VALUE",
            help=docs.get(name, "").replace("``", "").replace("%", "%%"),
        )


def override_values(args: argparse.Namespace) -> dict[str, str]:
    """The ``--<field>`` overrides given on the command line (`add_override_arguments`):
    ``{field: value as typed}``."""
    return {
        key.removeprefix("set_"): value
        for key, value in vars(args).items()
        if key.startswith("set_") and value is not None
    }


def from_namespace(args: argparse.Namespace) -> TrainConfig:
    """The config selected and overridden by parsed `add_override_arguments` options."""
    return override(preset(args.preset), override_values(args))


def describe_problems(err: InvalidArgsError, what: str = "training config") -> str:
    """One screen naming every bad setting and what to use instead."""
    lines = [f"invalid {what}:"]
    lines += [
        f"  - --{p.field.replace('_', '-')}: got {p.value!r}; {p.expected}" for p in err.problems
    ]
    return "\n".join(lines)


def as_dict(config: TrainConfig) -> dict[str, object]:
    """The config as plain data (for logs and benchmark records)."""
    return dataclasses.asdict(config)
