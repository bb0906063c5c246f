"""The trainer and a versioned dataset (`workloads.data.manifest`): a changed, missing or
extra shard is refused before step one, naming it, with exit 2 and no traceback; an
intact one trains and is recorded in MLflow as a dataset input whose digest is the
manifest digest. The datasets here are written with the byte tokenizer and the same
manifest code the Spark job uses (tests/data runs the Spark job itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.workloads.lifecycle_helpers import tiny_config, train_tiny
from workloads.data.byte_tokenizer import tokenize_files
from workloads.data.make_corpus import generate
from workloads.data.manifest import (
    MANIFEST,
    ManifestError,
    describe_shards,
    verify_dataset,
    write_manifest,
)
from workloads.training import train


def make_dataset(data_dir: Path, tmp_path: Path) -> str:
    """Shards of a generated corpus plus a manifest; returns the dataset version."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(generate(60_000), encoding="utf-8")
    tokenize_files([corpus], data_dir, shard_tokens=20_000)
    body = {
        "name": "oasis",
        "pipeline": {"name": "test", "version": "1"},
        "settings": {},
        "sources": [{"path": "corpus.txt", "bytes": corpus.stat().st_size, "sha256": "x"}],
        "shards": describe_shards(data_dir),
    }
    return write_manifest(data_dir, body)


def run_main(data_dir: Path, tmp_path: Path) -> int:
    return train.main(
        [
            "--preset", "tiny", "--steps", "2", "--metrics-port", "0",
            "--data-dir", str(data_dir), "--ckpt-dir", str(tmp_path / "ckpt"),
        ]
    )  # fmt: skip


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    data_dir = tmp_path / "data"
    make_dataset(data_dir, tmp_path)
    return data_dir


def test_intact_dataset_verifies_and_names_its_version(dataset: Path) -> None:
    ref = verify_dataset(dataset)
    body = json.loads((dataset / MANIFEST).read_text())
    assert ref is not None and ref.digest == body["digest"] and len(ref.digest) == 32
    assert ref.name == "oasis" and ref.source == str(dataset.resolve())
    assert set(ref.shards) == {p.name for p in dataset.glob("*.bin")}


def test_directory_without_manifest_is_not_checked(tmp_path: Path) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("abc " * 100, encoding="utf-8")
    tokenize_files([corpus], tmp_path / "plain")
    assert verify_dataset(tmp_path / "plain") is None


def test_tampered_shard_is_refused_by_name(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = dataset / "train_000001.bin"
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 0x01  # same size, one bit flipped in the last token
    shard.write_bytes(bytes(raw))
    assert run_main(dataset, tmp_path) == train.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "shard train_000001.bin changed: sha256" in err
    assert "Traceback" not in err and "train_000000.bin" not in err
    assert not (tmp_path / "ckpt").exists() or not list((tmp_path / "ckpt").glob("step_*"))


def test_truncated_shard_is_refused_by_size(dataset: Path) -> None:
    shard = dataset / "val_000000.bin"
    shard.write_bytes(shard.read_bytes()[:-2])
    with pytest.raises(ManifestError, match=r"shard val_000000\.bin changed: \d+ bytes"):
        verify_dataset(dataset)


def test_missing_shard_is_refused_by_name(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (dataset / "train_000002.bin").unlink()
    assert run_main(dataset, tmp_path) == train.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "shard train_000002.bin is missing (the manifest lists it)" in err
    assert "Traceback" not in err
    # The trainer did not fill the gap from the default corpus.
    assert not (dataset / "train_000002.bin").exists()


def test_extra_shard_is_refused_by_name(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (dataset / "train_000099.bin").write_bytes((dataset / "train_000000.bin").read_bytes())
    assert run_main(dataset, tmp_path) == train.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "shard train_000099.bin is extra (not in the manifest)" in err
    assert "Traceback" not in err


def test_edited_manifest_is_refused(dataset: Path) -> None:
    body = json.loads((dataset / MANIFEST).read_text())
    body["shards"][0]["tokens"] += 1
    (dataset / MANIFEST).write_text(json.dumps(body))
    with pytest.raises(ManifestError, match=r"manifest\.json was edited"):
        verify_dataset(dataset)


def test_foreign_manifest_is_refused(dataset: Path) -> None:
    (dataset / MANIFEST).write_text(json.dumps({"shards": []}))
    with pytest.raises(ManifestError, match="not a dataset manifest"):
        verify_dataset(dataset)


def test_tracked_run_logs_the_dataset_version_as_an_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    version = make_dataset(data_dir, tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    train_tiny(tiny_config(tmp_path, steps="2", log_every="1", tracking_uri=uri))
    out = capsys.readouterr().out
    assert f"data: dataset oasis version {version}" in out
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("training")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    inputs = run.inputs.dataset_inputs
    assert len(inputs) == 1
    logged = inputs[0].dataset
    assert logged.digest == version and logged.name == "oasis"
    assert json.loads(logged.source) == {"uri": str(data_dir.resolve())}
    assert {(t.key, t.value) for t in inputs[0].tags} == {("mlflow.data.context", "training")}
    assert run.data.params["data.version"] == version
