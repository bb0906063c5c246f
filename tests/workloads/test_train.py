"""Training in this process (a world of one): loss falls, metrics are served, a
checkpoint resumes to the same losses, and data errors are one clear message."""

from __future__ import annotations

import os
import shutil
import signal
import urllib.request
from pathlib import Path

import pytest

from tests.workloads.helpers import free_port, losses_by_step, read_log, sigterm_restored
from workloads.training import train
from workloads.training.checkpoint import Checkpointer, complete_checkpoints
from workloads.training.config import TrainConfig, override, preset
from workloads.training.deepspeed_engine import DeepSpeedCheckpointer
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


def test_resume_from_a_checkpoint_gives_the_same_losses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
    # A damaged newest checkpoint (its .metadata cut short) is named, set aside, and the
    # run resumes from the one before it, to the same losses.
    metadata = tmp_path / "ckpt" / "step_00000008" / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:40])
    (tmp_path / "log.jsonl").unlink()
    capsys.readouterr()
    with sigterm_restored():
        assert train.run(config, Topology()) == train.EXIT_OK
    out = capsys.readouterr().out
    assert (
        f"resume: checkpoint {tmp_path / 'ckpt' / 'step_00000008'} is corrupt: its .metadata "
        in out
    )
    assert "set aside as step_00000008.corrupt" in out and "at step 4" in out
    assert (tmp_path / "ckpt" / "step_00000008.corrupt" / ".metadata").is_file()
    resumed = losses_by_step(tmp_path / "log.jsonl")
    assert all(resumed[s] == reference[s] for s in resumed) and sorted(resumed) == [5, 6, 7, 8]


def test_ctrl_c_in_process_stops_after_the_step_with_a_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A world of one: SIGINT during step 3 stops the run after it, with a checkpoint,
    status 130, and pytest's own Ctrl-C handler is back afterwards."""
    config = tiny(tmp_path, steps="50", log_every="1", ckpt_dir=str(tmp_path / "ckpt"))
    original = train._maybe_inject_fault  # called after every step: Ctrl-C comes there

    def interrupt_at_step_3(
        config: TrainConfig,
        topology: Topology,
        number: int,
        checkpointer: Checkpointer | DeepSpeedCheckpointer | None,
    ) -> None:
        original(config, topology, number, checkpointer)
        if number == 3:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(train, "_maybe_inject_fault", interrupt_at_step_3)
    previous = signal.getsignal(signal.SIGINT)
    assert train.run(config, Topology()) == 130
    assert signal.getsignal(signal.SIGINT) == previous
    assert "SIGINT: stopped after step 3 with a checkpoint" in capsys.readouterr().out
    assert [step for step, _ in complete_checkpoints(tmp_path / "ckpt")] == [3]


def test_the_metrics_endpoint_binds_the_configured_address(tmp_path: Path) -> None:
    port = free_port()
    config = tiny(tmp_path, metrics_port=str(port), metrics_host="127.0.0.1")
    exporter = train._start_exporter(config, Topology(), train.RunLog(False, None))
    assert exporter is not None and exporter.bound == ("127.0.0.1", port)
    # A pod binds every interface (the cluster's Prometheus scrapes it over the pod
    # network; its trainer arguments name no address); `make train` passes 127.0.0.1.
    assert preset("tiny").metrics_host == "0.0.0.0"


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
