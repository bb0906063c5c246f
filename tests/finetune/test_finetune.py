"""`make finetune`: LoRA with PEFT on tiny Llama- and Falcon-style bases built from a config
(tests/finetune/conftest.py), a few steps each. The outputs are read back with PEFT's and
transformers' own loaders; the base folder is the same file for file afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.support.environments import run_in
from workloads.data.manifest import describe_shards, write_manifest
from workloads.data.shards import write_shard
from workloads.finetune import cli, lora

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [
    ("What is the capital of the UAE?\nAnswer:", " Abu Dhabi."),
    ("ما عاصمة الإمارات؟\nالجواب:", " أبوظبي."),  # noqa: RUF001 - Arabic text
    ("Which bird is the national bird? 🦅\nAnswer:", " The falcon."),
    ("How many emirates are there?\nAnswer:", " Seven."),
]
STEPS = ("--steps", "12", "--learning-rate", "2e-2", "--batch-size", "4", "--log-every", "4")


def digests(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root``, and its directories."""
    return {
        str(p.relative_to(root)): "dir"
        if p.is_dir()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def write_pairs(path: Path) -> Path:
    lines = [json.dumps({"prompt": p, "response": r}, ensure_ascii=False) for p, r in PAIRS]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class Run:
    base: Path
    data: Path
    out: Path
    base_before: dict[str, str]
    output: str


def _run(
    base: Path, data: Path, out: Path, capsys: pytest.CaptureFixture[str], *, flag: bool = False
) -> Run:
    """``flag``: the base as ``--base-model`` (how a cluster job names it)."""
    before = digests(base)
    named = ["--base-model", str(base)] if flag else [str(base)]
    assert cli.main([*named, "--data", str(data), "--out", str(out), *STEPS]) == 0
    return Run(base, data, out, before, capsys.readouterr().out)


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model(input_ids=ids).logits
    return out


def _check_outputs(run: Run) -> None:
    """What every run must give: the base unchanged, an adapter PEFT applies to the base,
    a merged folder AutoModelForCausalLM loads with the same logits, trained weights."""
    assert digests(run.base) == run.base_before  # the base folder is never changed
    assert sorted(p.name for p in run.out.iterdir()) == ["adapter", "finetune.json", "merged"]
    record = json.loads((run.out / "finetune.json").read_text())
    assert record["base"]["digest"] == lora.folder_digest(run.base)
    losses = [loss for _, loss in record["losses"]]
    assert losses[-1] < losses[0], losses  # it learned from the data
    assert 0 < record["trainable_parameters"] < record["total_parameters"]
    tokenizer = AutoTokenizer.from_pretrained(run.out / "merged")
    ids = tokenizer(PAIRS[1][0] + PAIRS[1][1], return_tensors="pt")["input_ids"]
    merged = AutoModelForCausalLM.from_pretrained(run.out / "merged").eval()
    base = AutoModelForCausalLM.from_pretrained(run.base).eval()
    before = _logits(base, ids)
    adapted = PeftModel.from_pretrained(base, run.out / "adapter").eval()
    expected = _logits(adapted, ids)
    torch.testing.assert_close(_logits(merged, ids), expected, rtol=0, atol=1e-4)
    assert float((expected - before).abs().max()) > 1e-3  # the adapter changed the model
    # The tokenizer is the base's, file for file.
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (run.out / "merged" / name).read_bytes() == (run.base / name).read_bytes()
    assert "loss" in run.output and "merged = adapted" in run.output


def test_lora_on_a_llama_style_base_from_prompt_response_pairs(
    llama_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(llama_base, write_pairs(tmp_path / "pairs.jsonl"), tmp_path / "out", capsys)
    _check_outputs(run)
    record = json.loads((run.out / "finetune.json").read_text())
    assert record["base"]["model_type"] == "llama" and record["data"]["kind"] == "jsonl"
    assert record["data"]["examples"] == str(len(PAIRS))
    config = json.loads((run.out / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 8
    # "all-linear": every projection of every layer (PEFT writes their full names).
    targets = {name.rsplit(".", 1)[-1] for name in config["target_modules"]}
    assert targets == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_lora_on_a_falcon_style_base_from_a_dataset_directory(
    falcon_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dataset as `make data` leaves it: byte-level token shards and a manifest."""
    data = tmp_path / "dataset"
    data.mkdir()
    text = "\n".join(p + r for p, r in PAIRS) * 20
    write_shard(data / "train_000000.bin", list(text.encode("utf-8")), 256)
    write_shard(data / "val_000000.bin", list(b"The falcon flies."), 256)
    digest = write_manifest(data, {"name": "qa", "shards": describe_shards(data)})
    run = _run(falcon_base, data, tmp_path / "out", capsys)
    _check_outputs(run)
    record = json.loads((run.out / "finetune.json").read_text())
    assert record["base"]["model_type"] == "falcon"
    assert record["data"] == {
        "path": str(data.resolve()),
        "kind": "shards",
        "digest": digest,
        "shards": "1",
    }
    config = json.loads((run.out / "adapter" / "adapter_config.json").read_text())
    targets = {name.rsplit(".", 1)[-1] for name in config["target_modules"]}
    assert targets == {"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"}


def test_make_data_then_a_llama_style_base_fine_tuned_and_registered(
    llama_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's path end to end, each step the verb's own module in its own
    environment: ``make data`` (Spark, the data environment) on a text source, ``make
    finetune`` on the dataset it wrote, ``make register-finetune`` (the lifecycle
    environment) into a local MLflow store; the version's tags name the base and the
    dataset's version."""
    source = tmp_path / "source"
    source.mkdir()
    lines = [f"Question {i}: {i} plus {i}? Answer: {2 * i}. Abu Dhabi." for i in range(100)]
    lines += [f"سؤال {i}: عاصمة الإمارات هي أبوظبي." for i in range(40)]
    (source / "qa.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = tmp_path / "dataset"
    run_in("data", "-m", "workloads.data.prepare", str(source), "--out", str(data))
    manifest = json.loads((data / "manifest.json").read_text())
    run = _run(llama_base, data, tmp_path / "out", capsys)
    _check_outputs(run)
    record = json.loads((run.out / "finetune.json").read_text())
    assert record["base"]["model_type"] == "llama" and record["data"]["kind"] == "shards"
    assert record["data"]["digest"] == manifest["digest"]
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    printed = run_in(
        "lifecycle", "-m", "workloads.tracking.register_finetune", str(run.out),
        "--name", "llama-ft", "--tracking-uri", store,
    )  # fmt: skip
    assert "models:/llama-ft/1" in printed
    tags = json.loads(
        run_in(
            "lifecycle", "-c",
            "import json, sys; from mlflow import MlflowClient; "
            f"print(json.dumps(MlflowClient({store!r}).get_model_version('llama-ft', '1').tags))",
        ).splitlines()[-1]
    )  # fmt: skip
    assert tags["base.digest"] == record["base"]["digest"]
    assert tags["base.model_type"] == "llama" and tags["mode"] == "lora"
    assert tags["data.digest"] == manifest["digest"]


def test_lora_on_a_gpt2_base_as_make_export_hf_writes_it(
    gpt2_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GPT-2's projections are Conv1D (weight transposed): PEFT's fan_in_fan_out. The
    base is named with ``--base-model``, as the cluster's fine-tuning job names it."""
    pairs = write_pairs(tmp_path / "pairs.jsonl")
    run = _run(gpt2_base, pairs, tmp_path / "out", capsys, flag=True)
    _check_outputs(run)
    config = json.loads((run.out / "adapter" / "adapter_config.json").read_text())
    assert config["fan_in_fan_out"] is True
    targets = {name.rsplit(".", 1)[-1] for name in config["target_modules"]}
    assert targets == {"c_attn", "c_proj", "c_fc"}
    # Only the tokenizer is copied from the base: its record describes the base.
    assert not (run.out / "merged" / "hf_export.json").exists()


def _one_line(capsys: pytest.CaptureFixture[str], needle: str) -> None:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("finetune: "), captured.err
    assert needle in lines[0], lines[0]


def test_bad_inputs_are_one_line_and_exit_2_with_nothing_changed(
    llama_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = write_pairs(tmp_path / "pairs.jsonl")
    out = str(tmp_path / "out")
    base = str(llama_base)

    def refused(args: list[str], needle: str) -> None:
        assert cli.main(args) == 2
        _one_line(capsys, needle)

    refused([str(tmp_path / "none"), "--data", str(pairs), "--out", out], "no such directory")
    refused([str(tmp_path), "--data", str(pairs), "--out", out], "has no config.json")
    refused([base, "--data", str(tmp_path / "none.jsonl"), "--out", out], "no such file")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "response": "b"}\n{"prompt": 1}\n')
    refused([base, "--data", str(bad), "--out", out], "line 2: expected")
    bad.write_text('{"prompt": "a", "response": "b"}\nnot json\n')
    refused([base, "--data", str(bad), "--out", out], "line 2: not JSON")
    refused([base, "--data", str(pairs), "--out", out, "--steps", "0"], "--steps: 1 to")
    refused([base, "--data", str(pairs), "--out", str(llama_base / "out")], "is inside")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("keep me")
    notes_before, base_before = digests(notes), digests(llama_base)
    refused([base, "--data", str(pairs), "--out", str(notes)], "not an earlier fine-tuning")
    # Shards with a base whose tokenizer is not byte-level.
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    write_shard(dataset / "train_000000.bin", list(range(200)) * 20, 256)
    other = tmp_path / "other-base"
    other.mkdir()
    for path in llama_base.iterdir():
        (other / path.name).write_bytes(path.read_bytes())
    tok = json.loads((other / "tokenizer.json").read_text())
    tok["model"]["vocab"] = {k: (v + 1) % 256 for k, v in tok["model"]["vocab"].items()}
    (other / "tokenizer.json").write_text(json.dumps(tok))
    refused([str(other), "--data", str(dataset), "--out", out], "does not give byte ids")
    assert digests(notes) == notes_before and digests(llama_base) == base_before
    # The base named twice (BASE and --base-model), or not at all: argparse's usage error.
    for args in ([base, "--base-model", base], []):
        with pytest.raises(SystemExit) as exited:
            cli.main([*args, "--data", str(pairs), "--out", out])
        assert exited.value.code == 2
        assert "give the base model's folder once" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_make_finetune_names_what_is_missing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    stamps = [".venv-finetune/.installed-torch", ".venv-finetune/.installed-finetune"]
    done = subprocess.run(
        ["make", "--no-print-directory", *(f"-o{s}" for s in stamps), "finetune", "BASE=x"],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines()[0].startswith("finetune: give DATA=")
