"""Multi-process training on CPU under torchrun (gloo), as `make train` runs it, and the
fault paths: a worker killed mid-run and resumed, SIGTERM, FSDP2's sharded checkpoints."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.workloads.helpers import (
    REPO_ROOT,
    losses_by_step,
    read_log,
    run_torchrun,
    tiny_args,
    torchrun_command,
    torchrun_env,
)
from workloads.training.checkpoint import complete_checkpoints

pytestmark = pytest.mark.slow


def common_args(tmp_path: Path, *extra: str) -> list[str]:
    return tiny_args(tmp_path / "data", tmp_path / "log.jsonl", *extra)


def test_two_processes_train_and_loss_falls(tmp_path: Path) -> None:
    done = run_torchrun("workloads.train", common_args(tmp_path, "--steps", "60"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "world 2 (1 node(s)), ddp" in done.stdout
    log = read_log(tmp_path / "log.jsonl")
    first, last = float(str(log[0]["loss"])), float(str(log[-1]["loss"]))
    assert last < first - 1.5, (first, last)
    assert "done: loss" in done.stdout


def test_killed_worker_resumes_to_the_same_losses(tmp_path: Path) -> None:
    reference_dir, faulty_dir = tmp_path / "reference", tmp_path / "faulty"
    args = ["--steps", "12", "--ckpt-every", "4", "--log-every", "1"]
    reference = run_torchrun(
        "workloads.train",
        common_args(reference_dir, *args, "--ckpt-dir", str(reference_dir / "ckpt")),
    )
    assert reference.returncode == 0, reference.stdout + reference.stderr
    # Rank 1 SIGKILLs itself after step 7 (first attempt only); torchrun restarts the
    # worker group, which resumes from the step-4 checkpoint.
    faulty = run_torchrun(
        "workloads.train",
        common_args(
            faulty_dir,
            *args,
            "--ckpt-dir",
            str(faulty_dir / "ckpt"),
            "--fault-kill-rank",
            "1",
            "--fault-kill-at-step",
            "7",
        ),
        max_restarts=1,
    )
    output = faulty.stdout + faulty.stderr
    assert faulty.returncode == 0, output
    assert "fault injection: SIGKILL after step 7" in output
    assert "resume: from" in output and "at step 4" in output
    records = read_log(faulty_dir / "log.jsonl")
    assert {r["restart"] for r in records} == {0, 1}
    assert [r["step"] for r in records if r["restart"] == 1] == list(range(5, 13))
    expected = losses_by_step(reference_dir / "log.jsonl")
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


def test_fsdp2_sharded_checkpoint_resumes_to_the_same_losses(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    args = common_args(
        tmp_path,
        "--parallelism",
        "fsdp2",
        "--steps",
        "6",
        "--ckpt-every",
        "3",
        "--log-every",
        "1",
        "--ckpt-dir",
        str(ckpt),
    )
    first = run_torchrun("workloads.train", args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "fsdp2" in first.stdout
    reference = losses_by_step(tmp_path / "log.jsonl")
    shutil.rmtree(ckpt / "step_00000006")  # lose the end of the run
    (tmp_path / "log.jsonl").unlink()
    second = run_torchrun("workloads.train", args)
    assert second.returncode == 0, second.stdout + second.stderr
    resumed = losses_by_step(tmp_path / "log.jsonl")
    assert sorted(resumed) == [4, 5, 6]
    assert all(resumed[s] == reference[s] for s in resumed), (resumed, reference)


def test_gradient_sync_skipping_and_fsdp2_train_the_same_model(tmp_path: Path) -> None:
    """Skipping the all-reduce on non-final micro-steps (DDP no_sync, FSDP2's
    set_requires_gradient_sync), the chunked loss and prefetching must not change what
    is learned."""
    losses = {}
    for name, extra in {
        "ddp-no-sync": ["--parallelism", "ddp", "--no-sync-accum", "on"],
        "ddp-sync-every-micro-step": ["--parallelism", "ddp", "--no-sync-accum", "off"],
        "fsdp2-no-sync": ["--parallelism", "fsdp2", "--no-sync-accum", "on"],
        # The chunked loss (its gradient returned for the FSDP2-sharded, tied LM head)
        # and the prefetching loader across ranks.
        "fsdp2-chunked-loss-prefetch": [
            "--parallelism",
            "fsdp2",
            "--chunked-loss",
            "on",
            "--loss-chunk-tokens",
            "100",
            "--prefetch",
            "on",
        ],
    }.items():
        run_dir = tmp_path / name
        done = run_torchrun(
            "workloads.train",
            common_args(
                run_dir, "--steps", "8", "--grad-accum-steps", "2", "--log-every", "1", *extra
            ),
        )
        assert done.returncode == 0, done.stdout + done.stderr
        losses[name] = losses_by_step(run_dir / "log.jsonl")
    reference = losses["ddp-no-sync"]
    assert sorted(reference) == list(range(1, 9))
    for name, other in losses.items():
        # The chunked loss sums in another order: equal to float rounding, not bits.
        rel = 1e-4 if "chunked" in name else 1e-5
        for step, loss in reference.items():
            assert other[step] == pytest.approx(loss, rel=rel), (name, step)
