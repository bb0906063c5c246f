"""The memory plan of a training job: per-GPU memory of a model and layout, before it runs.

Pure Python (the plan's environment has no torch): the model's dimensions come from a
preset (`workloads.training.config`) or a Hugging Face ``config.json``
(`ModelDims.from_hf_config`), the GPU's memory from the pool's instance-type data
(``NodePoolProfile.gpu_memory_gib``). `estimate` adds, per GPU:

- weights: fp32 parameters (the trainer keeps fp32 weights and autocasts), split by
  ``tp`` and, under FSDP2 / ZeRO-3, by the data-parallel size; FSDP2 adds the bf16
  (``param_dtype``) copies of the blocks it has gathered (the current one and the one
  it prefetches);
- gradients: fp32, the same split (ZeRO-2 also shards them); DDP holds them twice
  (the gradients and its all-reduce buckets);
- optimizer state: AdamW's two fp32 moments per parameter, split by ``tp`` and by the
  data-parallel size under FSDP2 and ZeRO 1-3;
- activations: what each block keeps for its backward pass, counted tensor by tensor
  for the trainer's block (`workloads.training.model`: pre-norm, ``c_attn`` then SDPA,
  GELU MLP, or a gated MLP for Llama-style configs): in ``bsh`` units (micro-batch x
  sequence x width) 17 fp32 tensors per block, or under bf16 autocast 38 bytes (the
  residual stream and its norms' inputs stay fp32, the matmul inputs and outputs are
  bf16); the weights' bf16 autocast copies the matmuls save; with activation
  checkpointing only each block's input plus one block recomputed; and the loss: the
  logits and their log-softmax in fp32 (``2 x b x s x vocab x 4`` bytes), or with the
  chunked loss one chunk of them.

Under ``tp`` with sequence parallelism every block tensor is split by ``tp`` except the
two norm outputs the column-wise layers gather (they are saved whole).

The estimate is checked against the live tensor bytes of real CPU training steps
(``tests/workloads/test_memory_plan.py``: within 20% for ``tiny`` and ``small``, with
and without activation checkpointing; BENCHMARKS.md). It leaves out what is not a
tensor of the step: the CUDA context, NCCL's buffers, the caching allocator's
fragmentation. `fits` keeps `HEADROOM_FRACTION` of the GPU and `RESERVED_GIB` free for
them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from workloads.training.config import PRESETS, ModelConfig, TrainConfig, preset

GIB = 1024**3
#: Bytes per element: fp32 weights, gradients and moments; bf16 autocast copies.
FP32, BF16 = 4, 2
#: The share of a GPU a plan may fill: the rest is for the allocator's fragmentation
#: (PyTorch's caching allocator rounds and splits blocks; 5-10% is typical in its
#: memory snapshots) and what the estimate does not count.
HEADROOM_FRACTION = 0.9
#: Taken off every GPU before that: the CUDA context and kernels (0.5-1 GiB on Hopper)
#: and NCCL's communicator buffers.
RESERVED_GIB = 1.5

Strategy = Literal["ddp", "fsdp2", "zero1", "zero2", "zero3"]
STRATEGIES: tuple[str, ...] = ("ddp", "fsdp2", "zero1", "zero2", "zero3")


@dataclass(frozen=True)
class ModelDims:
    """What the estimate needs of a decoder's shape.

    Args:
        layers: transformer blocks.
        heads: attention heads.
        kv_heads: key/value heads (grouped-query attention; ``heads`` without it).
        width: the residual stream's width.
        ffn: the MLP's hidden width.
        vocab: vocabulary rows of the embedding (padded as the model pads them).
        positions: rows of a learned position embedding (0: rotary).
        gated: a gated (SwiGLU) MLP: three matrices, as in Llama.
        tied: the LM head shares the embedding's matrix.
        biases: the linear layers have biases (GPT-2) and the norms are LayerNorms.
    """

    layers: int
    heads: int
    kv_heads: int
    width: int
    ffn: int
    vocab: int
    positions: int = 0
    gated: bool = False
    tied: bool = True
    biases: bool = True

    @classmethod
    def from_model_config(cls, config: ModelConfig, pad_vocab: bool = True) -> ModelDims:
        """The trainer's GPT (`workloads.training.model.GPT`) of ``config``."""
        return cls(
            layers=config.n_layer,
            heads=config.n_head,
            kv_heads=config.n_head,
            width=config.n_embd,
            ffn=4 * config.n_embd,
            vocab=config.padded_vocab_size(pad_vocab),
            positions=config.block_size,
        )

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> ModelDims:
        """A Hugging Face ``config.json``: GPT-2 (``n_layer``, ``n_head``, ``n_embd``,
        ``n_inner``, ``n_positions``) or Llama-style (``num_hidden_layers``,
        ``num_attention_heads``, ``num_key_value_heads``, ``hidden_size``,
        ``intermediate_size``, ``tie_word_embeddings``); ValueError naming a missing key."""

        def first(*names: str, default: int | None = None) -> int:
            for name in names:
                if config.get(name) is not None:
                    return int(config[name])
            if default is None:
                raise ValueError(f"config.json has none of {', '.join(names)}")
            return default

        width = first("hidden_size", "n_embd", "d_model")
        heads = first("num_attention_heads", "n_head")
        gpt2 = "n_embd" in config and "hidden_size" not in config
        return cls(
            layers=first("num_hidden_layers", "n_layer"),
            heads=heads,
            kv_heads=first("num_key_value_heads", "n_head_kv", default=heads),
            width=width,
            ffn=first("intermediate_size", "n_inner", "ffn_dim", default=4 * width),
            vocab=first("vocab_size"),
            positions=first("n_positions", default=0) if gpt2 else 0,
            gated=not gpt2 and str(config.get("hidden_act", "silu")) in ("silu", "swiglu"),
            tied=bool(config.get("tie_word_embeddings", gpt2)),
            biases=gpt2 or bool(config.get("attention_bias", False)),
        )

    @property
    def kv_width(self) -> int:
        return self.width * self.kv_heads // self.heads

    def block_params(self) -> int:
        """Parameters of one block (its matrices, biases and norms)."""
        h, kv, f = self.width, self.kv_width, self.ffn
        attn = h * (h + 2 * kv) + h * h
        mlp = (3 if self.gated else 2) * h * f
        biases = (h + 2 * kv) + h + f + h if self.biases else 0
        norms = 2 * (2 * h if self.biases else h)
        return attn + mlp + biases + norms

    def params(self) -> int:
        """Distinct parameters of the whole model."""
        embed = self.vocab * self.width * (1 if self.tied else 2)
        final_norm = 2 * self.width if self.biases else self.width
        return self.layers * self.block_params() + embed + self.positions * self.width + final_norm


@dataclass(frozen=True)
class Layout:
    """How a job spreads over its GPUs, and what each step holds.

    Args:
        gpus: GPUs (processes) in the job: nodes x GPUs per node.
        strategy: the data-parallel sharding: ``ddp``, ``fsdp2`` or DeepSpeed's
            ``zero1``-``zero3``. Under ``tp`` > 1 the trainer always uses FSDP2.
        tp: tensor-parallel degree (inside a node).
        micro_batch: sequences per GPU per micro-step.
        seq_len: tokens per sequence.
        bf16: bf16 autocast (the trainer's default on GPUs); fp32 otherwise.
        activation_checkpointing: recompute each block in the backward pass.
        loss_chunk: rows of logits computed at once by the chunked loss (0: the full
            logits).
        grad_accum: micro-steps per optimizer step.
    """

    gpus: int
    strategy: Strategy
    tp: int
    micro_batch: int
    seq_len: int
    bf16: bool
    activation_checkpointing: bool = False
    loss_chunk: int = 0
    grad_accum: int = 1

    @property
    def dp(self) -> int:
        return max(1, self.gpus // self.tp)

    def describe(self) -> str:
        parts = [f"{self.gpus} GPU(s)", self.strategy if self.tp == 1 else "fsdp2"]
        if self.tp > 1:
            parts.append(f"tp {self.tp}")
        parts.append(f"micro-batch {self.micro_batch} x {self.seq_len} tokens")
        parts.append("bf16" if self.bf16 else "fp32")
        parts.append("activation checkpointing" if self.activation_checkpointing else "no AC")
        return ", ".join(parts)

    def flags(self) -> str:
        """The trainer arguments that select this layout."""
        args = [f"--micro-batch-size {self.micro_batch}"]
        if self.tp > 1:
            args.append(f"--tp {self.tp}")
        elif self.strategy == "fsdp2":
            args.append("--parallelism fsdp2")
        elif self.strategy.startswith("zero"):
            args.append(f"--engine deepspeed --zero-stage {self.strategy[-1]}")
        if self.activation_checkpointing:
            args.append("--activation-checkpointing on")
        return " ".join(args)


@dataclass(frozen=True)
class Estimate:
    """Per-GPU bytes of one training step, by what holds them.

    Args:
        weights: parameters (and FSDP2's gathered copies).
        gradients: gradients (and DDP's buckets).
        optimizer: AdamW's moments.
        activations: what the forward pass keeps for the backward pass, and the loss.
        total: the peak. The gradients are freed after each optimizer step
            (``zero_grad(set_to_none=True)``) and grow as the backward pass frees
            activations, so with one micro-step the peak holds the larger of the two,
            plus DDP's buckets (allocated once); with gradient accumulation the
            gradients of the earlier micro-steps live through the next forward pass,
            and the peak holds both.
    """

    weights: int
    gradients: int
    optimizer: int
    activations: int
    total: int

    def describe(self) -> str:
        def gib(n: int) -> str:
            return f"{n / GIB:.1f}"

        return (
            f"{gib(self.total)} GiB per GPU (weights {gib(self.weights)}, gradients "
            f"{gib(self.gradients)}, optimizer {gib(self.optimizer)}, activations "
            f"{gib(self.activations)})"
        )


def _activation_bytes(dims: ModelDims, layout: Layout) -> int:
    """Bytes the forward pass keeps for the backward pass, at its peak (the start of
    the backward pass), per GPU."""
    tp = layout.tp
    b, s = layout.micro_batch, layout.seq_len
    bsh = b * s * dims.width
    kv_share = dims.kv_width / dims.width
    ffn_share = dims.ffn / dims.width
    # The tensors one block saves, in bsh units: (fp32 bytes, bf16-autocast bytes, split).
    # Split: whole under TP (the norm outputs the column-wise layers all-gather), or
    # divided by tp (everything else: sequence-parallel or head/column shards).
    ffn_tensors = (3 if dims.gated else 2) * ffn_share + (ffn_share if dims.gated else 0)
    saved = [
        (FP32, FP32, True),  # the block's input, saved by the first norm
        (FP32, BF16, False),  # the first norm's output, the q/k/v projection's input
        ((1 + 2 * kv_share) * FP32, (1 + 2 * kv_share) * BF16, True),  # q, k, v
        (FP32, BF16, True),  # attention output (SDPA's saved output)
        (FP32, BF16, True),  # its transposed copy, the output projection's input
        (FP32, FP32, True),  # the residual after attention, the second norm's input
        (FP32, BF16, False),  # the second norm's output, the MLP's input
        (ffn_tensors * FP32, ffn_tensors * BF16, True),  # MLP hidden (and gate)
    ]
    per_block = 0.0
    for fp32_bytes, bf16_bytes, split in saved:
        size = (bf16_bytes if layout.bf16 else fp32_bytes) * bsh
        per_block += size / tp if split else size
    final_norm = 2 * FP32 * bsh / tp
    rows = b * s
    if layout.loss_chunk:
        # Chunked loss: the hidden states' gradient, the head's fp32 gradient and a
        # chunk of fp32 logits with its softmax.
        loss = (
            FP32 * bsh
            + FP32 * dims.vocab * dims.width
            + 3 * FP32 * min(rows, layout.loss_chunk) * dims.vocab
        )
    else:
        # The log-softmax saved by cross_entropy and, at the start of the backward
        # pass, its gradient: both fp32 and whole on every rank (the TP head gathers).
        loss = 2 * FP32 * rows * dims.vocab
    # Under autocast each matmul saves the bf16 copy of its weight (FSDP2 frees those
    # after the forward pass and gathers again for the backward pass).
    casts = 0.0
    if layout.bf16 and layout.strategy != "fsdp2" and layout.tp == 1:
        casts = BF16 * dims.params()
    if not layout.activation_checkpointing:
        # The peak is the start of the backward pass: every block's tensors and the loss's.
        return math.ceil(dims.layers * per_block + final_norm + loss + casts)
    # Each block keeps only its input. The peak is the larger of the end of the forward
    # pass (the inputs, the final norm and the loss) and the recomputation of a block in
    # the backward pass (the inputs, one block's tensors and the gradient flowing
    # through the residual stream, two fp32 bsh; the loss's are freed by then).
    inputs = dims.layers * FP32 * bsh / tp
    recompute = per_block + 2 * FP32 * bsh / tp
    return math.ceil(inputs + max(final_norm + loss, recompute) + casts)


def estimate(dims: ModelDims, layout: Layout) -> Estimate:
    """Per-GPU memory of training ``dims`` in ``layout`` with AdamW."""
    params = dims.params()
    tp, dp = layout.tp, layout.dp
    strategy: str = "fsdp2" if tp > 1 else layout.strategy
    shard_weights = dp if strategy in ("fsdp2", "zero3") else 1
    shard_grads = dp if strategy in ("fsdp2", "zero2", "zero3") else 1
    shard_optim = 1 if strategy == "ddp" else dp
    local = params / tp
    weights = FP32 * local / shard_weights
    if strategy == "fsdp2" and dp > 1:
        # The gathered bf16 (or fp32) copy of the current block and the prefetched one.
        weights += 2 * (BF16 if layout.bf16 else FP32) * dims.block_params() / tp
    gradients = FP32 * local / shard_grads
    # DDP's buckets: a second copy, allocated once and kept.
    buckets = gradients if strategy == "ddp" and dp > 1 else 0
    optimizer = 2 * FP32 * local / shard_optim
    activations = _activation_bytes(dims, layout)
    live = gradients + activations if layout.grad_accum > 1 else max(gradients, activations)
    return Estimate(
        weights=math.ceil(weights),
        gradients=math.ceil(gradients + buckets),
        optimizer=math.ceil(optimizer),
        activations=activations,
        total=math.ceil(weights + optimizer + buckets + live),
    )


def usable_bytes(gpu_memory_gib: float) -> int:
    """What a plan may fill of a GPU of ``gpu_memory_gib``."""
    return int((gpu_memory_gib * HEADROOM_FRACTION - RESERVED_GIB) * GIB)


def fits(dims: ModelDims, layout: Layout, gpu_memory_gib: float) -> bool:
    return estimate(dims, layout).total <= usable_bytes(gpu_memory_gib)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def alternatives(dims: ModelDims, layout: Layout, gpus_per_node: int) -> Iterator[Layout]:
    """Layouts of the same job on the same GPUs, least change first: activation
    checkpointing, then sharding (FSDP2), then TP inside a node (a divisor of the GPUs
    per node that divides the heads and the sequence), then halving the micro-batch
    (the trainer's gradient accumulation then keeps the global batch)."""
    tps = [
        t
        for t in _divisors(gpus_per_node)
        if t >= layout.tp
        and dims.heads % t == 0
        and layout.seq_len % t == 0
        and layout.gpus % t == 0
    ]
    micro_batches = []
    micro = layout.micro_batch
    while micro >= 1:
        micro_batches.append(micro)
        micro //= 2
    strategies: list[Strategy] = [layout.strategy]
    if layout.strategy != "fsdp2":
        strategies.append("fsdp2")
    sharded: list[Strategy] = ["fsdp2"]  # under TP the trainer always shards with FSDP2
    for micro in micro_batches:
        for tp in tps:
            for strategy in strategies if tp == 1 else sharded:
                for ac in sorted({layout.activation_checkpointing, True}):
                    yield dataclasses.replace(
                        layout,
                        micro_batch=micro,
                        tp=tp,
                        strategy=strategy,
                        activation_checkpointing=ac,
                    )


def fitting_layout(
    dims: ModelDims, layout: Layout, gpu_memory_gib: float, gpus_per_node: int
) -> Layout | None:
    """The first of `alternatives` that fits, or None."""
    for candidate in alternatives(dims, layout, gpus_per_node):
        if fits(dims, candidate, gpu_memory_gib):
            return candidate
    return None


def layout_of(config: TrainConfig, gpus: int, *, cuda: bool = True) -> Layout:
    """The layout the trainer would run ``config`` in on ``gpus`` processes, deciding its
    ``auto`` switches as on a GPU (``cuda``) or a CPU."""
    bf16 = config.dtype == "bf16" or (config.dtype == "auto" and cuda)
    chunked = config.chunked_loss == "on" or (
        config.chunked_loss == "auto" and cuda and config.tp == 1
    )
    strategy: Strategy
    if config.engine == "deepspeed":
        strategy = {1: "zero1", 2: "zero2", 3: "zero3"}[config.zero_stage]  # type: ignore[assignment]
    else:
        strategy = config.parallelism
    return Layout(
        gpus=gpus,
        strategy=strategy,
        tp=config.tp,
        micro_batch=config.micro_batch_size,
        seq_len=config.seq_len,
        bf16=bf16,
        activation_checkpointing=config.activation_checkpointing,
        loss_chunk=config.loss_chunk_tokens if chunked else 0,
        grad_accum=config.grad_accum_steps,
    )


def plan_problem(
    config: TrainConfig, *, gpus: int, gpus_per_node: int, gpu_memory_gib: float, where: str
) -> str | None:
    """Why ``config`` on ``gpus`` GPUs of ``gpu_memory_gib`` does not fit, with the
    estimate and a layout that would (or what to change when none does); None when
    it fits."""
    dims = ModelDims.from_model_config(config.model, config.pad_vocab)
    layout = layout_of(config, gpus)
    needed = estimate(dims, layout)
    usable = usable_bytes(gpu_memory_gib)
    if needed.total <= usable:
        return None
    message = (
        f"preset {config.preset} in layout ({layout.describe()}) needs about "
        f"{needed.describe()}; {where} has {gpu_memory_gib:g} GiB per GPU, of which a "
        f"plan may use {usable / GIB:.1f}"
    )
    better = fitting_layout(dims, layout, gpu_memory_gib, gpus_per_node)
    if better is None:
        return message + "; no layout on these GPUs fits: use a pool with larger GPUs or more nodes"
    return (
        message + f"; this layout fits: {better.describe()} ({estimate(dims, better).describe()}),"
        f" trainer arguments: {better.flags()}"
    )


def _usage(message: str) -> int:
    print(f"memory: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m modules.k8s.trainer.memory --preset gpt2-124m --gpu-memory-gib 24``:
    the estimate of a preset or a Hugging Face ``config.json`` in a layout."""
    parser = argparse.ArgumentParser(prog="python -m modules.k8s.trainer.memory")
    parser.add_argument("--preset", default="gpt2-124m")
    parser.add_argument("--hf-config", help="a Hugging Face config.json (its dimensions)")
    parser.add_argument("--gpu-memory-gib", type=float, default=80.0)
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--strategy", choices=STRATEGIES, default="ddp")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--micro-batch", type=int)
    parser.add_argument("--seq-len", type=int)
    parser.add_argument("--fp32", action="store_true")
    parser.add_argument("--activation-checkpointing", action="store_true")
    args = parser.parse_args(argv)
    if args.preset not in PRESETS:
        return _usage(f"--preset: got {args.preset!r}; one of {', '.join(PRESETS)}")
    for name in ("gpus", "gpus_per_node", "tp", "micro_batch", "seq_len"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return _usage(f"--{name.replace('_', '-')}: got {value}; a positive integer")
    if args.gpus % args.tp:
        return _usage(f"--tp: got {args.tp}; a divisor of --gpus ({args.gpus})")
    if args.gpu_memory_gib <= 0:
        return _usage(f"--gpu-memory-gib: got {args.gpu_memory_gib:g}; the GPU's memory in GiB")
    config = preset(args.preset)
    dims = ModelDims.from_model_config(config.model)
    if args.hf_config:
        try:
            dims = ModelDims.from_hf_config(json.loads(Path(args.hf_config).read_text()))
        except (OSError, ValueError) as err:
            return _usage(f"--hf-config: {args.hf_config}: {err}")
    layout = Layout(
        gpus=args.gpus,
        strategy=args.strategy,
        tp=args.tp,
        micro_batch=args.micro_batch or config.micro_batch_size,
        seq_len=args.seq_len or config.seq_len,
        bf16=not args.fp32,
        activation_checkpointing=args.activation_checkpointing,
    )
    result = estimate(dims, layout)
    fit = "fits" if fits(dims, layout, args.gpu_memory_gib) else "does not fit"
    print(f"{dims.params() / 1e6:.1f}M params, {layout.describe()}: {result.describe()}; {fit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
