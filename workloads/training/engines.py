"""Set up training with the engine the config names: the trainer's own DDP / FSDP2
(`workloads.training.engine`), the same with tensor parallelism on a 2-D mesh
(``--tp N``, `workloads.training.tp`), or DeepSpeed's ZeRO
(`workloads.training.deepspeed_engine`). `train`, `bench` and `profile` all start
here, so each runs any of them."""

from __future__ import annotations

from workloads.training import deepspeed_engine, tp
from workloads.training.config import TrainConfig
from workloads.training.distributed import Topology
from workloads.training.engine import (
    DeviceBatches,
    Resolved,
    StepResult,
    Training,
    build_model,
    build_optimizer,
    setup_torch,
    train_step,
)


def setup(config: TrainConfig, resolved: Resolved, topology: Topology) -> Training:
    """Build, wrap and give an optimizer to the model as ``resolved.engine`` says."""
    if resolved.engine == "deepspeed":
        return deepspeed_engine.setup(config, resolved, topology)
    if config.tp > 1:
        return setup_tp(config, resolved, topology)
    return setup_torch(config, resolved, topology)


def setup_tp(config: TrainConfig, resolved: Resolved, topology: Topology) -> Training:
    """The torch engine with ``config.tp``-way tensor parallelism and FSDP2 over the
    remaining ranks; the training step is the torch engine's."""
    raw = build_model(config, resolved)
    num_params = raw.num_parameters()  # before the split: the whole model's
    model = tp.parallelize_tp(raw, config, resolved, topology)
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
