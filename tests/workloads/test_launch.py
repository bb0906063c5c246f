"""`make train` checks its config once, before torchrun starts any worker."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.workloads import training_runs
from tests.workloads.helpers import run_in_repo
from tests.workloads.training_runs import TrainerRun
from workloads.training import launch


def problems(*argv: str) -> str:
    checked = launch.check(argv)
    assert isinstance(checked, str), checked
    return checked


def test_a_valid_command_line_goes_to_torchrun_unchanged(tmp_path: Path) -> None:
    args = ["--preset", "tiny", "--steps", "3", "--ckpt-dir", str(tmp_path / "new" / "ckpt")]
    assert launch.check(["--nproc", "3", "--", *args]) == (3, args)
    command = launch.torchrun_argv(3, args)
    assert command[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=3"]  # fmt: skip
    assert command[5:] == ["-m", "workloads.train", *args]


def test_every_problem_is_named_in_one_message() -> None:
    message = problems("--nproc", "0", "--", "--preset", "huge", "--bogus", "1")
    assert message.splitlines() == [
        "make train: 3 problems:",
        "  - NPROC (--nproc): got '0'; use a whole number of worker processes from 1 to 256 "
        "(e.g. NPROC=2)",
        "  - unknown arguments: --bogus 1 (see `make train ARGS=--help`)",
        "  - --preset: got 'huge'; one of tiny, small, gpt2-124m, gpt2-350m",
    ]


@pytest.mark.parametrize("nproc", ["0", "-1", "two", "1000"])
def test_bad_worker_counts(nproc: str) -> None:
    assert f"NPROC (--nproc): got '{nproc}'" in problems("--nproc", nproc, "--")


def test_bad_values_of_the_preset_are_refused() -> None:
    message = problems("--", "--preset", "tiny", "--steps", "-1", "--dtype", "fp8")
    assert "--steps: got " in message and "--dtype: got 'fp8'" in message


def test_a_checkpoint_directory_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "ckpt"
    blocker.write_text("")
    assert problems("--", "--ckpt-dir", str(blocker)) == (
        "make train: 1 problem:\n"
        f"  - --ckpt-dir: got '{blocker}'; exists and is not a directory; point it at a directory"
    )
    assert "is not a directory" in problems("--", "--ckpt-dir", str(blocker / "below"))
    assert "--data-dir: got" in problems("--", "--data-dir", str(blocker))
    assert "--log-jsonl: got" in problems("--", "--log-jsonl", str(tmp_path))
    assert "--corpus: got" in problems("--", "--corpus", str(tmp_path / "missing.txt"))


def test_the_cli_prints_once_and_starts_no_worker(tmp_path: Path) -> None:
    blocker = tmp_path / "ckpt"
    blocker.write_text("")
    done = run_in_repo(
        [sys.executable, "-m", "workloads.training.launch", "--nproc", "2", "--",
         "--ckpt-dir", str(blocker), "--preset", "nope"],
        timeout_s=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("make train: 2 problems:") == 1
    assert "Traceback" not in done.stderr and "torch.distributed" not in done.stderr


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> TrainerRun:
    """Two ranks started through the launcher (shared with other tests)."""
    return training_runs.ddp_run(tmp_path_factory)


@pytest.mark.slow
def test_a_valid_run_is_handed_to_torchrun(ddp_run: TrainerRun) -> None:
    assert ddp_run.command[:5] == (sys.executable, "-m", "workloads.training.launch", "--nproc",
                                   "2")  # fmt: skip
    done = ddp_run.done
    assert done.returncode == 0, done.stdout + done.stderr
    assert "world 2 (1 node(s))" in done.stdout
