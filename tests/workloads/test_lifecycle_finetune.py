"""`make register-finetune`: a real `make finetune` output (the tiny Hugging Face export of a
trained checkpoint, fine-tuned by the finetune environment for a few steps) registered on
a local MLflow server, read back with ``mlflow.transformers.load_model``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.support.environments import run_in, tiny_hf_export
from tests.workloads.lifecycle_helpers import mlflow_server, tree_digests
from workloads.data.byte_tokenizer import encode_bytes
from workloads.llm.registry import fetch
from workloads.tracking import register_finetune as rf

PAIRS = [
    ("What is the capital of the UAE?\nAnswer:", " Abu Dhabi."),
    ("ما عاصمة الإمارات؟\nالجواب:", " أبوظبي."),  # noqa: RUF001 - Arabic text
    ("Which bird? 🦅\nAnswer:", " The falcon."),
]


@dataclass(frozen=True)
class Tuned:
    base: Path
    out: Path
    uri: str


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuned]:
    """The tiny export fine-tuned for 4 steps by ``python -m workloads.finetune`` in the
    finetune environment, and a tracking server (started meanwhile: both mostly wait on
    imports)."""
    root = tmp_path_factory.mktemp("ft")

    def finetuned() -> tuple[Path, Path]:
        base = tiny_hf_export(root)
        pairs = root / "pairs.jsonl"
        lines = [json.dumps({"prompt": p, "response": r}, ensure_ascii=False) for p, r in PAIRS]
        pairs.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out = root / "tuned"
        run_in(
            "finetune", "-m", "workloads.finetune", str(base), "--data", str(pairs),
            "--out", str(out), "--steps", "4", "--learning-rate", "2e-2", "--log-every", "2",
        )  # fmt: skip
        return base, out

    with ThreadPoolExecutor(max_workers=1) as pool:
        made = pool.submit(finetuned)
        with mlflow_server(root / "mlflow") as uri:
            base, out = made.result()  # a failed step fails the test here
            yield Tuned(base, out, uri)


def test_the_merged_model_is_a_version_mlflow_transformers_loads(
    tuned: Tuned,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tracked run with the record's parameters, losses and adapter; version 1 of
    ``tiny-ft`` tagged with the base and the adapter, whose pipeline's model gives the
    merged folder's logits; registering again makes no second version; OUT unchanged."""
    import mlflow.artifacts  # noqa: PLC0415
    import mlflow.transformers  # noqa: PLC0415
    from mlflow.tracking import MlflowClient  # noqa: PLC0415

    before = tree_digests(tuned.out)
    args = [str(tuned.out), "--name", "tiny-ft", "--tracking-uri", tuned.uri]
    assert rf.main(args) == 0
    printed = capsys.readouterr().out
    assert "mlflow.transformers.load_model('models:/tiny-ft/1')" in printed

    record = json.loads((tuned.out / "finetune.json").read_text())
    digest = hashlib.sha256((tuned.out / "finetune.json").read_bytes()).hexdigest()
    client = MlflowClient(tracking_uri=tuned.uri, registry_uri=tuned.uri)
    version = client.get_model_version("tiny-ft", "1")
    tags = version.tags
    assert tags["base.digest"] == record["base"]["digest"]
    assert tags["base.path"] == str(tuned.base.resolve()) and tags["base.model_type"] == "gpt2"
    assert tags["adapter"] == f"runs:/{version.run_id}/adapter"
    assert tags["data.digest"] == record["data"]["digest"] and tags[rf.RECORD_TAG] == digest
    assert {a: str(v) for a, v in client.get_registered_model("tiny-ft").aliases.items()} == {
        "champion": "1"
    }

    run = client.get_run(str(version.run_id))
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "finetune"
    params = run.data.params
    assert params["base.digest"] == record["base"]["digest"]
    assert params["data.kind"] == "jsonl" and params["data.examples"] == str(len(PAIRS))
    assert params["options.steps"] == "4" and params["options.rank"] == "8"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [tuple(x) for x in record["losses"]]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"finetune.json", "adapter"} <= artifacts
    adapter_files = {a.path for a in client.list_artifacts(run.info.run_id, "adapter")}
    written = {f"adapter/{p.name}" for p in (tuned.out / "adapter").iterdir()}
    assert adapter_files == written and "adapter/adapter_model.safetensors" in written

    monkeypatch.setenv("MLFLOW_TRACKING_URI", tuned.uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", tuned.uri)
    generator = mlflow.transformers.load_model("models:/tiny-ft/1")
    assert type(generator).__name__ == "TextGenerationPipeline"
    merged = AutoModelForCausalLM.from_pretrained(tuned.out / "merged")
    base = AutoModelForCausalLM.from_pretrained(tuned.base)  # from_pretrained: eval mode
    ids = encode_bytes(PAIRS[1][0] + PAIRS[1][1])[None, :]
    with torch.no_grad():
        got = generator.model(input_ids=ids).logits
        torch.testing.assert_close(got, merged(input_ids=ids).logits, rtol=0, atol=0)
        assert float((got - base(input_ids=ids).logits).abs().max()) > 1e-3  # fine-tuned
    # What `make serve-llm MODEL=models:/tiny-ft@champion` hands vLLM: the merged weights.
    served = fetch("models:/tiny-ft@champion", tuned.uri, tmp_path / "llm-models")
    with torch.no_grad():
        again = AutoModelForCausalLM.from_pretrained(served)(input_ids=ids).logits
        torch.testing.assert_close(again, got, rtol=0, atol=0)
    local = Path(mlflow.artifacts.download_artifacts(version.source))
    assert json.loads((local / "finetune.json").read_text())["base"] == record["base"]

    assert rf.main(args) == 0
    assert "already model 'tiny-ft' version 1" in capsys.readouterr().out
    assert [str(v.version) for v in client.search_model_versions("name='tiny-ft'")] == ["1"]
    assert tree_digests(tuned.out) == before  # OUT is only read


def test_a_sqlite_store_registers_it_too(
    tuned: Tuned, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TRACKING_URI=sqlite:///...`` (no server), as from the command line: MLflow's SQL
    registry looks a ``models:/<id>`` source up through the global tracking URI (by
    default ``./mlflow.db``, another store), which registration points at the store for
    that call."""
    from mlflow.tracking import MlflowClient  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)  # the store's artifacts go to ./mlruns
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'local.db'}"
    result = rf.register_finetune(tuned.out, uri, name="tiny-ft-local")
    assert (result.version, result.created, result.alias) == ("1", True, "champion")
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    assert client.get_model_version("tiny-ft-local", "1").tags["adapter"] == (
        f"runs:/{result.run_id}/adapter"
    )


def test_a_full_fine_tune_registers_without_an_adapter(
    tuned: Tuned, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make finetune ARGS=--full` (every weight, FSDP2; one process here) leaves no
    adapter: its merged model is registered with the record's mode, no adapter tag."""
    from mlflow.tracking import MlflowClient  # noqa: PLC0415

    out = tmp_path / "full"
    run_in(
        "finetune", "-m", "workloads.finetune", str(tuned.base),
        "--data", str(tuned.base.parent.parent / "pairs.jsonl"), "--out", str(out),
        "--full", "--steps", "2", "--learning-rate", "2e-2", "--log-every", "1",
    )  # fmt: skip
    assert not (out / "adapter").exists()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'full.db'}"
    result = rf.register_finetune(out, uri, name="tiny-full")
    assert (result.version, result.created) == ("1", True)
    tags = MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version("tiny-full", "1").tags
    assert tags["mode"] == "full" and "adapter" not in tags
    assert tags["base.digest"] == json.loads((out / "finetune.json").read_text())["base"]["digest"]


def _one_line(capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("register-finetune: "), captured.err
    for needle in needles:
        assert needle in captured.err, captured.err


def test_bad_outputs_names_and_servers_are_one_line_and_exit_2(
    tuned: Tuned, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = ["--tracking-uri", tuned.uri]
    assert rf.main([str(tmp_path / "nope"), *uri]) == 2
    _one_line(capsys, "no such directory")
    assert rf.main([str(tuned.base), *uri]) == 2  # a model folder, not a fine-tune
    _one_line(capsys, "is not a fine-tuning output (no finetune.json)")
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "finetune.json").write_bytes((tuned.out / "finetune.json").read_bytes())
    (copy / "adapter").mkdir()
    assert rf.main([str(copy), *uri]) == 2
    _one_line(capsys, "has no merged model (merged/config.json)")
    (copy / "finetune.json").write_text('{"base": {}}')
    assert rf.main([str(copy), *uri]) == 2
    _one_line(capsys, "not a fine-tuning record")
    assert rf.main([str(tuned.out), "--name", "bad name/x", *uri]) == 2
    _one_line(capsys, "NAME 'bad name/x' cannot name a registered model")
    assert rf.main([str(tuned.out), "--tracking-uri", "127.0.0.1:5000"]) == 2
    _one_line(capsys, "is not an http(s):// or sqlite:/// URI")
    # The discard port, where nothing listens here: the client gives up in seconds.
    dead = "http://127.0.0.1:9"
    assert rf.main([str(tuned.out), "--name", "other", "--tracking-uri", dead]) == 2
    _one_line(capsys, "cannot reach the tracking server at http://127.0.0.1:9")
