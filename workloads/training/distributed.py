"""Process topology from torchrun's environment, and process-group setup.

Rank and world size come only from the variables torchrun sets (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``); a plain ``python -m`` run is a
world of one. CUDA ranks use NCCL; CPU ranks use gloo.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


class TopologyError(ValueError):
    """torchrun's environment is inconsistent."""


@dataclass(frozen=True)
class Topology:
    """Where this process sits.

    Args:
        rank: global rank.
        local_rank: rank on this node (selects the GPU).
        world_size: processes in the job.
        local_world_size: processes on this node.
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """The process that writes logs and summaries."""
        return self.rank == 0

    @property
    def nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))


def _int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as err:
        raise TopologyError(f"{name}={raw!r} is not an integer") from err


def read_topology(environ: Mapping[str, str] | None = None) -> Topology:
    """The topology torchrun describes in ``environ`` (default: the process's)."""
    env = os.environ if environ is None else environ
    world = _int(env, "WORLD_SIZE", 1)
    rank = _int(env, "RANK", 0)
    local_rank = _int(env, "LOCAL_RANK", 0)
    local_world = _int(env, "LOCAL_WORLD_SIZE", world)
    if world < 1 or not 0 <= rank < world:
        raise TopologyError(f"RANK={rank} is outside WORLD_SIZE={world}")
    if not 0 <= local_rank < max(1, local_world):
        raise TopologyError(f"LOCAL_RANK={local_rank} is outside LOCAL_WORLD_SIZE={local_world}")
    return Topology(rank, local_rank, world, local_world)


def select_device(topology: Topology) -> torch.device:
    """This rank's GPU when CUDA is available, the CPU otherwise."""
    if torch.cuda.is_available():
        device = torch.device("cuda", topology.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def init_process_group(topology: Topology, device: torch.device, timeout_s: int = 600) -> None:
    """Join the job's default process group (NCCL on CUDA, gloo on CPU)."""
    if not topology.distributed or dist.is_initialized():
        return
    cuda = device.type == "cuda"
    dist.init_process_group(
        backend="nccl" if cuda else "gloo",
        timeout=timedelta(seconds=timeout_s),
        # Binding the device makes NCCL connect eagerly: fabric errors surface at start.
        device_id=device if cuda else None,
    )


def cpu_group() -> dist.ProcessGroup | None:
    """A new gloo group over all ranks, for host-side collectives (checkpoint
    coordination, the stop flag) that must not queue behind or interleave with
    training collectives on the default group. ``None`` when not distributed."""
    if not dist.is_initialized():
        return None
    group: dist.ProcessGroup = dist.new_group(backend="gloo")
    return group


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
