"""Multi-process training on CPU under torchrun (gloo), as `make train` runs it, and the
fault paths: a worker killed mid-run and resumed, SIGTERM, FSDP2's sharded checkpoints.

The two-process runs that other tests also assert on are made once per session
(tests/workloads/training_runs.py)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.workloads import training_runs
from tests.workloads.helpers import (
    REPO_ROOT,
    losses_by_step,
    read_log,
    run_torchrun,
    tiny_args,
    torchrun_command,
    torchrun_env,
)
from tests.workloads.training_runs import TrainerRun
from workloads.training.checkpoint import complete_checkpoints

pytestmark = pytest.mark.slow


def common_args(tmp_path: Path, *extra: str) -> list[str]:
    return tiny_args(tmp_path / "data", tmp_path / "log.jsonl", *extra)


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> TrainerRun:
    return training_runs.ddp_run(tmp_path_factory)


@pytest.fixture(scope="session")
def accum_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainerRun]:
    return {
        variant: training_runs.accum_run(tmp_path_factory, variant)
        for variant in training_runs.ACCUM_VARIANTS
    }


def test_two_processes_train_and_loss_falls(ddp_run: TrainerRun) -> None:
    done = ddp_run.done
    assert done.returncode == 0, ddp_run.output
    assert "world 2 (1 node(s)), ddp" in done.stdout
    log = read_log(ddp_run.log)
    first, last = float(str(log[0]["loss"])), float(str(log[-1]["loss"]))
    assert last < first - 1.5, (first, last)
    assert "done: loss" in done.stdout


def test_killed_worker_resumes_to_the_same_losses(tmp_path: Path, ddp_run: TrainerRun) -> None:
    # The reference: the shared DDP run, same arguments, no fault.
    assert ddp_run.done.returncode == 0, ddp_run.output
    faulty_dir = tmp_path / "faulty"
    # Rank 1 SIGKILLs itself after step 7 (first attempt only); torchrun restarts the
    # worker group, which resumes from the step-4 checkpoint.
    faulty = run_torchrun(
        "workloads.train",
        training_runs.ddp_args(faulty_dir, "--fault-kill-rank", "1", "--fault-kill-at-step", "7"),
        max_restarts=1,
    )
    output = faulty.stdout + faulty.stderr
    assert faulty.returncode == 0, output
    assert "fault injection: SIGKILL after step 7" in output
    assert "resume: from" in output and "at step 4" in output
    records = read_log(faulty_dir / "log.jsonl")
    assert {r["restart"] for r in records} == {0, 1}
    assert [r["step"] for r in records if r["restart"] == 1] == list(
        range(5, training_runs.DDP_STEPS + 1)
    )
    expected = losses_by_step(ddp_run.log)
    for record in records:  # every step, before and after the kill, matches exactly
        assert record["loss"] == expected[int(str(record["step"]))], record


def test_sigterm_leaves_a_usable_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    process = subprocess.Popen(
        torchrun_command(
            "workloads.train",
            common_args(
                tmp_path, "--steps", "1000000", "--log-every", "1", "--ckpt-dir", str(ckpt)
            ),
        ),
        cwd=REPO_ROOT,
        env=torchrun_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = tmp_path / "log.jsonl"
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and len(log.read_text().splitlines()) >= 3):
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)  # what the kubelet sends to the pod
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert "SIGTERM: stopped after step" in output, output
    saved = complete_checkpoints(ckpt)
    assert len(saved) == 1
    step = saved[0][0]
    assert step >= 3
    assert f"checkpoint: step {step} ->" in output
    # The checkpoint is usable: a new run resumes from it and finishes.
    resumed = run_torchrun(
        "workloads.train",
        common_args(
            tmp_path, "--steps", str(step + 2), "--log-every", "1", "--ckpt-dir", str(ckpt)
        ),
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"at step {step}" in resumed.stdout
    assert losses_by_step(log).keys() >= {step + 1, step + 2}


def test_fsdp2_sharded_checkpoint_resumes_to_the_same_losses(
    tmp_path: Path, accum_runs: dict[str, TrainerRun]
) -> None:
    first = accum_runs["fsdp2-no-sync"]  # checkpoints at steps 3 and 6
    assert first.done.returncode == 0, first.output
    assert "fsdp2" in first.done.stdout
    reference = losses_by_step(first.log)
    # Lose the end of the run (in a copy of its checkpoints) and run the same job again.
    run_dir = tmp_path / "run"
    training_runs.copy_checkpoints(first, run_dir, drop="step_00000006")
    second = run_torchrun("workloads.train", training_runs.accum_args(run_dir, "fsdp2-no-sync"))
    assert second.returncode == 0, second.stdout + second.stderr
    resumed = losses_by_step(run_dir / "log.jsonl")
    assert sorted(resumed) == [4, 5, 6]
    assert all(resumed[s] == reference[s] for s in resumed), (resumed, reference)


def test_gradient_sync_skipping_and_fsdp2_train_the_same_model(
    accum_runs: dict[str, TrainerRun],
) -> None:
    """Skipping the all-reduce on non-final micro-steps (DDP no_sync, FSDP2's
    set_requires_gradient_sync), the chunked loss and prefetching must not change what
    is learned (training_runs.ACCUM_VARIANTS)."""
    losses = {}
    for name, run in accum_runs.items():
        assert run.done.returncode == 0, run.output
        losses[name] = losses_by_step(run.log)
    reference = losses["ddp-no-sync"]
    assert sorted(reference) == list(range(1, training_runs.ACCUM_STEPS + 1))
    for name, other in losses.items():
        # The chunked loss sums in another order: equal to float rounding, not bits.
        rel = 1e-4 if "chunked" in name else 1e-5
        for step, loss in reference.items():
            assert other[step] == pytest.approx(loss, rel=rel), (name, step)
