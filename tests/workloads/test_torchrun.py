"""Multi-process training on CPU under torchrun (gloo), as `make train` runs it, and the
fault paths: a worker killed mid-run and resumed, Ctrl-C and SIGTERM, a refusal in a
rank, FSDP2's sharded checkpoints.

The two-process runs that other tests also assert on are made once per session
(tests/workloads/training_runs.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
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
from workloads.data.byte_tokenizer import tokenize_files
from workloads.data.manifest import describe_shards, write_manifest
from workloads.training import launch, train
from workloads.training.checkpoint import complete_checkpoints
from workloads.training.config import DEFAULT_CORPUS, override, preset
from workloads.training.distributed import Topology

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


def _signal_when_logged(
    command: list[str], log: Path, records: int, sig: signal.Signals, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Start ``command``, send it ``sig`` once ``log`` holds ``records`` lines, and return
    how it ended (its stdout and stderr apart)."""
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and len(log.read_text().splitlines()) >= records):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        process.send_signal(sig)
        stdout, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def test_sigterm_and_ctrl_c_leave_checkpoints_the_next_run_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM to torchrun (what the kubelet sends a pod) and Ctrl-C on `make train`
    (SIGINT to the launcher) each stop the run after a step with a checkpoint, in one
    line and without a traceback, and the next run resumes from it."""
    ckpt, log = tmp_path / "ckpt", tmp_path / "log.jsonl"

    def args(steps: int) -> list[str]:
        return common_args(tmp_path, "--steps", str(steps), "--log-every", "1",
                           "--ckpt-dir", str(ckpt))  # fmt: skip

    env = torchrun_env() | {"TMPDIR": str(tmp_path)}
    # 1. torchrun as a pod runs it; SIGTERM after 3 logged steps.
    first = _signal_when_logged(
        torchrun_command("workloads.train", args(1_000_000)), log, 3, signal.SIGTERM, env
    )
    output = first.stdout + first.stderr
    assert "SIGTERM: stopped after step" in output, output
    saved = complete_checkpoints(ckpt)
    assert len(saved) == 1
    step = saved[0][0]
    assert step >= 3
    assert f"checkpoint: step {step} ->" in output
    # 2. `make train` resumes from it (the checkpoint is usable); Ctrl-C 3 steps later.
    logged = len(log.read_text().splitlines())
    launcher = [sys.executable, "-m", "workloads.training.launch", "--nproc", "2", "--"]
    second = _signal_when_logged(
        [*launcher, *args(1_000_000), "--corpus", str(DEFAULT_CORPUS)],
        log, logged + 3, signal.SIGINT, env,
    )  # fmt: skip
    assert second.returncode == 130, second
    assert second.stderr == "", second.stderr  # no rank's traceback, no ChildFailedError
    assert f"resume: from {ckpt / f'step_{step:08d}'} at step {step}" in second.stdout
    assert losses_by_step(log).keys() >= {step + 1, step + 2}
    (line,) = [line for line in second.stdout.splitlines() if line.startswith("SIGINT:")]
    assert line.startswith("SIGINT: stopped after step ") and line.endswith(" with a checkpoint")
    interrupted = int(line.split()[4])
    assert interrupted >= step + 3 and f"checkpoint: step {interrupted} ->" in second.stdout
    assert [s for s, _ in complete_checkpoints(ckpt)] == [step, interrupted]
    assert not list(tmp_path.glob("make-train-*"))  # the launcher's log went with it
    # 3. The next run resumes from the Ctrl-C checkpoint and finishes (in this process,
    # a world of one: DCP reshards the two ranks' state; no third torchrun start).
    config = override(
        preset("tiny"),
        {"data_dir": str(tmp_path / "data"), "log_jsonl": str(log), "metrics_port": "0",
         "steps": str(interrupted + 2), "log_every": "1", "ckpt_dir": str(ckpt)},
    )  # fmt: skip
    capsys.readouterr()
    assert train.run(config, Topology()) == train.EXIT_OK
    assert f"at step {interrupted}" in capsys.readouterr().out
    assert losses_by_step(log).keys() >= {interrupted + 1, interrupted + 2}


def test_a_refusal_in_a_rank_is_one_message_the_rest_in_a_log(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal the launcher could not see coming (a shard changed after its check):
    the rank's one message, exit 2, and the other rank's traceback and torchrun's
    ChildFailedError only in the log file whose path is printed."""
    data = tmp_path / "data"
    tokenize_files([DEFAULT_CORPUS], data)
    write_manifest(data, {"name": "t", "shards": describe_shards(data)})
    shard = data / "train_000000.bin"
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 0x01  # same size, one bit flipped
    shard.write_bytes(bytes(raw))
    for name, value in torchrun_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the launcher's log goes
    monkeypatch.chdir(REPO_ROOT)
    status = launch.run_workers(2, tiny_args(data, tmp_path / "log.jsonl", "--steps", "2"))
    out, err = capfd.readouterr()
    assert status == 2, (out, err)
    message, log_line = err.splitlines()[0], err.splitlines()[-1]
    assert message.startswith(f"train: the data directory {data} does not match its manifest")
    assert err.count("shard train_000000.bin changed: sha256") == 1
    assert "Traceback" not in out + err and "ChildFailedError" not in out + err
    prefix = "make train: the workers' and torchrun's errors are in "
    assert log_line.startswith(prefix)
    worker_log = Path(log_line.removeprefix(prefix))
    assert worker_log.parent.parent == tmp_path and "ChildFailedError" in worker_log.read_text()


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
