"""The Horovod example's program (workloads/horovod/train.py), in the training environment.

Always: a usage error exits with 2 before Horovod is imported. Where Horovod and Open
MPI are installed (the Horovod image, or a venv with Horovod built as docs/workloads.md
says; `make test`'s training environment has neither, so there it is skipped): two ranks
under ``mpirun`` on CPU pass the all-reduce check, train, and write the checkpoint.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.horovod import train

HOROVOD = Path(__file__).resolve().parents[2] / "workloads" / "horovod"


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--lr", "-1"], ["--nope"]])
def test_a_usage_error_exits_2_before_horovod(argv: list[str]) -> None:
    assert train.main(argv) == train.EXIT_USAGE


HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None and shutil.which("mpirun")


@pytest.mark.skipif(not HAVE_HOROVOD, reason="needs Horovod and Open MPI (the Horovod image)")
def test_two_ranks_under_mpirun_train_and_checkpoint(tmp_path: Path) -> None:
    command = [
        "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
        sys.executable, str(HOROVOD / "train.py"),
        "--steps", "40", "--log-every", "10", f"--ckpt-dir={tmp_path}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "horovod: 2 ranks, all-reduce check OK, device cpu" in done.stdout
    losses = [float(x) for x in re.findall(r"step \d+/40 loss ([0-9.]+)", done.stdout)]
    assert len(losses) == 4 and losses[-1] < losses[0] / 2, losses
    import torch  # noqa: PLC0415 - only here, where the run wrote it

    saved = torch.load(tmp_path / "horovod-final.pt", weights_only=True)
    assert saved["steps"] == 40
