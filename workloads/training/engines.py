"""Set up training with the engine the config names: the trainer's own DDP / FSDP2
(`workloads.training.engine`), the same with tensor parallelism on a 2-D mesh
(``--tp N``, `workloads.training.tp`), or DeepSpeed's ZeRO
(`workloads.training.deepspeed_engine`). `train`, `bench` and `profile` all start
here, so each runs any of them."""

from __future__ import annotations

from workloads.training import deepspeed_engine, tp
from workloads.training.config import TrainConfig
from workloads.training.distributed import Topology
from workloads.training.engine import Resolved, Training, setup_torch


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
    return setup_torch(
        config,
        resolved,
        topology,
        wrap=lambda raw: tp.parallelize_tp(raw, config, resolved, topology),
    )
