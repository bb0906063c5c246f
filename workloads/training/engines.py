"""Set up training with the engine the config names: the trainer's own DDP / FSDP2
(`workloads.training.engine`) or DeepSpeed's ZeRO (`workloads.training.deepspeed_engine`).
`train`, `bench` and `profile` all start here, so each runs either engine."""

from __future__ import annotations

from workloads.training import deepspeed_engine
from workloads.training.config import TrainConfig
from workloads.training.distributed import Topology
from workloads.training.engine import Resolved, Training, setup_torch


def setup(config: TrainConfig, resolved: Resolved, topology: Topology) -> Training:
    """Build, wrap and give an optimizer to the model as ``resolved.engine`` says."""
    if resolved.engine == "deepspeed":
        return deepspeed_engine.setup(config, resolved, topology)
    return setup_torch(config, resolved, topology)
