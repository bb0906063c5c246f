"""`make register` against a SQLite tracking store in a temporary directory, read back
with MLflow's own client and loaders: each version is an MLflow ONNX model that runs in
ONNX Runtime, registering twice gives one version, the Triton repository sits where the
stacks' Triton services point, and promote/rollback move the aliases (dry runs do not).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import mlflow
import mlflow.onnx
import mlflow.pyfunc
import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from mlflow.tracking import MlflowClient

from tests.workloads.helpers import free_port
from tests.workloads.lifecycle_helpers import model_config_class, tiny_config, train_tiny
from workloads.inference import OnnxLM, read_card
from workloads.layout import TRITON_DIR, TRITON_STORAGE_PATH, triton_storage_path
from workloads.tracking import promote, register
from workloads.training.lineage import read_run_record

ROOT = Path(__file__).resolve().parents[2]
TOKENS = np.array([list(b"The falcon")], dtype=np.int64)


@dataclass(frozen=True)
class Registry:
    root: Path
    uri: str
    run_ids: tuple[str, str]

    def export_dir(self, run_id: str) -> Path:
        return self.root / "build" / "export" / f"run-{run_id}"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """Two tracked tiny runs in a SQLite store; the working directory is the store's
    root (MLflow keeps a SQLite store's artifacts in ./mlruns, register exports into
    ./build/export)."""
    root = tmp_path_factory.mktemp("registry")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        runs = []
        for name in ("a", "b"):
            config = tiny_config(root / name, steps="20", tracking_uri=uri)
            train_tiny(config)
            record = read_run_record(root / name / "ckpt")
            assert record is not None and record.tracking_run_id
            runs.append(record.tracking_run_id)
        yield Registry(root, uri, (runs[0], runs[1]))


def _logits(model_file: Path) -> Any:
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    return session.run(None, {"token_ids": TOKENS})[0]


def test_a_registered_version_is_an_mlflow_onnx_model(
    registry: Registry, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = registry.run_ids[0]
    fluent_uri = mlflow.get_tracking_uri()
    assert register.main([first, "--tracking-uri", registry.uri]) == 0
    assert mlflow.get_tracking_uri() == fluent_uri  # the process is not left repointed
    out = capsys.readouterr().out
    assert f"model 'tiny' version 1 on {registry.uri}" in out
    assert "alias 'champion' now names version 1" in out
    client = MlflowClient(tracking_uri=registry.uri, registry_uri=registry.uri)
    version = client.get_model_version("tiny", "1")
    export = registry.export_dir(first)
    assert read_card(export).source["run_id"] == first

    # The version's source is the fp32 MLflow model, not the checkpoint.
    assert version.source.startswith("models:/m-") and version.run_id == first
    logged = client.get_logged_model(version.source.removeprefix("models:/"))
    assert logged.name == "tiny" and logged.source_run_id == first
    # models:/ URIs resolve in the registry the environment names (undone after the test).
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", registry.uri)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", registry.uri)
    proto = mlflow.onnx.load_model("models:/tiny/1")
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    expected_fp32 = _logits(export / "model.onnx")
    assert np.array_equal(session.run(None, {"token_ids": TOKENS})[0], expected_fp32)
    pyfunc = mlflow.pyfunc.load_model("models:/tiny/1")
    assert np.array_equal(pyfunc.predict({"token_ids": TOKENS})["logits"], expected_fp32)
    # The int8 model is an MLflow model of its own, named by the version's tag.
    int8 = mlflow.pyfunc.load_model(version.tags["int8_model_uri"])
    expected_int8 = _logits(export / "model.int8.onnx")
    assert np.array_equal(int8.predict({"token_ids": TOKENS})["logits"], expected_int8)

    # Signature and input example: token ids in, logits out, read from the graph.
    info = mlflow.models.get_model_info("models:/tiny/1")
    signature = info.signature
    assert [(t.name, str(t.type), t.shape) for t in signature.inputs.inputs] == [
        ("token_ids", "int64", (-1, -1))
    ]
    assert [(t.name, str(t.type), t.shape) for t in signature.outputs.inputs] == [
        ("logits", "float32", (-1, -1, 256))
    ]
    assert info.saved_input_example_info is not None
    assert info.metadata is not None and info.metadata["variant"] == "fp32"

    # Beside model.onnx: its own card, the parity figures, the drift reference and the
    # dataset record; the downloaded directory is an export the CPU library loads.
    local = Path(mlflow.artifacts.download_artifacts("models:/tiny/1"))
    assert {"MLmodel", "model.onnx", "model_card.json", "parity.json"} <= {
        p.name for p in local.iterdir()
    }
    assert {"drift_reference.json", "dataset.json", TRITON_DIR} <= {p.name for p in local.iterdir()}
    assert read_card(local).files == {"fp32": "model.onnx"}
    assert json.loads((local / "parity.json").read_text())["int8_loss"] == pytest.approx(
        read_card(export).parity.int8_loss
    )
    assert len(OnnxLM.load(local, "fp32").generate_text(["The "], 4)[0]) >= 1
    # Its requirements: what the ONNX pyfunc imports, pinned to this environment.
    assert (local / "requirements.txt").read_text().split() == [
        f"{package}=={metadata.version(package)}"
        for package in ("mlflow", "numpy", "onnx", "onnxruntime")
    ]

    # The dataset the run trained on: its digest as a tag and, per shard, an artifact.
    run = client.get_run(first)
    shards_sha256 = run.data.params["data.shards_sha256"]
    assert version.tags["data.shards_sha256"] == shards_sha256 and len(shards_sha256) == 64
    dataset = json.loads((local / "dataset.json").read_text())
    assert dataset["data.shards_sha256"] == shards_sha256
    lineage = json.loads(Path(client.download_artifacts(first, "lineage.json")).read_text())
    assert dataset["train_shards_sha256"] == lineage["train_shards_sha256"]
    assert version.tags["run_id"] == first and version.tags["checkpoint_step"] == "20"
    assert version.tags["export_digest"] == register.export_digest(export, read_card(export))


def test_registering_the_same_run_again_returns_its_version(
    registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    first = registry.run_ids[0]
    client = MlflowClient(tracking_uri=registry.uri, registry_uri=registry.uri)
    if not client.search_model_versions("name='tiny'"):
        assert register.main([first, "--tracking-uri", registry.uri]) == 0
    experiment = client.get_run(first).info.experiment_id
    models_before = len(client.search_logged_models(experiment_ids=[experiment]))
    capsys.readouterr()
    assert register.main([first, "--tracking-uri", registry.uri]) == 0
    out = capsys.readouterr().out
    assert f"run {first} (checkpoint step 20) is already model 'tiny' version 1" in out
    assert "nothing new was registered" in out
    assert [str(v.version) for v in client.search_model_versions("name='tiny'")] == ["1"]
    assert len(client.search_logged_models(experiment_ids=[experiment])) == models_before


def test_the_triton_repository_is_where_the_stacks_triton_services_point(
    registry: Registry,
) -> None:
    first = registry.run_ids[0]
    client = MlflowClient(tracking_uri=registry.uri, registry_uri=registry.uri)
    if not client.search_model_versions("name='tiny'"):
        assert register.main([first, "--tracking-uri", registry.uri]) == 0
    version = client.get_model_version("tiny", "1")
    experiment = client.get_run(first).info.experiment_id
    # register's storage path is the layout's, for this version's fp32 model ...
    path = version.tags["storage_path.triton"]
    assert path == triton_storage_path(experiment, version.source.removeprefix("models:/"))
    assert TRITON_STORAGE_PATH.match(path)
    # ... and names files register wrote: below the artifact root (./mlruns here,
    # s3://<bucket>/mlflow/ on the cluster), a Triton repository of both models.
    repo = registry.root / "mlruns" / path.removeprefix("mlflow/")
    assert sorted(p.name for p in repo.iterdir()) == ["tiny", "tiny-int8"]
    model_config = model_config_class()
    export = registry.export_dir(first)
    for name, file in (("tiny", "model.onnx"), ("tiny-int8", "model.int8.onnx")):
        config = text_format.Parse((repo / name / "config.pbtxt").read_text(), model_config())
        assert config.name == name and config.backend == "onnxruntime"
        assert (repo / name / "1" / "model.onnx").read_bytes() == (export / file).read_bytes()

    # The shipped stacks' Triton services point at paths of this same pattern
    # (tests/k8s/test_triton_storage_paths.py, in the plan environment).


def test_promote_and_rollback_move_the_aliases(
    registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = registry.run_ids
    uri = registry.uri
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    if not client.search_model_versions("name='tiny'"):
        assert register.main([first, "--tracking-uri", uri]) == 0
    capsys.readouterr()
    # Right after the first registration there is nothing to promote: one line that
    # says what makes a challenger.
    assert promote.main(["promote", "--name", "tiny", "--tracking-uri", uri, "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        "promote: model 'tiny' has no 'challenger' alias, so there is nothing to promote yet: "
        "version 1, its only version, is the champion already. `make register RUN=<id>` of a "
        "newer run makes its version the challenger; `make promote` then makes that the "
        "champion\n"
    )
    # A second run's version becomes the challenger, with the canary rollout printed.
    assert register.main([second, "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "model 'tiny' version 2" in out and "alias 'challenger' now names version 2" in out
    v2 = client.get_model_version("tiny", "2")
    assert (
        "pulumi config set --stack <stack> --path 'uae-gpu-platform:exampleService."
        f"canaryStoragePath' '{v2.tags['storage_path.triton']}'"
    ) in out

    def aliases() -> dict[str, str]:
        return {a: str(v) for a, v in client.get_registered_model("tiny").aliases.items()}

    assert aliases() == {"champion": "1", "challenger": "2"}

    assert promote.main(["promote", "--name", "tiny", "--tracking-uri", uri, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would move" in out and "champion: 1 -> 2" in out and "previous: (none) -> 1" in out
    assert aliases() == {"champion": "1", "challenger": "2"}  # a dry run changes nothing

    argv = ["--name", "tiny", "--tracking-uri", uri, "--stack", "uae-prod"]
    assert promote.main(["promote", *argv]) == 0
    out = capsys.readouterr().out
    assert aliases() == {"champion": "2", "previous": "1"}
    key = "'uae-gpu-platform:exampleService"
    assert f"pulumi config set --stack uae-prod --path {key}.modelVersion' 2" in out
    assert (
        f"pulumi config set --stack uae-prod --path {key}.storagePath' "
        f"'{v2.tags['storage_path.triton']}'" in out
    )
    assert f"pulumi config rm --stack uae-prod --path {key}.canaryVersion'" in out
    assert "pulumi up --stack uae-prod" in out

    # Nothing left to promote: one message, no traceback, nothing changed.
    assert promote.main(["promote", *argv]) == 2
    err = capsys.readouterr().err
    assert "model 'tiny' has no 'challenger' alias" in err and "Traceback" not in err
    assert "its newest version, 2, is the champion already" in err
    assert aliases() == {"champion": "2", "previous": "1"}

    assert promote.main(["rollback", *argv, "--dry-run", "--runtime", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "champion: 2 -> 1" in out and aliases() == {"champion": "2", "previous": "1"}
    v1 = client.get_model_version("tiny", "1")
    assert f"{key}.storagePath' '{v1.tags['storage_path.cpu']}'" in out
    assert promote.main(["rollback", *argv]) == 0
    assert aliases() == {"champion": "1"}
    capsys.readouterr()
    assert promote.main(["rollback", *argv]) == 2
    assert "has no 'previous' alias" in capsys.readouterr().err


def test_promote_errors_are_one_message(
    registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert promote.main(["promote", "--name", "nope", "--tracking-uri", registry.uri]) == 2
    err = capsys.readouterr().err
    assert "no registered model 'nope'" in err and "Traceback" not in err
    # A server that is down, as a user meets it: the command in a process of its own.
    dead = f"http://127.0.0.1:{free_port()}"
    result = subprocess.run(
        [
            *(sys.executable, "-m", "workloads.tracking.promote", "rollback"),
            *("--name", "tiny", "--tracking-uri", dead),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"rollback: cannot reach the tracking server at {dead}")
    assert len(result.stderr.splitlines()) == 1
    assert promote.main(["promote", "--tracking-uri", dead]) == 2
    assert "make promote NAME=<model>" in capsys.readouterr().err


def test_the_readmes_tracked_walkthrough_trains_new_runs_and_promotes_a_challenger() -> None:
    """The README's "Tracked, registered and promoted" commands, as the test above runs
    their steps (run by hand end to end with `make`): each training run writes a
    checkpoint folder of its own (training resumes a folder's finished run and makes no
    new one), and `make promote` comes after a second registration, the one that makes
    a challenger (after the first there is nothing to promote)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Tracked, registered and promoted")
    section = text[start : text.index("\n## ", start + 1)]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    commands = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    verbs = [shlex.split(c)[1] for c in commands]
    assert verbs[0] == "track" and verbs.count("train") == 2
    folders = [re.search(r"--ckpt-dir (\S+)", c) for c in commands if " train " in f" {c} "]
    ckpt_dirs = [m.group(1).strip('"') for m in folders if m]
    earlier = re.findall(r"--ckpt-dir (\S+)", text[:start])
    assert len(set(ckpt_dirs)) == 2 and not set(ckpt_dirs) & {d.strip('"') for d in earlier}
    first_promote = verbs.index("promote")
    assert verbs[:first_promote].count("register") == 2
    assert verbs.index("register") > verbs.index("train")
