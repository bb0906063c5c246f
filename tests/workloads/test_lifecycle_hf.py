"""`make export-hf`: a trained tiny checkpoint as a Hugging Face folder, read back with
transformers' own loaders (``AutoModelForCausalLM``, ``AutoTokenizer``, ``pipeline``) and,
registered by `make register`, with ``mlflow.transformers.load_model``."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.support.environments import ROOT
from tests.workloads.lifecycle_helpers import tiny_config, torch_greedy, train_tiny, tree_digests
from workloads.data.byte_tokenizer import decode_bytes, encode_bytes
from workloads.inference import hf_export
from workloads.inference.errors import ExportError
from workloads.inference.source import load_model, resolve_checkpoint
from workloads.output_lock import lock_path
from workloads.training.config import TrainConfig
from workloads.training.lineage import read_run_record
from workloads.training.model import GPT

TEXTS = [
    "The falcon flies over the desert.",
    "مرحبا بالعالم، هذه الإمارات العربية المتحدة",  # Arabic
    "emoji 🦅🇦🇪👍🏽 and ZWJ 👩‍💻",
    "  two  spaces , before punctuation .\n\ttab\r\n",
    "<|endoftext|> is text here, not a token",
    "mixed: Dubai دبي 2026 — ok",
]


@dataclass(frozen=True)
class Exported:
    root: Path
    config: TrainConfig
    ckpt: Path
    out: Path
    model: GPT


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    """A tiny model trained for 20 steps (this process, as the registry tests train)
    and exported with the command's own entry point."""
    root = tmp_path_factory.mktemp("hf")
    config = tiny_config(root, steps="20")
    train_tiny(config)
    out = root / "export" / "tiny-hf"
    assert hf_export.main([str(root / "ckpt"), "--out", str(out)]) == 0
    _, step_dir = resolve_checkpoint(root / "ckpt")
    yield Exported(root, config, root / "ckpt", out, load_model(step_dir, config))


def test_the_folder_loads_with_automodel_and_gives_the_trainers_logits(
    exported: Exported,
) -> None:
    assert sorted(p.name for p in exported.out.iterdir()) == sorted(hf_export.EXPORT_FILES)
    config = json.loads((exported.out / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["architectures"] == ["GPT2LMHeadModel"]
    shape = exported.config.model
    assert (config["n_layer"], config["n_head"], config["n_embd"]) == (2, 2, 64)
    assert config["n_positions"] == shape.block_size and config["vocab_size"] == 256
    assert config["eos_token_id"] is None and config["bos_token_id"] is None
    model = AutoModelForCausalLM.from_pretrained(exported.out).eval()
    assert type(model).__name__ == "GPT2LMHeadModel"
    # Real text of several lengths, up to the whole context, in one batch per length.
    for length in (1, 7, shape.block_size):
        ids = torch.stack([encode_bytes(t * 40)[:length] for t in TEXTS[:3]])  # (3, length)
        with torch.no_grad():
            expected = exported.model.logits(ids)
            got = model(input_ids=ids).logits
        assert got.shape == expected.shape == (3, length, 256)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    record = hf_export.read_record(exported.out)
    assert record.architecture == "GPT2LMHeadModel" and record.heldout_tokens > 0
    assert record.max_abs_logit_diff <= record.logit_atol
    assert record.source["step"] == "20" and record.source["checkpoint"].endswith("step_00000020")


def test_generate_greedy_equals_the_trainers_greedy_decoding(exported: Exported) -> None:
    model = AutoModelForCausalLM.from_pretrained(exported.out).eval()
    tokenizer = AutoTokenizer.from_pretrained(exported.out)
    prompt = tokenizer("The ", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=16, do_sample=False)
    new = out[0, prompt["input_ids"].shape[1] :].tolist()
    assert new == torch_greedy(exported.model, list(b"The "), 16, 256)
    # Nothing ends generation but the length: the byte vocabulary has no EOS.
    assert len(new) == 16


def test_the_tokenizer_gives_the_trainers_byte_ids_and_decodes_back(
    exported: Exported,
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(exported.out)
    assert len(tokenizer) == 256 and tokenizer.all_special_ids == []
    for text in TEXTS:
        ids = tokenizer(text)["input_ids"]  # add_special_tokens: nothing is added
        assert ids == encode_bytes(text).tolist(), text
        assert tokenizer.decode(ids) == text
    # Bytes that are not UTF-8 (a reply cut inside a character) decode as the trainer's.
    for broken in ([0xF0, 0x9F], [72, 0xFF, 105], [0xD8], list("دبي".encode())[:-1]):
        assert tokenizer.decode(broken) == decode_bytes(broken)
    config = json.loads((exported.out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_the_chat_template_frames_messages_as_text(exported: Exported) -> None:
    tokenizer = AutoTokenizer.from_pretrained(exported.out)
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "مرحبا"},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "System: Answer briefly.\nUser: مرحبا\nAssistant:"
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert list(ids) == list(text.encode())
    config = json.loads((exported.out / "tokenizer_config.json").read_text())
    assert config["chat_template"] == hf_export.CHAT_TEMPLATE


def test_exporting_again_replaces_the_earlier_export(
    exported: Exported, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (exported.out / "model.safetensors").read_bytes()
    assert hf_export.main([str(exported.ckpt), "--out", str(exported.out)]) == 0
    assert (exported.out / "model.safetensors").read_bytes() == before
    assert not lock_path(exported.out).exists()
    leftovers = [p.name for p in exported.out.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []
    assert "parity on 256 held-out tokens" in capsys.readouterr().out


def _one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert lines and lines[0].startswith("export-hf: "), captured.err
    assert "Traceback" not in captured.err
    for needle in needles:
        assert needle in captured.err, captured.err


def test_bad_inputs_are_one_message_and_exit_2_with_nothing_changed(
    exported: Exported, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = str(exported.ckpt)
    # No such checkpoint; a folder that holds none.
    assert hf_export.main([str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    _one_line_error(capsys, "no such file or directory")
    (tmp_path / "empty").mkdir()
    assert hf_export.main([str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    _one_line_error(capsys, "holds no complete checkpoint")
    # A user's folder as OUT: refused before any work, not a byte changed.
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("keep me")
    before = tree_digests(tmp_path)
    assert hf_export.main([ckpt, "--out", str(notes)]) == 2
    _one_line_error(capsys, "not an earlier Hugging Face export", "todo.txt")
    assert tree_digests(tmp_path) == before
    # An earlier export with a file of the user's added is not replaced either.
    (tmp_path / "mine").mkdir()
    for name in hf_export.EXPORT_FILES:
        (tmp_path / "mine" / name).write_bytes((exported.out / name).read_bytes())
    (tmp_path / "mine" / "README.md").write_text("my notes")
    before = tree_digests(tmp_path)
    assert hf_export.main([ckpt, "--out", str(tmp_path / "mine")]) == 2
    _one_line_error(capsys, "files export-hf does not write: README.md")
    assert tree_digests(tmp_path) == before
    # OUT inside the checkpoint directory; a plain file as OUT.
    ckpt_before = tree_digests(exported.ckpt)
    assert hf_export.main([ckpt, "--out", str(exported.ckpt / "hf")]) == 2
    _one_line_error(capsys, "never writes into a checkpoint")
    assert tree_digests(exported.ckpt) == ckpt_before
    (tmp_path / "file").write_text("x")
    assert hf_export.main([ckpt, "--out", str(tmp_path / "file")]) == 2
    _one_line_error(capsys, "is a file")
    # A model of another shape than the run record says (a wrong override).
    assert hf_export.main([ckpt, "--out", str(tmp_path / "o"), "--n-layer", "3"]) == 2
    _one_line_error(capsys, "holds a different model")
    # A vocabulary that is not the byte tokenizer's: the tokenizer is not in the checkpoint.
    assert hf_export.main([ckpt, "--out", str(tmp_path / "o"), "--vocab-size", "512"]) == 2
    _one_line_error(capsys, "byte tokenizer")
    assert not (tmp_path / "o").exists()


def test_make_export_hf_without_ckpt_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv-lifecycle/.installed-torch",
         "-o", ".venv-lifecycle/.installed-lifecycle", "export-hf", f"OUT={tmp_path / 'x'}"],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        "export-hf: give CKPT=<a training run's --ckpt-dir or one of its step_<N> folders>"
    )
    assert not (tmp_path / "x").exists()


def test_the_export_refuses_what_does_not_match_the_trainer(
    exported: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parity check fails the export (and writes nothing) when the folder's model
    is not the trainer's: here the projections are mapped without the transpose
    Hugging Face's Conv1D needs (a square c_proj still loads)."""
    real = hf_export.gpt2_state_dict

    def untransposed(model: GPT) -> dict[str, torch.Tensor]:
        state = real(model)
        for key in [k for k in state if k.endswith("attn.c_proj.weight")]:
            state[key] = state[key].t().contiguous()
        return state

    monkeypatch.setattr(hf_export, "gpt2_state_dict", untransposed)
    record = read_run_record(exported.ckpt)
    assert record is not None
    with pytest.raises(ExportError, match="parity failed"):
        hf_export.export_hf(exported.ckpt, tmp_path / "bad", record.config)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_register_logs_a_transformers_model_that_mlflow_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make register` of a tracked run: beside the ONNX version, version 1 of
    ``tiny-hf``, a transformers-flavor model that ``mlflow.transformers.load_model``
    loads as a text-generation pipeline with the export's weights; registering again
    makes no second version."""
    import mlflow.pyfunc  # noqa: PLC0415
    import mlflow.transformers  # noqa: PLC0415
    from mlflow.tracking import MlflowClient  # noqa: PLC0415

    from workloads.tracking import register  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)  # register exports into ./build/, MLflow's files in ./mlruns
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = tiny_config(tmp_path, steps="20", tracking_uri=uri)
    train_tiny(config)
    record = read_run_record(tmp_path / "ckpt")
    assert record is not None and record.tracking_run_id
    run_id = record.tracking_run_id
    assert register.main([run_id, "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "mlflow.transformers.load_model('models:/tiny-hf/1')" in out

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    version = client.get_model_version("tiny-hf", "1")
    assert version.run_id == run_id and version.tags["checkpoint_step"] == "20"
    assert version.tags["onnx_model_version"] == "models:/tiny/1"
    assert client.get_model_version("tiny", "1").tags["transformers_model_uri"] == (
        "models:/tiny-hf/1"
    )
    assert {a: str(v) for a, v in client.get_registered_model("tiny-hf").aliases.items()} == {
        "champion": "1"
    }
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    generator = mlflow.transformers.load_model("models:/tiny-hf/1")
    assert type(generator).__name__ == "TextGenerationPipeline"
    export = tmp_path / "build" / "export-hf" / f"run-{run_id}"
    assert hf_export.read_record(export).source["run_id"] == run_id
    reference = AutoModelForCausalLM.from_pretrained(export).eval()
    ids = encode_bytes(TEXTS[1])[None, :]
    with torch.no_grad():
        torch.testing.assert_close(
            generator.model(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=0, atol=0
        )
    _, step_dir = resolve_checkpoint(tmp_path / "ckpt")
    trained = load_model(step_dir, config)
    greedy = generator("The ", max_new_tokens=8, do_sample=False)[0]["generated_text"]
    assert greedy == "The " + decode_bytes(torch_greedy(trained, list(b"The "), 8, 256))
    # The pyfunc flavor too, with the signature's params (its text comes back stripped).
    pyfunc = mlflow.pyfunc.load_model("models:/tiny-hf/1")
    predicted = pyfunc.predict(["The "], params={"max_new_tokens": 8, "do_sample": False})
    assert predicted == [greedy.strip()]
    local = Path(mlflow.artifacts.download_artifacts(version.source))
    assert json.loads((local / hf_export.RECORD_FILE).read_text())["source"]["step"] == "20"

    capsys.readouterr()
    assert register.main([run_id, "--tracking-uri", uri]) == 0
    assert "models:/tiny-hf/1" in capsys.readouterr().out
    assert [str(v.version) for v in client.search_model_versions("name='tiny-hf'")] == ["1"]


def test_a_pruned_mlp_exports_and_pruned_heads_are_refused(
    exported: Exported, tmp_path: Path
) -> None:
    """`make prune`'s narrower MLP is GPT-2's ``n_inner`` (logits equal the trainer's);
    heads narrower than n_embd / n_head have no GPT2Config field: refused, nothing written."""
    from dataclasses import replace  # noqa: PLC0415

    record = read_run_record(exported.ckpt)
    assert record is not None
    narrow = replace(record.config.model, mlp_width=3 * record.config.model.n_embd)
    torch.manual_seed(0)
    model = GPT(narrow).eval()
    hf = hf_export.to_hf(model).eval()
    tokens = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        expected = model.logits(tokens)[..., : hf.config.vocab_size]
        assert torch.allclose(hf(tokens).logits, expected, atol=1e-5)
    headless = replace(record.config, model=replace(narrow, head_dim=16))
    with pytest.raises(ExportError, match="cannot express pruned heads"):
        hf_export.export_hf(exported.ckpt, tmp_path / "out", headless)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
