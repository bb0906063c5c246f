"""Two-process training runs that several training tests assert on, each made once per
test session.

Starting a 2-rank torchrun run costs several CPU seconds (the agent and each worker
import torch) against a fraction of a second of tiny training, and several tests need
the same run: the DDP run is the reference of the killed-worker, elastic and launcher
tests as well as the plain two-process test; the accumulation runs are the
gradient-sync comparison, the DeepSpeed engine's reference and the FSDP2 resume's
first half. A test module asks for one through a session fixture of its own calling
`ddp_run` or `accum_run`; the run is made the first time and shared after. A test that
resumes a shared run's checkpoint resumes a copy (`copy_checkpoints`), so the shared
files stay as the run left them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.workloads.helpers import run_in_repo, run_torchrun, tiny_args, torchrun_command
from workloads.training.config import DEFAULT_CORPUS

#: Steps of the DDP run: enough for the loss to fall by well over 1.5 (16 steps: 5.51 ->
#: 3.45), with checkpoints every 4 steps that a worker killed at step 6 or 7 resumes from.
DDP_STEPS = 16
#: Steps of the accumulation runs (2 micro-steps each), with checkpoints every 3.
ACCUM_STEPS = 6
#: The accumulation runs: skipping the all-reduce on non-final micro-steps (DDP
#: no_sync, FSDP2's set_requires_gradient_sync), the chunked loss and prefetching must
#: not change what is learned. "ddp-no-sync" is the reference of the others and of the
#: DeepSpeed engine.
ACCUM_VARIANTS: dict[str, tuple[str, ...]] = {
    "ddp-no-sync": ("--parallelism", "ddp", "--no-sync-accum", "on"),
    "ddp-sync-every-micro-step": ("--parallelism", "ddp", "--no-sync-accum", "off"),
    "fsdp2-no-sync": ("--parallelism", "fsdp2", "--no-sync-accum", "on"),
    # The chunked loss (its gradient returned for the FSDP2-sharded, tied LM head) and
    # the prefetching loader across ranks.
    "fsdp2-chunked-loss-prefetch": (
        "--parallelism", "fsdp2", "--chunked-loss", "on", "--loss-chunk-tokens", "100",
        "--prefetch", "on",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class TrainerRun:
    """A finished run of the trainer.

    Args:
        run_dir: its directory: ``log.jsonl`` and ``ckpt/`` (the data is beside it).
        command: the command line it was started with.
        done: its exit status and output.
    """

    run_dir: Path
    command: tuple[str, ...]
    done: subprocess.CompletedProcess[str]

    @property
    def log(self) -> Path:
        return self.run_dir / "log.jsonl"

    @property
    def ckpt(self) -> Path:
        return self.run_dir / "ckpt"

    @property
    def output(self) -> str:
        return self.done.stdout + self.done.stderr


_RUNS: dict[str, TrainerRun] = {}


def _once(
    name: str,
    factory: pytest.TempPathFactory,
    start: Callable[[Path], tuple[list[str], subprocess.CompletedProcess[str]]],
) -> TrainerRun:
    """The run called ``name``: started by ``start(run_dir)`` the first time, the same
    run after that."""
    if name not in _RUNS:
        run_dir = factory.mktemp(name) / "run"
        command, done = start(run_dir)
        _RUNS[name] = TrainerRun(run_dir, tuple(command), done)
    return _RUNS[name]


def ddp_args(run_dir: Path, *extra: str) -> list[str]:
    """The DDP run's arguments for a run in ``run_dir``: the tiny preset for
    `DDP_STEPS` steps, every step logged, a checkpoint every 4 steps in
    ``run_dir/ckpt``; then ``extra``."""
    return tiny_args(
        run_dir.parent / "data",
        run_dir / "log.jsonl",
        "--steps", str(DDP_STEPS), "--log-every", "1",
        "--ckpt-every", "4", "--ckpt-dir", str(run_dir / "ckpt"),
        *extra,
    )  # fmt: skip


def ddp_run(factory: pytest.TempPathFactory) -> TrainerRun:
    """Two DDP ranks on `ddp_args`, started as `make train` starts them: through the
    launcher (``python -m workloads.training.launch --nproc 2 -- ...``), which checks
    the arguments and the data and hands them to torchrun. The launcher tokenises a
    corpus only into a data directory named with ``--corpus``: the bundled one here."""

    def start(run_dir: Path) -> tuple[list[str], subprocess.CompletedProcess[str]]:
        command = [sys.executable, "-m", "workloads.training.launch", "--nproc", "2", "--"]
        command += ddp_args(run_dir, "--corpus", str(DEFAULT_CORPUS))
        return command, run_in_repo(command, timeout_s=300)

    return _once("ddp", factory, start)


def accum_args(run_dir: Path, variant: str, *extra: str) -> list[str]:
    """The arguments of accumulation run ``variant`` (`ACCUM_VARIANTS`) in ``run_dir``:
    the tiny preset in fp32 for `ACCUM_STEPS` steps of 2 micro-steps, every step
    logged, a checkpoint every 3 steps in ``run_dir/ckpt``; then ``extra``."""
    return tiny_args(
        run_dir.parent / "data",
        run_dir / "log.jsonl",
        "--steps", str(ACCUM_STEPS), "--grad-accum-steps", "2", "--dtype", "fp32",
        "--log-every", "1", "--ckpt-every", "3", "--ckpt-dir", str(run_dir / "ckpt"),
        *ACCUM_VARIANTS[variant],
        *extra,
    )  # fmt: skip


def accum_run(factory: pytest.TempPathFactory, variant: str) -> TrainerRun:
    """Accumulation run ``variant`` on two ranks under torchrun."""

    def start(run_dir: Path) -> tuple[list[str], subprocess.CompletedProcess[str]]:
        args = accum_args(run_dir, variant)
        return torchrun_command("workloads.train", args), run_torchrun("workloads.train", args)

    return _once(f"accum-{variant}", factory, start)


def copy_checkpoints(run: TrainerRun, run_dir: Path, *, drop: str) -> Path:
    """A copy of ``run``'s checkpoints in ``run_dir/ckpt`` without the one named
    ``drop`` (the end of the run lost, as a crash loses it), to resume from."""
    ckpt = run_dir / "ckpt"
    shutil.copytree(run.ckpt, ckpt, ignore=shutil.ignore_patterns(drop))
    return ckpt
