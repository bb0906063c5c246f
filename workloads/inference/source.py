"""The model of a DCP checkpoint, on the CPU, whatever world size wrote it.

DCP stores each tensor with its global shape and the chunks each rank wrote (whole
replicas under DDP, shards under FSDP2), and its loader reassembles them for the
reader: a single process here reads a checkpoint of any world size. The checkpoint's
tensor shapes are compared with the config's first, so another model's checkpoint is
one message naming the differences, not a DCP traceback.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
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
    checkpoint_problem,
    complete_checkpoints,
)
from workloads.training.config import TrainConfig
from workloads.training.model import GPT

_TIED = "lm_head.weight"  # tied to wte.weight; a checkpoint may hold it once


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def resolve_checkpoint(path: Path, say: Callable[[str], None] = _to_stderr) -> tuple[int, Path]:
    """``(step, directory)`` of the checkpoint at ``path``: a ``step_<N>`` directory,
    or a checkpoint root (its newest complete checkpoint that can be read).

    Corruption is found as training's resume finds it
    (`workloads.training.checkpoint.checkpoint_problem`: the metadata and the data
    files' sizes). A root whose newest checkpoints are corrupt gives the newest intact
    one, and ``say`` gets one line naming the corrupt ones and the step taken (default:
    printed to stderr); unlike a resume, nothing is renamed: the folder is only read.
    A ``step_<N>`` directory named explicitly that is corrupt is an error.

    Args:
        path: what the user named (``CHECKPOINT``).
        say: where the fallback's line goes.
    """
    if not path.exists():
        raise ExportError(f"checkpoint {path}: no such file or directory")
    if not path.is_dir():
        raise ExportError(f"checkpoint {path}: not a directory (a DCP checkpoint is one)")
    suffix = path.name.removeprefix(STEP_PREFIX)
    if checkpoint_engine(path):
        found: tuple[int, Path] | None = (int(suffix) if suffix.isdigit() else 0, path)
        corrupt: list[str] = []
    else:
        found, corrupt = _newest_intact(path)
    if found is not None and checkpoint_engine(found[1]) == "deepspeed":
        raise ExportError(
            f"checkpoint {found[1]} was written by the DeepSpeed engine, and export reads "
            "DCP checkpoints (--engine torch); convert it with the zero_to_fp32.py DeepSpeed "
            "left in the checkpoint directory, or export a torch-engine run"
        )
    if (path / METADATA_FILE).is_file():
        problem = checkpoint_problem(path)
        if problem is not None:
            raise ExportError(
                f"checkpoint {path} is truncated or corrupt: {_one_line(problem)}; export an "
                "earlier step, or the checkpoint directory itself (its newest intact step)"
            )
        return (int(suffix) if suffix.isdigit() else 0), path
    if path.name.startswith(STEP_PREFIX):
        raise ExportError(
            f"checkpoint {path} is incomplete (no {METADATA_FILE}: the save was interrupted); "
            "export an earlier step or the checkpoint directory itself"
        )
    if found is None and corrupt:
        raise ExportError(
            f"{path} holds no intact checkpoint: {'; '.join(corrupt)} "
            f"{'is' if len(corrupt) == 1 else 'are'} truncated or corrupt; point CHECKPOINT "
            "at another training run's --ckpt-dir"
        )
    if found is None:
        raise ExportError(
            f"{path} holds no complete checkpoint ({STEP_PREFIX}<N>/{METADATA_FILE}); "
            "point CHECKPOINT at a training run's --ckpt-dir"
        )
    if corrupt:
        names = "checkpoint" if len(corrupt) == 1 else "checkpoints"
        verb = "is" if len(corrupt) == 1 else "are"
        say(
            f"{names} {'; '.join(corrupt)} {verb} truncated or corrupt (nothing renamed); "
            f"taking step {found[0]} ({found[1]}), the newest intact checkpoint"
        )
    return found


def _newest_intact(root: Path) -> tuple[tuple[int, Path] | None, list[str]]:
    """The newest complete checkpoint under ``root`` that can be read, and ``<path>
    (<problem>)`` of each newer one that cannot (read only: resume's
    `workloads.training.checkpoint.resume_point` also renames those)."""
    corrupt: list[str] = []
    for step, path in reversed(complete_checkpoints(root)):
        problem = checkpoint_problem(path)
        if problem is None:
            return (step, path), corrupt
        corrupt.append(f"{path} ({_one_line(problem)})")
    return None, corrupt


def _one_line(text: str) -> str:
    return " ".join(text.split())


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
