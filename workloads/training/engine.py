"""The training machinery shared by `train` and `bench` (this package): resolving
the speed switches for a device, building and wrapping the model, the optimizer, the
learning-rate schedule, batches on the device, and one optimizer step."""

from __future__ import annotations

import contextlib
import math
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from modules.validation import InvalidArgsError, Problem
from workloads.data.shards import LoaderState, ShardLoader
from workloads.training import compat, float8
from workloads.training.config import TrainConfig
from workloads.training.distributed import Topology
from workloads.training.model import GPT


def cpu_supports_bf16() -> bool:
    """Whether this CPU has native bf16 instructions (AVX512-BF16 or AMX)."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


@dataclass(frozen=True)
class Resolved:
    """The speed switches as they apply on this device (``auto`` decided)."""

    device: torch.device
    amp_dtype: torch.dtype | None
    tf32: bool
    compile: bool
    fused_adamw: bool
    sdpa: bool
    pad_vocab: bool
    pin_memory: bool
    no_sync_accum: bool
    parallelism: str
    compile_mode: str = "default"
    compile_after_wrap: bool = True
    loss_chunk: int = 0
    prefetch: bool = False
    engine: str = "torch"
    zero_stage: int = 0
    activation_checkpointing: bool = False
    #: Named ranges around forward, backward and the optimizer step (profiler
    #: `record_function`s, and NVTX ranges for Nsight on CUDA); `profile` turns it on.
    annotate: bool = False

    @property
    def uses_cuda_graphs(self) -> bool:
        return self.compile and self.compile_mode in ("reduce-overhead", "max-autotune")

    def describe(self) -> str:
        precision = "fp32"
        if self.amp_dtype is torch.bfloat16:
            # DeepSpeed's bf16 mode holds the weights in bf16 (fp32 master copies in
            # its optimizer); the torch engine autocasts fp32 weights.
            precision = "bf16 weights" if self.engine == "deepspeed" else "bf16 autocast"
        flags = {
            "tf32": self.tf32,
            "compile": self.compile,
            "fused_adamw": self.fused_adamw,
            "sdpa": self.sdpa,
            "pad_vocab": self.pad_vocab,
            "pin_memory": self.pin_memory,
            "no_sync_accum": self.no_sync_accum,
            "chunked_loss": bool(self.loss_chunk),
            "prefetch": self.prefetch,
            "activation_checkpointing": self.activation_checkpointing,
        }
        on = ",".join(name for name, value in flags.items() if value) or "none"
        mode = (
            f", compile mode {self.compile_mode}"
            if self.compile and self.compile_mode != "default"
            else ""
        )
        return f"{self.device.type} {precision}, on: {on}{mode}"

    @property
    def strategy(self) -> str:
        """How the model is spread over ranks: ``ddp``, ``fsdp2`` or ``deepspeed zero-N``."""
        if self.engine == "deepspeed":
            return f"deepspeed zero-{self.zero_stage}"
        return self.parallelism


def resolve(config: TrainConfig, device: torch.device) -> Resolved:
    """Decide every ``auto`` switch for ``device``; `InvalidArgsError` for a switch the
    device cannot honour (bf16 on a CPU without bf16 instructions)."""
    cuda = device.type == "cuda"

    def toggle(value: str, auto: bool) -> bool:
        return auto if value == "auto" else value == "on"

    bf16_ok = torch.cuda.is_bf16_supported() if cuda else cpu_supports_bf16()
    if config.dtype == "bf16" and not bf16_ok:
        raise InvalidArgsError(
            [Problem("dtype", "bf16", f"this {device.type} has no native bf16; use fp32")]
        )
    use_bf16 = config.dtype == "bf16" or (config.dtype == "auto" and cuda and bf16_ok)
    deepspeed = config.engine == "deepspeed"
    return Resolved(
        device=device,
        amp_dtype=torch.bfloat16 if use_bf16 else None,
        tf32=cuda and toggle(config.tf32, True),
        # The DeepSpeed engine runs eager (config.py refuses --compile on with it).
        compile=toggle(config.compile, cuda) and not deepspeed,
        fused_adamw=toggle(config.fused_adamw, cuda),
        sdpa=config.sdpa,
        pad_vocab=config.pad_vocab,
        pin_memory=cuda and toggle(config.pin_memory, True),
        # DeepSpeed decides when gradients are reduced itself.
        no_sync_accum=config.no_sync_accum and not deepspeed,
        parallelism=config.parallelism,
        compile_mode=config.compile_mode,
        compile_after_wrap=config.compile_after_wrap,
        # Not under TP (config.py refuses it on): the TP LM head gathers its logits.
        loss_chunk=config.loss_chunk_tokens
        if toggle(config.chunked_loss, cuda and config.tp == 1)
        else 0,
        prefetch=toggle(config.prefetch, cuda),
        engine=config.engine,
        zero_stage=config.zero_stage if deepspeed else 0,
        activation_checkpointing=config.activation_checkpointing,
    )


def apply_backend_flags(resolved: Resolved) -> None:
    """Process-wide math settings: TF32 for fp32 matmuls (and cuDNN) on CUDA."""
    torch.set_float32_matmul_precision("high" if resolved.tf32 else "highest")
    if resolved.device.type == "cuda":
        torch.backends.cudnn.allow_tf32 = resolved.tf32


def build_model(config: TrainConfig, resolved: Resolved) -> GPT:
    """The model, seeded from ``config.seed`` so every rank starts identical."""
    torch.manual_seed(config.seed)
    model = GPT(
        config.model,
        use_sdpa=resolved.sdpa,
        pad_vocab=resolved.pad_vocab,
        loss_chunk=resolved.loss_chunk,
        activation_checkpointing=resolved.activation_checkpointing,
    )
    # Float8 matmuls (torchao) replace the blocks' linear layers before any wrapping.
    float8.apply(model, config.float8, resolved.device)
    return model.to(resolved.device)


def _compile(module: nn.Module, resolved: Resolved) -> None:
    """``torch.compile`` in place (state-dict keys stay those of the plain model)."""
    if resolved.compile_mode == "default":
        module.compile()
    else:
        module.compile(mode=resolved.compile_mode)


def parallelize(model: GPT, resolved: Resolved, topology: Topology) -> nn.Module:
    """Compile and wrap for data parallelism: DDP, or FSDP2 with each block sharded.

    Under DDP with ``compile_after_wrap`` the DDP module is compiled: TorchDynamo's
    DDP optimizer then splits the graph at the gradient buckets' boundaries so each
    bucket's all-reduce starts while the backward of the earlier layers still runs.
    Compiling the bare model first (the old order) gives one backward graph whose
    gradients all become ready at its end, so no all-reduce overlaps computation.
    """
    if resolved.parallelism == "fsdp2" and topology.distributed:
        api = compat.fsdp_api()
        policy = api.mixed_precision_policy(
            param_dtype=resolved.amp_dtype, reduce_dtype=torch.float32
        )
        for block in model.blocks:
            if resolved.compile:
                _compile(block, resolved)
            api.fully_shard(block, mp_policy=policy)
        api.fully_shard(model, mp_policy=policy)
        return model
    if not topology.distributed:
        if resolved.compile:
            _compile(model, resolved)
        return model
    device_ids = [resolved.device.index] if resolved.device.type == "cuda" else None
    if resolved.compile and not resolved.compile_after_wrap:
        _compile(model, resolved)
    wrapped = DistributedDataParallel(model, device_ids=device_ids)
    if resolved.compile and resolved.compile_after_wrap:
        _compile(wrapped, resolved)
    return wrapped


def build_optimizer(model: nn.Module, config: TrainConfig, resolved: Resolved) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases and norm gains)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups,
        lr=config.learning_rate,
        betas=(config.beta1, config.beta2),
        eps=1e-8,
        fused=True if resolved.fused_adamw else None,
    )


def learning_rate(step: int, config: TrainConfig) -> float:
    """Linear warm-up to the peak, then cosine decay to ``min_lr_ratio`` of it.
    ``step`` counts from 1 (the step being taken)."""
    peak = config.learning_rate
    if config.warmup_steps and step <= config.warmup_steps:
        return peak * step / config.warmup_steps
    span = max(1, config.steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    floor = peak * config.min_lr_ratio
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


_HostBatch = tuple[Tensor, Tensor, LoaderState]


class DeviceBatches:
    """Batches from a `ShardLoader`, moved to the device (pinned and non-blocking on
    CUDA so the copy overlaps the previous step's kernels).

    With ``prefetch`` a background thread reads, converts and pins the next batch
    while the current micro-step runs; the batches and their order are exactly those
    without it. `state` is the loader position after the last batch handed out (not
    after the one prefetched), which is what a checkpoint must record.
    """

    def __init__(self, loader: ShardLoader, resolved: Resolved) -> None:
        self.loader = loader
        self.device = resolved.device
        self.pin = resolved.pin_memory
        self.prefetch = resolved.prefetch
        self._state = loader.state
        self._pending: Future[_HostBatch] | None = None
        self._pool: ThreadPoolExecutor | None = None

    @property
    def state(self) -> LoaderState:
        """Where a run resumed from a checkpoint taken now must continue."""
        return self._state

    def load_state(self, state: LoaderState) -> None:
        """Continue from ``state`` (drops a batch already prefetched)."""
        self._drain()
        self.loader.load_state(state)
        self._state = self.loader.state

    def _read(self) -> _HostBatch:
        inputs, targets = self.loader.next_batch()
        if self.pin:
            inputs, targets = inputs.pin_memory(), targets.pin_memory()
        return inputs, targets, self.loader.state

    def _read_in_thread(self) -> _HostBatch:
        if self.device.type == "cuda":
            # Pinning from a thread whose current device is GPU 0 would create a
            # context there; pin on this rank's GPU, as DataLoader's pin thread does.
            torch.cuda.set_device(self.device)
        return self._read()

    def _drain(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def next(self) -> tuple[Tensor, Tensor]:
        if not self.prefetch:
            inputs, targets, self._state = self._read()
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
                # The thread ends with this object even where nobody calls close().
                weakref.finalize(self, self._pool.shutdown, wait=False)
            if self._pending is None:
                self._pending = self._pool.submit(self._read_in_thread)
            inputs, targets, self._state = self._pending.result()
            self._pending = self._pool.submit(self._read_in_thread)
        if self.device.type == "cpu":
            return inputs, targets
        return (
            inputs.to(self.device, non_blocking=self.pin),
            targets.to(self.device, non_blocking=self.pin),
        )

    def close(self) -> None:
        """Stop the prefetch thread (idempotent)."""
        self._drain()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _is_fsdp(model: nn.Module) -> bool:
    try:
        return isinstance(model, compat.fsdp_api().fsdp_module)
    except ImportError:
        return False


@contextlib.contextmanager
def _gradient_sync(model: nn.Module, sync: bool) -> Iterator[None]:
    """Skip the gradient all-reduce (DDP) or reduce-scatter (FSDP2) when not ``sync``."""
    if isinstance(model, DistributedDataParallel) and not sync:
        with model.no_sync():
            yield
    elif _is_fsdp(model):
        cast(Any, model).set_requires_gradient_sync(sync)
        yield
    else:
        yield


@contextlib.contextmanager
def step_range(name: str, resolved: Resolved) -> Iterator[None]:
    """A named range of the step (``forward``, ``backward``, ``optimizer``) in the
    profiler's trace and, on CUDA, an NVTX range Nsight Systems shows; nothing unless
    ``resolved.annotate``."""
    if not resolved.annotate:
        yield
        return
    cuda = resolved.device.type == "cuda"
    with torch.profiler.record_function(name):
        if cuda:
            torch.cuda.nvtx.range_push(name)  # type: ignore[no-untyped-call]
        try:
            yield
        finally:
            if cuda:
                torch.cuda.nvtx.range_pop()  # type: ignore[no-untyped-call]


@dataclass
class StepResult:
    """One optimizer step: its loss (mean over micro-steps, still on the device) and
    the host time spent waiting for batches."""

    loss: Tensor
    data_wait_s: float


def train_step(
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: DeviceBatches,
    config: TrainConfig,
    resolved: Resolved,
    step: int,
) -> StepResult:
    """Run ``grad_accum_steps`` micro-steps and one optimizer step."""
    accum = config.grad_accum_steps
    loss_sum = torch.zeros((), device=resolved.device)
    data_wait = 0.0
    autocast = torch.autocast(
        device_type=resolved.device.type,
        dtype=resolved.amp_dtype or torch.bfloat16,
        enabled=resolved.amp_dtype is not None,
    )
    if resolved.uses_cuda_graphs:
        preallocate_grads(model)
    for micro in range(accum):
        started = time.perf_counter()
        inputs, targets = batches.next()
        data_wait += time.perf_counter() - started
        last = micro == accum - 1
        if resolved.uses_cuda_graphs:
            compat.cudagraph_mark_step_begin()
        with _gradient_sync(model, last or not resolved.no_sync_accum):
            with step_range("forward", resolved), autocast:
                loss = model(inputs, targets) / accum
            with step_range("backward", resolved):
                loss.backward()  # outside autocast, as the AMP recipe has it
        loss_sum += loss.detach()
    with step_range("optimizer", resolved):
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        lr = learning_rate(step, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        # Under CUDA graphs the gradients stay allocated (zeroed, not freed): see
        # `preallocate_grads`.
        optimizer.zero_grad(set_to_none=not resolved.uses_cuda_graphs)
    return StepResult(loss_sum, data_wait)


def preallocate_grads(model: nn.Module) -> None:
    """Give every trainable parameter a zero ``.grad`` of its own where it has none.

    CUDA graphs (the ``reduce-overhead`` and ``max-autotune`` compile modes) own the
    memory of their outputs and overwrite it at the next replay. When a parameter's
    ``.grad`` is None, autograd's AccumulateGrad keeps the backward graph's output
    tensor itself as ``.grad``; with gradient accumulation the next micro-step's
    replay then overwrites it and the backward fails ("accessing tensor output of
    CUDAGraphs that has been overwritten by a subsequent run", seen on an H100 with
    32x16 micro-steps, and not with 32x1). A ``.grad`` allocated outside the graphs is
    accumulated into in place instead.
    """
    for param in model.parameters():
        if param.requires_grad and param.grad is None:
            param.grad = torch.zeros_like(param)


#: One optimizer step of a set-up model: ``(batches, config, step) -> StepResult``.
StepFn = Callable[[DeviceBatches, TrainConfig, int], StepResult]


@dataclass
class Training:
    """A model set up to train, whichever engine holds it: what `train`, `bench` and
    `profile` drive.

    Args:
        model: the wrapped model (DDP, FSDP2 or compiled module; DeepSpeed's engine).
        optimizer: its optimizer (DeepSpeed's ZeRO optimizer under DeepSpeed).
        num_params: distinct parameters of the unwrapped model.
        step: runs one optimizer step (``grad_accum_steps`` micro-steps).
        close: releases what setting up took (a process group DeepSpeed needed).
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    num_params: int
    step: StepFn
    close: Callable[[], None]


def setup_torch(
    config: TrainConfig,
    resolved: Resolved,
    topology: Topology,
    wrap: Callable[[GPT], nn.Module] | None = None,
) -> Training:
    """The torch engine: build the model, wrap it (DDP, FSDP2, compile) as
    ``resolved`` says, or with ``wrap`` (tensor parallelism), and give it its optimizer."""
    raw = build_model(config, resolved)
    num_params = raw.num_parameters()  # before any split: the whole model's
    model = wrap(raw) if wrap is not None else parallelize(raw, resolved, topology)
    optimizer = build_optimizer(model, config, resolved)

    def step(batches: DeviceBatches, current: TrainConfig, number: int) -> StepResult:
        return train_step(
            model=model,
            optimizer=optimizer,
            batches=batches,
            config=current,
            resolved=resolved,
            step=number,
        )

    return Training(model, optimizer, num_params, step, lambda: None)
