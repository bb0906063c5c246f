"""The pipeline's lifecycle steps against a SQLite tracking store, read back with MLflow's
own client: the evaluation gate (`workloads.tracking.evaluate`) passes a first model,
stops a worse one with its message and exit status 1, passes a better one and the
champion itself, and records its figures on the run; the canary step
(`workloads.tracking.canary`) plans a first version as the stable one and a challenger
as a canary beside the champion, with `make promote`'s dry run, and changes nothing.

Run in the lifecycle environment (the Makefile's TESTS_lifecycle): tiny models trained
in-process on the shipped corpus's shards, registered with `make register`'s code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.workloads.lifecycle_helpers import tiny_config, train_tiny
from workloads.tracking import canary, evaluate, register
from workloads.training.lineage import read_run_record


@dataclass(frozen=True)
class Runs:
    root: Path
    uri: str
    data: Path
    ckpt: dict[str, Path]
    run_id: dict[str, str]


#: Optimizer steps of each tracked tiny run: more steps, lower held-out loss.
STEPS = {"good": "40", "worse": "2", "better": "120"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Three tracked runs on one dataset, and one untracked; the working directory is
    the store's root (a SQLite store keeps artifacts in ./mlruns, register exports into
    ./build/export)."""
    root = tmp_path_factory.mktemp("pipeline-steps")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    data = root / "data"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        ckpt, run_id = {}, {}
        for name, steps in [*STEPS.items(), ("untracked", "2")]:
            tracking = {} if name == "untracked" else {"tracking_uri": uri}
            config = tiny_config(root / name, steps=steps, data_dir=str(data), **tracking)
            train_tiny(config)
            ckpt[name] = root / name / "ckpt"
            record = read_run_record(ckpt[name])
            assert record is not None
            run_id[name] = record.tracking_run_id
        yield Runs(root, uri, data, ckpt, run_id)


def gate(runs: Runs, name: str, out: Path, *extra: str) -> tuple[int, dict[str, object]]:
    code = evaluate.main(
        [str(runs.ckpt[name]), "--data-dir", str(runs.data), "--tracking-uri", runs.uri,
         "--result", str(out / "result.json"), "--run-id-out", str(out / "run_id"),
         "--name-out", str(out / "name"), *extra]
    )  # fmt: skip
    result = json.loads((out / "result.json").read_text()) if code in (0, 1) else {}
    return code, result


def client(runs: Runs) -> MlflowClient:
    return MlflowClient(tracking_uri=runs.uri, registry_uri=runs.uri)


def aliases(runs: Runs) -> dict[str, str]:
    """The model's aliases (a SQLite store gives the versions as numbers)."""
    return {a: str(v) for a, v in client(runs).get_registered_model("tiny").aliases.items()}


def test_the_first_model_passes_with_no_champion(
    runs: Runs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result = gate(runs, "good", tmp_path)
    assert code == evaluate.EXIT_PASSED
    assert result["champion_version"] == "" and result["champion_heldout_loss"] is None
    assert result["passed"] is True and result["name"] == "tiny"
    assert (tmp_path / "run_id").read_text() == runs.run_id["good"]
    assert (tmp_path / "name").read_text() == "tiny"
    assert "has no 'champion' yet, so this run passes" in capsys.readouterr().out
    run = client(runs).get_run(runs.run_id["good"])
    assert run.data.metrics["eval.heldout_loss"] == pytest.approx(result["heldout_loss"])
    assert run.data.tags["eval.gate"] == "passed"
    assert run.data.tags["eval.champion_version"] == "none"


@pytest.fixture(scope="module")
def champion(runs: Runs) -> str:
    """The good run registered: version 1, the champion."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(runs.root)
        assert register.main([runs.run_id["good"], "--tracking-uri", runs.uri]) == 0
    assert aliases(runs) == {"champion": "1"}
    return "1"


def test_a_worse_model_stops_with_its_message(
    runs: Runs, champion: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result = gate(runs, "worse", tmp_path)
    assert code == evaluate.EXIT_WORSE
    assert result["passed"] is False and result["champion_version"] == champion
    assert result["heldout_loss"] > result["champion_heldout_loss"]
    err = capsys.readouterr().err
    assert "is WORSE than the champion (model 'tiny' version 1)" in err
    assert "the pipeline stops here and nothing is registered" in err
    run = client(runs).get_run(runs.run_id["worse"])
    assert run.data.tags["eval.gate"] == "failed"
    assert run.data.metrics["eval.champion_heldout_loss"] == pytest.approx(
        result["champion_heldout_loss"]
    )
    # An allowance that covers the gap lets it through: the gate is the comparison.
    gap = float(result["heldout_loss"]) - float(result["champion_heldout_loss"])
    code, allowed = gate(runs, "worse", tmp_path, "--max-regression", f"{gap + 0.01:.4f}")
    assert code == evaluate.EXIT_PASSED and allowed["passed"] is True


def test_a_better_model_and_the_champion_itself_pass(
    runs: Runs, champion: str, tmp_path: Path
) -> None:
    code, result = gate(runs, "better", tmp_path)
    assert code == evaluate.EXIT_PASSED, result
    assert result["heldout_loss"] < result["champion_heldout_loss"]
    # The champion's own checkpoint, in PyTorch, against its registered ONNX model: the
    # same figure up to the two runtimes' rounding, so no worse.
    code, same = gate(runs, "good", tmp_path)
    assert code == evaluate.EXIT_PASSED
    assert same["heldout_loss"] == pytest.approx(same["champion_heldout_loss"], rel=1e-6)
    # The two models were measured on the same held-out tokens.
    assert same["heldout_tokens"] == result["heldout_tokens"] > 0


def test_what_the_gate_cannot_measure_is_one_message(
    runs: Runs, champion: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = gate(runs, "untracked", tmp_path)
    assert code == evaluate.EXIT_USER_ERROR
    assert "was not tracked" in capsys.readouterr().err
    no_val = tmp_path / "no-val"
    no_val.mkdir()
    for shard in runs.data.glob("train_*.bin"):
        (no_val / shard.name).write_bytes(shard.read_bytes())
    code = evaluate.main(
        [str(runs.ckpt["good"]), "--data-dir", str(no_val), "--tracking-uri", runs.uri]
    )
    assert code == evaluate.EXIT_USER_ERROR
    assert "has no held-out shards" in capsys.readouterr().err
    code = evaluate.main(
        [str(tmp_path / "missing"), "--data-dir", str(runs.data), "--tracking-uri", runs.uri]
    )
    assert code == evaluate.EXIT_USER_ERROR
    assert "no such file or directory" in capsys.readouterr().err
    code, _ = gate(runs, "good", tmp_path, "--name", "my model")
    assert code == evaluate.EXIT_USER_ERROR
    assert "'my model' cannot name a Triton model" in capsys.readouterr().err


def test_the_first_version_is_planned_as_the_stable_one(
    runs: Runs, champion: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_file = tmp_path / "plan.json"
    code = canary.main(
        ["--run-id", runs.run_id["good"], "--name", "tiny", "--tracking-uri", runs.uri,
         "--stack", "uae-prod", "--plan", str(plan_file), "--version-out", str(tmp_path / "v")]
    )  # fmt: skip
    assert code == canary.EXIT_OK
    plan = json.loads(plan_file.read_text())
    assert (plan["version"], plan["alias"], plan["mode"]) == (champion, "champion", "stable")
    assert (tmp_path / "v").read_text() == champion
    key = "uae-gpu-platform:exampleService"
    assert f"pulumi config set --stack uae-prod --path '{key}.modelVersion' 1" in plan["commands"]
    assert plan["commands"][-1] == "pulumi up --stack uae-prod"
    assert plan["promote_preview"] == []
    assert "nothing to run a canary against" in capsys.readouterr().out


def test_a_challenger_is_planned_as_a_canary_and_nothing_moves(
    runs: Runs, champion: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(runs.root)
        assert register.main([runs.run_id["better"], "--tracking-uri", runs.uri]) == 0
    capsys.readouterr()
    before = aliases(runs)
    assert before == {"champion": "1", "challenger": "2"}
    plan_file = tmp_path / "plan.json"
    code = canary.main(
        ["--run-id", runs.run_id["better"], "--name", "tiny", "--tracking-uri", runs.uri,
         "--percent", "10", "--plan", str(plan_file)]
    )  # fmt: skip
    assert code == canary.EXIT_OK
    plan = json.loads(plan_file.read_text())
    assert (plan["version"], plan["alias"], plan["mode"]) == ("2", "challenger", "canary")
    key = "uae-gpu-platform:exampleService"
    assert f"pulumi config set --stack <stack> --path '{key}.canaryVersion' 2" in plan["commands"]
    assert (
        f"pulumi config set --stack <stack> --path '{key}.canaryTrafficPercent' 10"
        in plan["commands"]
    )
    preview = "\n".join(plan["promote_preview"])
    assert "would move" in preview and "champion: 1 -> 2" in preview
    assert "registry is unchanged (dry run)" in preview
    assert "is the challenger" in capsys.readouterr().out
    assert aliases(runs) == before  # nothing moved


def test_a_run_with_no_version_is_one_message(
    runs: Runs, champion: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = canary.main(
        ["--run-id", runs.run_id["worse"], "--name", "tiny", "--tracking-uri", runs.uri]
    )
    assert code == canary.EXIT_USER_ERROR
    assert f"has no version from run {runs.run_id['worse']}" in capsys.readouterr().err
