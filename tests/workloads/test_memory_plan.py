"""The memory plan's estimate (`modules.k8s.trainer.memory`) against the memory real
training steps hold on CPU, for the ``tiny`` and ``small`` presets, with and without
activation checkpointing.

What is measured: the peak of the live tensor storage on the CPU during optimizer steps
2 and 3 of the trainer's own step (`workloads.training.engines.setup`, the batches from
its loader), as ``torch.distributed._tools.mem_tracker.MemTracker`` counts it: a
dispatch mode that adds every tensor storage when it is allocated and removes it when
it is freed (weights, gradients, optimizer state, activations and temporaries alike).
That is what a GPU's caching allocator would be asked for, without its rounding and
fragmentation; peak RSS would add the interpreter, torch's libraries and the heap's
slack, which dwarf these models. Step 1 is left out: AdamW allocates its state during it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker

from modules.k8s.trainer import memory
from workloads.data.byte_tokenizer import ensure_shards
from workloads.data.shards import ShardLoader
from workloads.training.config import DEFAULT_CORPUS, override, preset
from workloads.training.distributed import Topology
from workloads.training.engine import DeviceBatches, resolve
from workloads.training.engines import setup

#: The bound the issue sets: the estimate within 20% of the measured peak.
TOLERANCE = 0.20
CPU = torch.device("cpu")


def measured_peak(preset_name: str, checkpointing: str, data_dir: Path) -> tuple[int, int]:
    """(measured peak bytes, estimated bytes) of ``preset_name`` on this CPU."""
    config = override(
        preset(preset_name),
        {"activation_checkpointing": checkpointing, "data_dir": str(data_dir)},
    )
    resolved = resolve(config, CPU)
    training = setup(config, resolved, Topology())
    loader = ShardLoader(
        ensure_shards(data_dir, DEFAULT_CORPUS),
        batch=config.micro_batch_size,
        seq_len=config.seq_len,
        rank=0,
        world_size=1,
        vocab_size=config.model.padded_vocab_size(resolved.pad_vocab),
    )
    batches = DeviceBatches(loader, resolved)
    training.step(batches, config, 1)
    tracker = MemTracker()
    tracker.track_external(training.model, training.optimizer)
    with tracker:
        for step in (2, 3):
            training.step(batches, config, step)
            tracker.reset_mod_stats()  # per-module statistics are per iteration
    peak = int(tracker.get_tracker_snapshot("peak")[CPU]["Total"])
    dims = memory.ModelDims.from_model_config(config.model)
    estimate = memory.estimate(dims, memory.layout_of(config, 1, cuda=False))
    return peak, estimate.total


@pytest.mark.parametrize("checkpointing", ["off", "on"])
@pytest.mark.parametrize("preset_name", ["tiny", "small"])
def test_the_estimate_is_within_20_percent_of_the_measured_peak(
    preset_name: str, checkpointing: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data_dir = tmp_path_factory.getbasetemp() / "memory-plan-data"
    peak, estimate = measured_peak(preset_name, checkpointing, data_dir)
    error = (estimate - peak) / peak
    print(
        f"{preset_name} AC {checkpointing}: measured {peak} B, estimated {estimate} B, {error:+.1%}"
    )
    assert abs(error) <= TOLERANCE, (preset_name, checkpointing, peak, estimate)
