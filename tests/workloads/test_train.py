"""Training in this process (a world of one): loss falls, metrics are served, a
checkpoint resumes to the same losses, and data errors are one clear message."""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path

import pytest

from tests.workloads.helpers import free_port, losses_by_step, read_log, sigterm_restored
from workloads.training import train
from workloads.training.checkpoint import complete_checkpoints
from workloads.training.config import TrainConfig, override, preset
from workloads.training.distributed import Topology


def tiny(tmp_path: Path, **values: str) -> TrainConfig:
    base = {
        "data_dir": str(tmp_path / "data"),
        "log_jsonl": str(tmp_path / "log.jsonl"),
        "metrics_port": "0",
    }
    return override(preset("tiny"), base | values)


def test_loss_falls_over_a_short_cpu_run_and_metrics_are_served(tmp_path: Path) -> None:
    port = free_port()
    config = tiny(tmp_path, steps="40", log_every="10", metrics_port=str(port))
    with sigterm_restored():
        assert train.run(config, Topology()) == train.EXIT_OK
    log = read_log(tmp_path / "log.jsonl")
    assert [r["step"] for r in log] == [1, 10, 20, 30, 40]
    first, last = float(str(log[0]["loss"])), float(str(log[-1]["loss"]))
    assert first > 5.0  # ~ln(256): an untrained byte-level model
    assert last < first - 1.5, f"loss did not fall enough: {first} -> {last}"
    assert all(r["mfu"] is None for r in log)  # CPU: not applicable
    assert all(float(str(r["tokens_per_s"])) > 0 for r in log)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read().decode()
    assert "training_step 40.0" in body
    assert "training_tokens_per_second" in body and "training_data_wait_ratio" in body


def test_resume_from_a_checkpoint_gives_the_same_losses(tmp_path: Path) -> None:
    config = tiny(
        tmp_path, steps="8", log_every="1", ckpt_dir=str(tmp_path / "ckpt"), ckpt_every="4"
    )
    with sigterm_restored():
        assert train.run(config, Topology()) == train.EXIT_OK
    reference = losses_by_step(tmp_path / "log.jsonl")
    steps = [step for step, _ in complete_checkpoints(tmp_path / "ckpt")]
    assert steps == [4, 8]
    # Lose everything after step 4, as a crash would, and run the same job again.
    shutil.rmtree(tmp_path / "ckpt" / "step_00000008")
    (tmp_path / "log.jsonl").unlink()
    with sigterm_restored():
        assert train.run(config, Topology()) == train.EXIT_OK
    resumed = losses_by_step(tmp_path / "log.jsonl")
    assert sorted(resumed) == [5, 6, 7, 8]
    assert all(resumed[s] == reference[s] for s in resumed), (resumed, reference)


def test_finished_run_is_not_repeated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tiny(tmp_path, steps="2", ckpt_dir=str(tmp_path / "ckpt"))
    with sigterm_restored():
        assert train.run(config, Topology()) == train.EXIT_OK
        assert train.run(config, Topology()) == train.EXIT_OK
    assert "already at step 2 of 2" in capsys.readouterr().out


def test_bad_corpus_is_a_message_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sigterm_restored():
        status = train.main(
            [
                "--data-dir",
                str(tmp_path / "empty"),
                "--corpus",
                str(tmp_path / "missing.txt"),
                "--metrics-port",
                "0",
            ]
        )
    err = capsys.readouterr().err
    assert status == 2 and "missing.txt: no such file" in err and "Traceback" not in err


def test_mismatched_checkpoint_is_a_message_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sigterm_restored():
        assert train.run(tiny(tmp_path, steps="1", ckpt_dir=str(tmp_path / "c")), Topology()) == 0
        status = train.main(
            [
                "--data-dir",
                str(tmp_path / "data"),
                "--ckpt-dir",
                str(tmp_path / "c"),
                "--n-embd",
                "32",
                "--steps",
                "3",
                "--metrics-port",
                "0",
            ]
        )
    err = capsys.readouterr().err
    assert status == 2 and "does not fit this run" in err and "new directory" in err


def test_unwritable_checkpoint_directory_is_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with sigterm_restored():
        status = train.main(
            [
                "--data-dir",
                str(tmp_path / "data"),
                "--ckpt-dir",
                str(blocker / "ckpt"),
                "--steps",
                "1",
                "--metrics-port",
                "0",
            ]
        )
    err = capsys.readouterr().err
    assert status == 2 and "cannot create the checkpoint directory" in err
    assert "Traceback" not in err
