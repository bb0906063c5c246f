"""The model of a DCP checkpoint, on the CPU, whatever world size wrote it.

DCP stores each tensor with its global shape and the chunks each rank wrote (whole
replicas under DDP, shards under FSDP2), and its loader reassembles them for the
reader: a single process here reads a checkpoint of any world size. The checkpoint's
tensor shapes are compared with the config's first, so another model's checkpoint is
one message naming the differences, not a DCP traceback.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from workloads.inference.errors import ExportError
from workloads.training.checkpoint import (
    METADATA_FILE,
    STEP_PREFIX,
    checkpoint_engine,
    latest_checkpoint,
)
from workloads.training.config import TrainConfig
from workloads.training.model import GPT

_TIED = "lm_head.weight"  # tied to wte.weight; a checkpoint may hold it once


def resolve_checkpoint(path: Path) -> tuple[int, Path]:
    """``(step, directory)`` of the checkpoint at ``path``: a ``step_<N>`` directory,
    or a checkpoint root (its newest complete checkpoint)."""
    if not path.exists():
        raise ExportError(f"checkpoint {path}: no such file or directory")
    if not path.is_dir():
        raise ExportError(f"checkpoint {path}: not a directory (a DCP checkpoint is one)")
    suffix = path.name.removeprefix(STEP_PREFIX)
    found = (int(suffix) if suffix.isdigit() else 0, path) if checkpoint_engine(path) else None
    found = found or latest_checkpoint(path)
    if found is not None and checkpoint_engine(found[1]) == "deepspeed":
        raise ExportError(
            f"checkpoint {found[1]} was written by the DeepSpeed engine, and export reads "
            "DCP checkpoints (--engine torch); convert it with the zero_to_fp32.py DeepSpeed "
            "left in the checkpoint directory, or export a torch-engine run"
        )
    if (path / METADATA_FILE).is_file():
        return (int(suffix) if suffix.isdigit() else 0), path
    if path.name.startswith(STEP_PREFIX):
        raise ExportError(
            f"checkpoint {path} is incomplete (no {METADATA_FILE}: the save was interrupted); "
            "export an earlier step or the checkpoint directory itself"
        )
    if found is None:
        raise ExportError(
            f"{path} holds no complete checkpoint ({STEP_PREFIX}<N>/{METADATA_FILE}); "
            "point CHECKPOINT at a training run's --ckpt-dir"
        )
    return found


def load_model(step_dir: Path, config: TrainConfig) -> GPT:
    """The model of ``config``'s shape with the weights of ``step_dir``, in eval mode."""
    torch.manual_seed(0)  # the init is overwritten; seeded only so nothing is random
    model = GPT(config.model, use_sdpa=True, pad_vocab=config.pad_vocab)
    state = model.state_dict()
    try:
        saved = FileSystemReader(str(step_dir)).read_metadata().state_dict_metadata
    except Exception as err:  # a truncated .metadata fails inside pickle with anything
        raise ExportError(
            f"checkpoint {step_dir}: its {METADATA_FILE} cannot be read ({type(err).__name__}); "
            "the checkpoint is truncated or corrupt"
        ) from err
    problems = []
    for key, tensor in state.items():
        meta = saved.get(f"model.{key}")
        if meta is None:
            if key != _TIED:
                problems.append(f"{key}: missing from the checkpoint")
        elif not isinstance(meta, TensorStorageMetadata) or tuple(meta.size) != tuple(tensor.shape):
            size = tuple(meta.size) if isinstance(meta, TensorStorageMetadata) else "not a tensor"
            problems.append(f"{key}: checkpoint {size}, config {tuple(tensor.shape)}")
    extra = [k for k in saved if k.startswith("model.") and k.removeprefix("model.") not in state]
    problems += [f"{k.removeprefix('model.')}: in the checkpoint, not in the config" for k in extra]
    if problems:
        shown = "\n  ".join(problems[:6]) + (
            f"\n  ... {len(problems) - 6} more" if len(problems) > 6 else ""
        )
        raise ExportError(
            f"checkpoint {step_dir} holds a different model than preset {config.preset!r} "
            f"({config.model.n_layer} layers, width {config.model.n_embd}):\n  {shown}\n"
            "Pass the --preset and overrides the run used, or export the run's checkpoint "
            "directory (its run.json names them)."
        )
    to_load = {"model": {k: v for k, v in state.items() if f"model.{k}" in saved}}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        try:
            dcp_load(to_load, checkpoint_id=str(step_dir), no_dist=True)
        # DCP wraps a short or missing data file in CheckpointException, which is a
        # BaseException, around the reader's own error.
        except (Exception, CheckpointException) as err:
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            cause = lines[-1][:200] if lines else type(err).__name__
            raise ExportError(
                f"checkpoint {step_dir}: its data cannot be read ({cause}); the checkpoint is "
                "truncated or corrupt, export another step"
            ) from err
    return model.eval()
