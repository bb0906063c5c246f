"""The DeepSpeed engine (``--engine deepspeed``): ZeRO stage 1, 2 or 3, bf16 or fp32.

The model, the data, the learning-rate schedule, the metrics lines and the checkpoint
directory layout are the trainer's own; only the parallelism and the optimizer's
sharding are DeepSpeed's. `ds_config` builds DeepSpeed's configuration from the
`TrainConfig` (a pure function: it needs no DeepSpeed); `setup` calls
``deepspeed.initialize`` with the trainer's GPT model and its AdamW (the same
parameter groups and hyper-parameters as the torch engine), and the step sets the
schedule's learning rate, then runs ``engine.backward`` / ``engine.step`` once per
micro-step (DeepSpeed scales the loss by the accumulation and steps the optimizer at
the boundary, after clipping the gradients to ``grad_clip``).

Checkpoints are ``DIR/step_<N>/`` directories, as the torch engine writes them, in
DeepSpeed's own format (``engine.save_checkpoint`` with the step's directory name as
the tag: each rank writes its ZeRO partition) plus each rank's RNG state and the
trainer's progress (step, data position, global batch). A checkpoint is complete
once rank 0 has written ``deepspeed.json`` after every rank's files are on disk, so
a save interrupted part-way is never resumed from. DeepSpeed's partitions are tied to
the world size they were saved at: resuming at another world size is refused with
what to do (the torch engine's DCP checkpoints reshard; see ``docs/workloads.md``).

DeepSpeed is optional: the training image installs it, other environments may not.
Without it ``--engine deepspeed`` is a configuration error (exit 2) naming the package.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from modules.validation import InvalidArgsError, Problem
from workloads.data.shards import LoaderState
from workloads.training.checkpoint import (
    DEEPSPEED_MARKER,
    CheckpointError,
    Resumed,
    complete_checkpoints,
    engine_problem,
    resume_point,
    step_dir,
)
from workloads.training.config import TrainConfig
from workloads.training.distributed import Topology
from workloads.training.engine import (
    DeviceBatches,
    Resolved,
    StepResult,
    Training,
    build_model,
    build_optimizer,
    learning_rate,
    step_range,
)

#: The release range the trainer is written and tested against (pyproject.toml's
#: ``workloads`` group carries the same).
REQUIREMENT = "deepspeed>=0.19.8,<0.20"
#: DeepSpeed prints its own progress every N steps; the trainer's log lines do that.
_NEVER = 2**31 - 1


def import_deepspeed() -> ModuleType:
    """The deepspeed package, or a configuration error that names it."""
    # DeepSpeed's autotuner, which the trainer never runs, imports MLflow at DeepSpeed's
    # own import whenever it is installed (the training image has mlflow-skinny): ~1.5 CPU
    # seconds of every worker's start. MLflow is hidden while deepspeed is imported
    # (unless something imported it already); the trainer's tracking imports it itself.
    hide_mlflow = "mlflow" not in sys.modules
    if hide_mlflow:
        sys.modules["mlflow"] = None  # type: ignore[assignment]  # import mlflow: ImportError
    try:
        # Optional, and slow to import (seconds): only when the engine is asked for.
        deepspeed = importlib.import_module("deepspeed")
    except ImportError as err:
        raise InvalidArgsError(
            [
                Problem(
                    "engine",
                    "deepspeed",
                    f"the deepspeed package is not installed here ({err}); install "
                    f"'{REQUIREMENT}' (the training image has it) or use --engine torch",
                )
            ]
        ) from err
    finally:
        if hide_mlflow:
            sys.modules.pop("mlflow", None)
    return deepspeed


def ds_config(config: TrainConfig, resolved: Resolved, world_size: int) -> dict[str, Any]:
    """DeepSpeed's configuration for ``config`` on ``world_size`` ranks.

    bf16 is DeepSpeed's bf16 mode (bf16 weights and activations, fp32 master weights
    and optimizer state in the ZeRO optimizer): where the torch engine autocasts,
    this engine holds the model in bf16. Gradients are reduced in fp32, as FSDP2's
    ``reduce_dtype`` has them.
    """
    bf16 = resolved.amp_dtype is torch.bfloat16
    zero: dict[str, Any] = {
        "stage": resolved.zero_stage,
        "contiguous_gradients": True,
        # Overlapping the reduce with the backward needs a second CUDA stream.
        "overlap_comm": resolved.device.type == "cuda",
        "reduce_scatter": True,
    }
    if resolved.zero_stage == 3:
        # Gather each block's parameters just before it runs, not all at once.
        zero |= {"stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 1e5}
    return {
        "train_micro_batch_size_per_gpu": config.micro_batch_size,
        "gradient_accumulation_steps": config.grad_accum_steps,
        "train_batch_size": config.micro_batch_size * config.grad_accum_steps * world_size,
        "gradient_clipping": config.grad_clip,
        "bf16": {"enabled": bf16},
        "fp16": {"enabled": False},
        "communication_data_type": "fp32" if bf16 else None,
        "zero_optimization": zero,
        "steps_per_print": _NEVER,
        "wall_clock_breakdown": False,
        "dump_state": False,
    }


def _single_rank_group(device: torch.device) -> bool:
    """A world of one has no process group, and DeepSpeed needs one: make a one-rank
    group on an in-memory store. Returns whether one was made (to be destroyed)."""
    if dist.is_initialized():
        return False
    # DeepSpeed's engine reads its device from LOCAL_RANK, which only launchers set.
    os.environ.setdefault("LOCAL_RANK", "0")
    cuda = device.type == "cuda"
    dist.init_process_group(
        backend="nccl" if cuda else "gloo",
        store=dist.HashStore(),  # type: ignore[attr-defined]
        rank=0,
        world_size=1,
        timeout=timedelta(minutes=10),
        device_id=device if cuda else None,
    )
    return True


#: DeepSpeed's module-level caches of process groups (deepspeed.utils.groups, 0.19):
#: they outlive the group `_single_rank_group` made, so a second engine in the same
#: process (the benchmark's next variant, gpu-check's next run) would use a destroyed
#: group ("Group ... is not registered"). Cleared when that group is destroyed.
_GROUP_CACHES = (
    "_WORLD_GROUP",
    "_ZERO_PARAM_INTRA_PARALLEL_GROUP",
    "_EXPERT_PARALLEL_GROUP",
    "_EXPERT_PARALLEL_GROUP_RANKS",
    "_EXPERT_DATA_PARALLEL_GROUP",
    "_EXPERT_DATA_PARALLEL_GROUP_RANKS",
    "_ALL_TO_ALL_GROUP",
)


def _forget_groups() -> None:
    groups = importlib.import_module("deepspeed.utils.groups")
    for name in _GROUP_CACHES:
        value = getattr(groups, name, None)
        if isinstance(value, dict):
            value.clear()
        elif hasattr(groups, name):
            setattr(groups, name, None)


def setup(config: TrainConfig, resolved: Resolved, topology: Topology) -> Training:
    """``deepspeed.initialize`` on the trainer's model and optimizer."""
    deepspeed = import_deepspeed()
    made_group = _single_rank_group(resolved.device)
    raw = build_model(config, resolved)
    num_params = raw.num_parameters()
    optimizer = build_optimizer(raw, config, resolved)
    linear = torch.nn.functional.linear
    engine, ds_optimizer, _, _ = deepspeed.initialize(
        model=raw,
        optimizer=optimizer,
        config=ds_config(config, resolved, topology.world_size),
    )
    accum = config.grad_accum_steps

    def step(batches: DeviceBatches, current: TrainConfig, number: int) -> StepResult:
        if current.grad_accum_steps != accum:
            raise CheckpointError(
                f"the DeepSpeed engine was set up for {accum} accumulation steps, not "
                f"{current.grad_accum_steps}"
            )
        lr = learning_rate(number, current)
        for group in ds_optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros((), device=resolved.device)
        data_wait = 0.0
        for _ in range(accum):
            started = time.perf_counter()
            inputs, targets = batches.next()
            data_wait += time.perf_counter() - started
            with step_range("forward", resolved):
                loss = engine(inputs, targets)
            with step_range("backward", resolved):
                # DeepSpeed divides by the accumulation steps itself.
                engine.backward(loss)
            # Only the boundary's call steps the optimizer (clipping first).
            with step_range("optimizer", resolved):
                engine.step()
            loss_sum += loss.detach().float() / accum
        return StepResult(loss_sum, data_wait)

    def close() -> None:
        engine.destroy()
        # ZeRO-3 replaces torch.nn.functional.linear with DeepSpeed's memory-efficient
        # version and leaves it there ("This will persist unless manually reset"): a
        # model trained after this engine in the same process (the benchmark's next
        # variant, gpu-check's next run) would compute every linear layer with it.
        torch.nn.functional.linear = linear
        if made_group and dist.is_initialized():
            dist.destroy_process_group()
            _forget_groups()

    return Training(cast(nn.Module, engine), ds_optimizer, num_params, step, close)


# --- checkpoints ---------------------------------------------------------------------


@dataclass(frozen=True)
class SavedRun:
    """What ``deepspeed.json`` records about the run that wrote a checkpoint."""

    step: int
    world_size: int
    zero_stage: int
    global_batch: int
    data_shard: int
    data_position: int


def read_marker(path: Path) -> SavedRun:
    raw = json.loads((path / DEEPSPEED_MARKER).read_text(encoding="utf-8"))
    return SavedRun(
        step=int(raw["step"]),
        world_size=int(raw["world_size"]),
        zero_stage=int(raw["zero_stage"]),
        global_batch=int(raw["global_batch"]),
        data_shard=int(raw["data_shard"]),
        data_position=int(raw["data_position"]),
    )


def fit_problem(path: Path, saved: SavedRun, world_size: int, zero_stage: int) -> str | None:
    """Why a run of ``world_size`` ranks at ZeRO stage ``zero_stage`` cannot resume the
    DeepSpeed checkpoint ``path`` (which recorded ``saved``), or None."""
    problems = []
    if saved.world_size != world_size:
        problems.append(
            f"it was saved by {saved.world_size} ranks and this run has "
            f"{world_size} (DeepSpeed's ZeRO partitions load only at the "
            "world size that saved them unless converted to its universal format, "
            "which this trainer does not do; "
            "resume at the same world size, or use the torch engine for elastic runs)"
        )
    if saved.zero_stage != zero_stage:
        problems.append(
            f"it was saved with --zero-stage {saved.zero_stage}, this run has {zero_stage}"
        )
    if not problems:
        return None
    return (
        f"checkpoint {path} does not fit this run: {'; '.join(problems)}. Point "
        "--ckpt-dir at a new directory to start fresh."
    )


class DeepSpeedCheckpointer:
    """`workloads.training.checkpoint.Checkpointer`'s counterpart for the DeepSpeed
    engine: the same ``step_<N>`` directories, resume and pruning rules, blocking
    saves (DeepSpeed writes its partitions itself).

    Args:
        root: the checkpoint directory.
        topology: this process's place (rank 0 writes the marker and prunes).
        device: where the model lives (selects the RNG states to keep).
        group: gloo group for the barrier before the marker is written.
        zero_stage: the engine's ZeRO stage (recorded, and checked on resume).
        keep: complete checkpoints kept.
    """

    def __init__(
        self,
        root: Path,
        *,
        topology: Topology,
        device: torch.device,
        group: dist.ProcessGroup | None,
        zero_stage: int,
        keep: int = 2,
    ) -> None:
        self.root = root
        self.topology = topology
        self.device = device
        self.group = group
        self.zero_stage = zero_stage
        self.keep = keep
        self._skipped: tuple[str, ...] = ()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CheckpointError(
                f"cannot create the checkpoint directory {root} ({err.strerror}); "
                "point --ckpt-dir at a writable path"
            ) from err

    def _barrier(self) -> None:
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier(group=self.group)

    def save(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loader: LoaderState,
        *,
        blocking: bool = False,
        global_batch: int = 0,
    ) -> Path:
        """Checkpoint after ``step``; every rank calls it. Always blocking."""
        path = step_dir(self.root, step)
        engine = cast(Any, model)
        engine.save_checkpoint(str(self.root), tag=path.name, save_latest=False)
        rank = self.topology.rank
        rng = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        torch.save(rng, path / f"rng_rank{rank}.pt")
        self._barrier()  # every rank's partition and RNG are on disk
        if rank == 0:
            marker = SavedRun(
                step=step,
                world_size=self.topology.world_size,
                zero_stage=self.zero_stage,
                global_batch=global_batch,
                data_shard=loader.shard,
                data_position=loader.position,
            )
            staging = path / f"{DEEPSPEED_MARKER}.tmp"
            staging.write_text(json.dumps(marker.__dict__, indent=2) + "\n", encoding="utf-8")
            staging.replace(path / DEEPSPEED_MARKER)  # atomic: complete from here on
            self._prune()
        self._barrier()
        return path

    def wait(self) -> None:
        """Saves block; nothing is in flight."""

    def _prune(self) -> None:
        found = complete_checkpoints(self.root)
        for _, old in found[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    def saved_global_batch(self) -> int:
        """The global batch (sequences) the newest complete checkpoint was written
        with; 0 when there is none. A checkpoint this run cannot resume is refused here
        (`CheckpointError`), before DeepSpeed builds its engine, not after."""
        latest = self._resumable_latest()
        return 0 if latest is None else latest[1].global_batch

    def _resumable_latest(self) -> tuple[Path, SavedRun] | None:
        """The newest readable checkpoint and what it records, or None; `CheckpointError`
        saying what to do when this run cannot resume it."""
        point = resume_point(self.root, set_aside=self.topology.rank == 0)
        if point is None:
            return None
        problem = engine_problem(point.path, "deepspeed")
        if problem is not None:
            raise CheckpointError(problem)
        # Kept for `load_latest`'s report: a second look finds them set aside.
        self._skipped += point.skipped
        saved = read_marker(point.path)
        problem = fit_problem(point.path, saved, self.topology.world_size, self.zero_stage)
        if problem is not None:
            raise CheckpointError(problem)
        return point.path, saved

    def load_latest(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> Resumed | None:
        latest = self._resumable_latest()
        if latest is None:
            return None
        path, saved = latest
        engine = cast(Any, model)
        try:
            loaded, _ = engine.load_checkpoint(
                str(self.root), tag=path.name, load_lr_scheduler_states=False
            )
        except (RuntimeError, ValueError, KeyError, AssertionError) as err:
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            raise CheckpointError(
                f"checkpoint {path} does not fit this run (a different preset or model "
                f"shape?): {lines[-1] if lines else type(err).__name__}. Point --ckpt-dir "
                "at a new directory to start fresh."
            ) from err
        if loaded is None:
            raise CheckpointError(f"DeepSpeed found no checkpoint to load in {path}")
        rng_file = path / f"rng_rank{self.topology.rank}.pt"
        has_rng = rng_file.is_file()
        if has_rng:
            rng = torch.load(rng_file, weights_only=True)
            torch.set_rng_state(rng["cpu"])
            if "cuda" in rng and self.device.type == "cuda":
                torch.cuda.set_rng_state(rng["cuda"], self.device)
        return Resumed(
            step=saved.step,
            loader=LoaderState(saved.data_shard, saved.data_position),
            path=path,
            rng_restored=has_rng,
            global_batch=saved.global_batch,
            skipped=self._skipped,
        )


def environment_note() -> str:
    """Which accelerator and collective backend DeepSpeed chose (for the run's log)."""
    accelerator = importlib.import_module("deepspeed.accelerator").get_accelerator()
    name = accelerator.device_name()
    backend = accelerator.communication_backend_name()
    env = os.environ.get("DS_ACCELERATOR", "")
    return f"deepspeed: accelerator {name}, backend {backend}" + (
        f" (DS_ACCELERATOR={env})" if env else ""
    )
