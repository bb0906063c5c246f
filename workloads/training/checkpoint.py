"""Checkpoint and resume with `torch.distributed.checkpoint` (DCP).

Each checkpoint is a directory ``step_<N>`` holding the model and optimizer state
(sharded as the model is: replicated under DDP, per-rank shards under FSDP2), the
step, the data loader's position and every rank's RNG state. Saving is asynchronous
by default (`dcp.async_save`: the state is staged to host memory, then written by a
background thread while training continues). A directory counts as complete only
once DCP has written its ``.metadata`` file, which the coordinator does after every
rank's data is on disk, so a run killed mid-save resumes from the previous one. A
complete checkpoint that cannot be read (a ``.metadata`` that does not unpickle, a data
file shorter than the metadata says) is named, set aside as ``step_<N>.corrupt``, and the
run resumes from the newest readable one (`resume_point`).

DCP reshards on load: a run restarted with another world size (an elastic job that
lost a node) loads the same checkpoint into its own layout; the checkpoint records
the global batch (sequences per optimizer step) so the restarted run can keep it
(`workloads.training.elastic`). The DeepSpeed engine writes the same ``step_<N>``
directories in its own format, complete once its ``deepspeed.json`` exists
(`workloads.training.deepspeed_engine`).
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from workloads.data.shards import LoaderState
from workloads.training.compat import async_save_response_type, dcp_kwargs

STEP_PREFIX = "step_"
METADATA_FILE = ".metadata"
#: The DeepSpeed engine's completion marker (`workloads.training.deepspeed_engine`).
DEEPSPEED_MARKER = "deepspeed.json"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be loaded into this run, with what to do about it."""


def step_dir(root: Path, step: int) -> Path:
    return root / f"{STEP_PREFIX}{step:08d}"


def checkpoint_engine(path: Path) -> str | None:
    """The engine that wrote the complete checkpoint ``path`` (``torch``: DCP's
    ``.metadata``; ``deepspeed``: its marker), or None while it is incomplete."""
    if (path / METADATA_FILE).is_file():
        return "torch"
    if (path / DEEPSPEED_MARKER).is_file():
        return "deepspeed"
    return None


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every complete checkpoint under ``root``, oldest first."""
    found: list[tuple[int, Path]] = []
    if not root.is_dir():
        return found
    for path in root.glob(f"{STEP_PREFIX}*"):
        suffix = path.name.removeprefix(STEP_PREFIX)
        if suffix.isdigit() and checkpoint_engine(path) is not None:
            found.append((int(suffix), path))
    return sorted(found)


def latest_checkpoint(root: Path) -> tuple[int, Path] | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def checkpoint_problem(path: Path) -> str | None:
    """Why the complete checkpoint ``path`` cannot be read, or None: a DCP checkpoint
    whose ``.metadata`` does not unpickle, or whose data files are missing or shorter
    than the metadata says (truncated); a DeepSpeed marker that is not JSON. Reads
    only the metadata and the files' sizes, not the tensors."""
    if checkpoint_engine(path) == "deepspeed":
        try:
            json.loads((path / DEEPSPEED_MARKER).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as err:
            return f"its {DEEPSPEED_MARKER} cannot be read ({err})"
        return None
    try:
        metadata = FileSystemReader(str(path)).read_metadata()
    except Exception as err:
        return f"its {METADATA_FILE} cannot be read ({type(err).__name__}: {err})"
    needed: dict[str, int] = {}
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        name = str(getattr(info, "relative_path", ""))
        end = int(getattr(info, "offset", 0)) + int(getattr(info, "length", 0))
        if name:
            needed[name] = max(needed.get(name, 0), end)
    for name, end in sorted(needed.items()):
        data = path / name
        if not data.is_file():
            return f"its data file {name} is missing"
        size = data.stat().st_size
        if size < end:
            return (
                f"its data file {name} is truncated ({size} bytes, its {METADATA_FILE} needs {end})"
            )
    return None


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a run resumes from.

    Args:
        step: its step.
        path: its directory.
        skipped: one line per newer checkpoint that was corrupt and skipped.
    """

    step: int
    path: Path
    skipped: tuple[str, ...] = ()


def _set_aside(path: Path) -> Path:
    """Rename a corrupt checkpoint out of the ``step_<N>`` names (nothing is deleted), so
    neither a resume nor the pruning of old checkpoints counts it again."""
    target = path.with_name(f"{path.name}.corrupt")
    number = 1
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}.corrupt{number}")
    path.rename(target)
    return target


def resume_point(root: Path, *, set_aside: bool = False) -> ResumePoint | None:
    """The newest complete checkpoint under ``root`` that can be read (`checkpoint_problem`),
    naming each newer one that cannot; None when there is no complete checkpoint.

    Args:
        root: the checkpoint directory.
        set_aside: rename the corrupt ones to ``step_<N>.corrupt`` (one process does
            it: rank 0), so the run's new checkpoints replace them.

    Raises:
        CheckpointError: every complete checkpoint is corrupt.
    """
    skipped: list[str] = []
    for step, path in reversed(complete_checkpoints(root)):
        problem = checkpoint_problem(path)
        if problem is None:
            return ResumePoint(step, path, tuple(skipped))
        note = f"checkpoint {path} is corrupt: {problem}"
        if set_aside:
            note += f"; set aside as {_set_aside(path).name}"
        skipped.append(note)
    if skipped:
        raise CheckpointError(
            f"no checkpoint in {root} can be resumed: {'; '.join(skipped)}. Move them "
            "away, or point --ckpt-dir at a new directory to start fresh."
        )
    return None


def engine_problem(path: Path, engine: str) -> str | None:
    """Why a run of ``engine`` (``torch`` or ``deepspeed``) cannot resume the checkpoint
    ``path`` that another engine wrote, or None."""
    written_by = checkpoint_engine(path)
    if written_by == engine:
        return None
    if written_by == "deepspeed":
        return (
            f"checkpoint {path} was written by the DeepSpeed engine; resume it with "
            "--engine deepspeed (and its --zero-stage), or point --ckpt-dir at a new "
            "directory to start fresh"
        )
    return (
        f"checkpoint {path} was written by the torch engine (DCP); resume it with "
        "--engine torch, or point --ckpt-dir at a new directory to start fresh"
    )


def shape_problem(path: Path, expected: Mapping[str, Sequence[int]]) -> str | None:
    """Why the DCP checkpoint ``path`` does not fit a model whose state-dict tensors
    have the ``expected`` shapes (by name, as ``model.state_dict()`` names them), or
    None. Reads the metadata only."""
    saved = FileSystemReader(str(path)).read_metadata().state_dict_metadata
    for name, shape in expected.items():
        entry = saved.get(f"model.{name}")
        size = list(getattr(entry, "size", ()))
        if entry is None:
            found = f"has no model.{name}"
        elif size != list(shape):
            found = f"has model.{name} of shape {size}, this run {list(shape)}"
        else:
            continue
        return (
            f"checkpoint {path} does not fit this run (a different preset or model "
            f"shape?): it {found}. Point --ckpt-dir at a new directory to start fresh."
        )
    return None


@dataclass(frozen=True)
class Resumed:
    """What a loaded checkpoint restores besides the weights and optimizer."""

    step: int
    loader: LoaderState
    path: Path
    rng_restored: bool
    #: Sequences per optimizer step of the run that saved it (0: not recorded).
    global_batch: int = 0
    #: One line per newer checkpoint that was corrupt and skipped (`resume_point`).
    skipped: tuple[str, ...] = ()


def _rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


class StateLayout(Protocol):
    """How a model's state dicts are stored, where that differs from how it computes."""

    def to_saved(
        self, model_sd: dict[str, Any], optim_sd: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]: ...

    def from_saved(
        self, model_sd: dict[str, Any], optim_sd: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]: ...


class Checkpointer:
    """Saves and loads this run's checkpoints.

    Args:
        root: the checkpoint directory (FSx mount or local disk).
        rank: this process's global rank (keys its RNG state; rank 0 prunes).
        device: where the model lives (selects the RNG states to keep).
        group: gloo group for DCP's coordination, kept apart from the training group
            so a background save never interleaves with training collectives.
        use_async: save with ``async_save`` (the final and SIGTERM saves block).
        keep: complete checkpoints kept; older ones are deleted by rank 0.
        layout: converts the model's and optimizer's state dicts to the stored layout
            and back (``to_saved`` / ``from_saved``): a TP model's ``c_attn`` rows
            (`workloads.training.tp.CheckpointLayout`); None: stored as they are.
    """

    def __init__(
        self,
        root: Path,
        *,
        rank: int,
        device: torch.device,
        group: dist.ProcessGroup | None,
        use_async: bool = True,
        keep: int = 2,
        layout: StateLayout | None = None,
    ) -> None:
        self.root = root
        self.layout = layout
        self.rank = rank
        self.device = device
        self.group = group
        self.use_async = use_async
        self.keep = keep
        self._pending: Future[Any] | None = None
        # A world of one: no process group, DCP saves and loads locally.
        self._no_dist = not dist.is_initialized()
        if self._no_dist:
            # DCP warns on every single-process save and load (also from the async
            # save's thread) even when asked for one.
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CheckpointError(
                f"cannot create the checkpoint directory {root} ({err.strerror}); "
                "point --ckpt-dir at a writable path"
            ) from err

    def _state(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loader: LoaderState,
        global_batch: int,
    ) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        if self.layout is not None:
            model_sd, optim_sd = self.layout.to_saved(model_sd, optim_sd)
        return {
            "model": model_sd,
            "optim": optim_sd,
            "progress": {
                "step": step,
                "data_shard": loader.shard,
                "data_position": loader.position,
                "global_batch": global_batch,
            },
            # One key per rank: DCP keeps a single copy of identical keys.
            "rng": {f"rank{self.rank}": _rng_state(self.device)},
        }

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
        """Checkpoint after ``step``; returns the directory. Every rank must call it.
        ``global_batch``: the run's sequences per optimizer step, recorded for an
        elastic restart."""
        self.wait()  # one save in flight at a time
        path = step_dir(self.root, step)
        state = self._state(step, model, optimizer, loader, global_batch)
        self._write(state, path, blocking)
        return path

    def _write(self, state: dict[str, Any], path: Path, blocking: bool) -> None:
        if self.use_async and not blocking:
            response = async_save(
                state,
                checkpoint_id=str(path),
                process_group=self.group,
                **dcp_kwargs(async_save, self._no_dist),
            )
            # With a custom stager DCP returns both futures; the upload one means "on disk".
            response_type = async_save_response_type()
            if response_type is not None and isinstance(response, response_type):
                self._pending = cast(Any, response).upload_completion
            else:
                self._pending = cast("Future[Any]", response)
        else:
            dcp_save(
                state,
                checkpoint_id=str(path),
                process_group=self.group,
                **dcp_kwargs(dcp_save, self._no_dist),
            )
            self._prune()

    def wait(self) -> None:
        """Block until the save in flight (if any) is on disk."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()
            self._prune()

    def _prune(self) -> None:
        if self.rank != 0:
            return
        found = complete_checkpoints(self.root)
        for _, path in found[: -self.keep]:
            shutil.rmtree(path, ignore_errors=True)
        if found:
            newest = found[-1][0]
            # Leftovers of saves interrupted before they completed.
            for path in self.root.glob(f"{STEP_PREFIX}*"):
                suffix = path.name.removeprefix(STEP_PREFIX)
                if suffix.isdigit() and int(suffix) < newest and checkpoint_engine(path) is None:
                    shutil.rmtree(path, ignore_errors=True)

    def load_latest(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> Resumed | None:
        """Restore the newest complete checkpoint into ``model`` and ``optimizer``
        (and this rank's RNG); ``None`` when there is none."""
        point = resume_point(self.root, set_aside=self.rank == 0)
        if point is None:
            return None
        path = point.path
        problem = engine_problem(path, "torch")
        if problem is not None:
            raise CheckpointError(problem)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        if self.layout is not None:  # load into tensors of the stored layout's shapes
            model_sd, optim_sd = self.layout.to_saved(model_sd, optim_sd)
        state: dict[str, Any] = {
            "model": model_sd,
            "optim": optim_sd,
            "progress": {"step": 0, "data_shard": 0, "data_position": 0},
        }
        saved_keys = FileSystemReader(str(path)).read_metadata().state_dict_metadata
        rng_key = f"rank{self.rank}"
        # A run restarted with a different world size has no RNG state for new ranks.
        has_rng = f"rng.{rng_key}.cpu" in saved_keys
        if has_rng:
            state["rng"] = {rng_key: _rng_state(self.device)}
        # Checkpoints written before the global batch was recorded have no such key.
        if "progress.global_batch" in saved_keys:
            state["progress"]["global_batch"] = 0
        try:
            dcp_load(
                state,
                checkpoint_id=str(path),
                process_group=self.group,
                **dcp_kwargs(dcp_load, self._no_dist),
            )
            loaded_model, loaded_optim = state["model"], state["optim"]
            if self.layout is not None:
                loaded_model, loaded_optim = self.layout.from_saved(loaded_model, loaded_optim)
            set_state_dict(
                model, optimizer, model_state_dict=loaded_model, optim_state_dict=loaded_optim
            )
        except (CheckpointException, RuntimeError, ValueError, KeyError) as err:
            # DCP wraps each rank's failure with its traceback; the last line is the cause.
            # (A truncated or missing file is found before, by `resume_point`.)
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            cause = lines[-1] if lines else type(err).__name__
            raise CheckpointError(
                f"checkpoint {path} does not fit this run (a different preset, model shape "
                f"or parallelism?): {cause}. Point --ckpt-dir at a new directory to start fresh."
            ) from err
        if has_rng:
            rng = state["rng"][rng_key]
            torch.set_rng_state(rng["cpu"])
            if "cuda" in rng and self.device.type == "cuda":
                torch.cuda.set_rng_state(rng["cuda"], self.device)
        progress = state["progress"]
        return Resumed(
            step=int(progress["step"]),
            loader=LoaderState(int(progress["data_shard"]), int(progress["data_position"])),
            path=path,
            rng_restored=has_rng,
            global_batch=int(progress.get("global_batch", 0)),
            skipped=point.skipped,
        )
