"""A run tracked end to end against a local MLflow server started here (`make track`'s
own command), registered as MLflow ONNX models with a Triton repository, and read back
through MLflow's client and the server's artifact store; a tracking server that is down
costs a warning, not the run; and a 2-process checkpoint exports."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.workloads.helpers import free_port, run_torchrun
from tests.workloads.lifecycle_helpers import mlflow_server, tiny_config, train_tiny
from workloads.inference import OnnxLM, read_card
from workloads.inference import export as export_cli
from workloads.layout import ARTIFACT_PREFIX, TRITON_STORAGE_PATH
from workloads.tracking import promote, register
from workloads.training.lineage import read_run_record


@pytest.mark.slow
def test_run_is_tracked_and_registered_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # register exports into ./build/export/
    with mlflow_server(tmp_path / "mlflow") as uri:
        config = tiny_config(tmp_path, steps="20", tracking_uri=uri)
        train_tiny(config)
        record = read_run_record(tmp_path / "ckpt")
        assert record is not None and record.tracking_run_id
        run_id = record.tracking_run_id

        assert register.main([run_id, "--tracking-uri", uri]) == 0
        assert f"version 1 on {uri}" in capsys.readouterr().out
        assert register.main(["0123456789abcdef", "--tracking-uri", uri]) == 2
        assert "no run '0123456789abcdef'" in capsys.readouterr().err

        client = MlflowClient(tracking_uri=uri)
        run = client.get_run(run_id)
        assert run.info.status == "FINISHED"
        params = run.data.params
        assert params["model.n_layer"] == "2" and params["seq_len"] == "64"
        assert params["world_size"] == "1" and len(params["data.shards_sha256"]) == 64
        assert run.data.tags["mlflow.source.git.commit"]
        assert run.data.tags["checkpoint"].endswith("step_00000020")
        steps = [m.step for m in client.get_metric_history(run_id, "tokens_per_s")]
        assert steps == [1, 10, 20]
        assert {"loss", "step_time_s", "tflops", "data_wait_ratio"} <= set(run.data.metrics)
        assert "checkpoint" in {a.path for a in client.list_artifacts(run_id)}

        (version,) = client.search_model_versions(f"name='{config.preset}'")
        assert version.run_id == run_id and str(version.version) == "1"
        assert version.source.startswith("models:/m-")
        assert float(version.tags["parity.int8_loss"]) > 0
        # The server proxies artifacts as the cluster's does (into s3://<bucket>/mlflow/
        # there, build/mlflow/artifacts here): the Triton repository is at the storage
        # path register printed, relative to that root.
        path = version.tags["storage_path.triton"]
        assert TRITON_STORAGE_PATH.match(path)
        repo = tmp_path / "mlflow" / "artifacts" / path.removeprefix(ARTIFACT_PREFIX)
        assert (repo / config.preset / "config.pbtxt").is_file()
        assert (repo / f"{config.preset}-int8" / "1" / "model.onnx").is_file()
        cpu = (
            tmp_path
            / "mlflow"
            / "artifacts"
            / version.tags["storage_path.cpu"].removeprefix(ARTIFACT_PREFIX)
        )
        assert OnnxLM.load(cpu, "int8").vocab_size == 256  # what CPU pools serve
        # The registered export serves.
        lm = OnnxLM.load(tmp_path / "build" / "export" / f"run-{run_id}")
        assert read_card(tmp_path / "build" / "export" / f"run-{run_id}").source["run_id"] == run_id
        assert len(lm.generate_text(["The "], 4)[0]) >= 1


def test_training_carries_on_when_the_tracking_server_is_down(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    train_tiny(tiny_config(tmp_path, steps="3", log_every="1", tracking_uri=dead))
    captured = capsys.readouterr()
    assert "tracking WARNING: cannot start an MLflow run at " + dead in captured.err
    assert "training carries on untracked" in captured.err
    assert "done: loss" in captured.out
    record = read_run_record(tmp_path / "ckpt")
    assert record is not None and record.tracking_run_id == ""


@pytest.mark.slow
def test_a_two_process_checkpoint_exports(tmp_path: Path) -> None:
    result = run_torchrun(
        "workloads.train",
        [
            "--preset", "tiny", "--steps", "6", "--log-every", "3", "--metrics-port", "0",
            "--data-dir", str(tmp_path / "data"), "--ckpt-dir", str(tmp_path / "ckpt"),
        ],
        nproc=2,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "export"
    assert export_cli.main([str(tmp_path / "ckpt"), "--out", str(out)]) == 0
    card = read_card(out)
    assert card.source["step"] == "6"
    assert card.parity.fp32_max_abs_logit_diff <= 1e-3


def test_register_against_an_unreachable_server_is_one_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    assert register.main(["0123456789abcdef", "--tracking-uri", dead]) == 2
    err = capsys.readouterr().err
    assert f"cannot reach the tracking server at {dead}" in err and "Traceback" not in err
    assert register.main(["  ", "--tracking-uri", dead]) == 2
    assert "RUN= is empty" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("not-a-url", "is not an http(s):// or sqlite:/// URI"),
        ("ftp://127.0.0.1:5000", "is not an http(s):// or sqlite:/// URI"),
        ("http://", "names no server (host and port)"),
        ("http://127.0.0.1:50o0", "is not a URL (Port could not be cast to integer value"),
        ("sqlite://", "names no database file"),
    ],
)
def test_a_tracking_uri_that_is_no_server_is_one_message_and_writes_nothing(
    uri: str,
    why: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checked before MLflow is asked: it takes a URI without a scheme for a folder to
    make a file store in (here, in the working directory), and fails on the rest with
    its own traceback."""
    monkeypatch.chdir(tmp_path)
    hint = "give the server's URL, e.g. TRACKING_URI=http://127.0.0.1:5000"
    for verb, main, argv in (
        ("register", register.main, ["0123456789abcdef"]),
        ("promote", promote.main, ["promote", "--name", "tiny"]),
    ):
        status = main([*argv, "--tracking-uri", uri])
        err = capsys.readouterr().err
        assert status == 2, err
        assert err.startswith(f"{verb}: the tracking URI {uri!r} {why}") and hint in err
        assert len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
