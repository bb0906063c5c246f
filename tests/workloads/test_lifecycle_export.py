"""Export to ONNX with parity checks, and the inference library against PyTorch, on a
tiny model trained in the test; every bad input is one message and nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from tests.workloads.lifecycle_helpers import tiny_config, torch_greedy, train_tiny
from workloads.data.tokenize import decode_bytes, encode_bytes
from workloads.inference import (
    ByteTokenizer,
    ContextLengthError,
    ExportError,
    InvalidInputError,
    OnnxLM,
    SessionSettings,
    UnmappableInputError,
    read_card,
)
from workloads.inference import export as export_cli
from workloads.inference.export import ExportOptions, export_checkpoint
from workloads.inference.source import load_model
from workloads.training.checkpoint import complete_checkpoints


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(checkpoint root, export dir) of a tiny model trained for 30 steps."""
    tmp = tmp_path_factory.mktemp("lifecycle")
    config = tiny_config(tmp)
    train_tiny(config)
    out = tmp / "export" / "tiny"
    assert export_cli.main([str(tmp / "ckpt"), "--out", str(out)]) == 0
    return tmp / "ckpt", out


def test_export_passes_parity_and_writes_a_model_card(trained: tuple[Path, Path]) -> None:
    _, out = trained
    card = read_card(out)
    assert sorted(p.name for p in out.iterdir()) == [
        "drift_reference.json",  # the training data's statistics, for the server's drift
        "model.int8.onnx",
        "model.onnx",
        "model_card.json",
    ]
    assert card.files == {"fp32": "model.onnx", "int8": "model.int8.onnx"}
    assert card.tokenizer == "byte-utf8" and card.vocab_size == 256 and card.opset >= 18
    assert card.source["step"] == "30" and card.source["checkpoint"].endswith("step_00000030")
    parity = card.parity
    assert parity.fp32_max_abs_logit_diff <= 1e-3
    assert abs(parity.fp32_loss - parity.torch_loss) < 1e-4
    assert parity.int8_loss <= parity.fp32_loss * 1.02
    assert parity.torch_loss < 4.0  # trained: well below ln(256) = 5.55
    # Every block's four weight matmuls run as int8 (MatMulInteger) in the int8 model.
    ops = [node.op_type for node in onnx.load(str(out / "model.int8.onnx")).graph.node]
    assert ops.count("MatMulInteger") == 4 * card.model.n_layer
    assert "MatMulInteger" not in {n.op_type for n in onnx.load(str(out / "model.onnx")).graph.node}
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no leftovers


def test_greedy_generation_matches_pytorch_token_for_token(trained: tuple[Path, Path]) -> None:
    ckpt, out = trained
    _, step_dir = complete_checkpoints(ckpt)[-1]
    lm = OnnxLM.load(out, "fp32", SessionSettings(intra_op_threads=1))
    model = load_model(step_dir, tiny_config(ckpt.parent))
    prompts = [list(b"The "), list(b"and then the"), list(b"A")]
    expected = [torch_greedy(model, prompt, 24, 256) for prompt in prompts]
    assert lm.generate(prompts, 24) == expected  # one ragged batch
    assert [lm.generate([p], 24)[0] for p in prompts] == expected
    text = lm.generate_text(["The "], 24)[0]
    assert text == bytes(expected[0]).decode("utf-8", errors="replace")
    # Logits of the library equal PyTorch's within the export's tolerance.
    logits = lm.logits([prompts[1]])
    with torch.no_grad():
        ref = model.logits(torch.tensor([prompts[1]])).numpy()[..., :256]
    assert np.abs(logits - ref).max() <= 1e-3


def test_sampling_is_seeded_and_top_k_bounded(trained: tuple[Path, Path]) -> None:
    lm = OnnxLM.load(trained[1], "int8")
    first = lm.generate([list(b"The ")], 16, temperature=0.9, top_k=5, seed=7)
    assert first == lm.generate([list(b"The ")], 16, temperature=0.9, top_k=5, seed=7)
    # top_k=1 is greedy whatever the temperature.
    assert lm.generate([list(b"The ")], 8, temperature=2.0, top_k=1, seed=3) == lm.generate(
        [list(b"The ")], 8
    )


def test_library_rejects_bad_requests_with_typed_errors(trained: tuple[Path, Path]) -> None:
    lm = OnnxLM.load(trained[1], "int8")
    with pytest.raises(ContextLengthError, match="context is 128"):
        lm.generate([[65] * 120], 16)
    with pytest.raises(ContextLengthError):
        lm.logits([[65] * 129])
    with pytest.raises(UnmappableInputError, match="cannot map"):
        lm.generate_text(["ok \udcff"], 4)
    with pytest.raises(UnmappableInputError, match="outside the vocabulary"):
        lm.logits([[65, 300]])
    with pytest.raises(InvalidInputError, match="one length"):
        lm.logits([[65], [65, 66]])
    with pytest.raises(InvalidInputError, match="empty"):
        lm.generate([[]], 4)
    with pytest.raises(InvalidInputError, match="temperature"):
        lm.generate([[65]], 4, temperature=-1)
    with pytest.raises(ExportError, match=r"no model_card\.json"):
        OnnxLM.load(trained[0])


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str], match: str) -> None:
    assert export_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert match in err, err
    assert "Traceback" not in err and len(err.splitlines()) < 15


def test_export_bad_inputs_are_one_message_and_write_nothing(
    trained: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt, _ = trained
    out = tmp_path / "out"
    _fails([str(tmp_path / "nowhere"), "--out", str(out)], capsys, "no such file or directory")
    _fails([str(tmp_path), "--out", str(out)], capsys, "holds no complete checkpoint")
    # A checkpoint of another shape (the run record says 2 layers; claim 3).
    _fails([str(ckpt), "--out", str(out), "--n-layer", "3"], capsys, "different model")
    # An interrupted save (no .metadata) and a truncated data file.
    _, step_dir = complete_checkpoints(ckpt)[-1]
    broken = tmp_path / "broken" / "step_00000030"
    shutil.copytree(step_dir, broken)
    shutil.copy(ckpt / "run.json", broken.parent / "run.json")
    data = max(broken.glob("*.distcp"), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[:100])
    _fails([str(broken), "--out", str(out)], capsys, "truncated or corrupt")
    (broken / ".metadata").unlink()
    _fails([str(broken), "--out", str(out)], capsys, "incomplete")
    # A DeepSpeed engine's checkpoint (complete by its own marker): named, not "corrupt".
    deepspeed_run = tmp_path / "deepspeed"
    (deepspeed_run / "step_00000004").mkdir(parents=True)
    (deepspeed_run / "step_00000004" / "deepspeed.json").write_text("{}")
    for target in (deepspeed_run, deepspeed_run / "step_00000004"):
        _fails([str(target), "--out", str(out)], capsys, "written by the DeepSpeed engine")
    # An output directory that cannot be created (its parent is a file).
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _fails([str(ckpt), "--out", str(blocker / "out")], capsys, "cannot write the export")
    assert not out.exists()


def test_failed_parity_leaves_nothing_behind(trained: tuple[Path, Path], tmp_path: Path) -> None:
    ckpt, _ = trained
    out = tmp_path / "exports" / "tiny"
    # A negative margin no int8 model can meet: the export must fail as a whole.
    with pytest.raises(ExportError, match="parity failed: int8 loss"):
        export_checkpoint(
            ckpt, out, tiny_config(ckpt.parent), options=ExportOptions(int8_loss_margin=-1.0)
        )
    assert list(out.parent.iterdir()) == []


def test_library_tokenizer_is_the_training_tokenizer() -> None:
    text = "The falcon 🦅 — صقر\n"
    tokenizer = ByteTokenizer()
    assert tokenizer.encode(text) == [int(t) for t in encode_bytes(text)]
    assert tokenizer.decode(tokenizer.encode(text)) == decode_bytes(encode_bytes(text)) == text
