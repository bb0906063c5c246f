"""Export to ONNX with parity checks, and the inference library against PyTorch, on a
tiny model trained in the test; every bad input is one message and nothing written; the
export never destroys a folder it did not make, and its Triton repository is Triton's
own ``ModelConfig`` and matches the ONNX graph."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from google.protobuf import text_format

from tests.workloads.lifecycle_helpers import (
    model_config_class,
    tiny_config,
    torch_greedy,
    train_tiny,
    tree_digests,
)
from workloads.data.byte_tokenizer import decode_bytes, encode_bytes
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
from workloads.inference.source import load_model, resolve_checkpoint
from workloads.inference.triton import MAX_BATCH_SIZE, max_batch_size
from workloads.output_lock import acquire
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
        "triton",  # the same two models as a Triton model repository
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
    empty = tmp_path / "empty"
    empty.mkdir()
    _fails([str(empty), "--out", str(out)], capsys, "holds no complete checkpoint")
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


def test_a_corrupt_latest_checkpoint_falls_back_to_the_newest_intact_one(
    trained: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As training's resume does, but reading only: the corrupt step is named and the one
    taken said, in one line, and nothing in the run's folder is renamed or changed.
    Named explicitly, a corrupt step is an error; so is a folder of corrupt ones. (No
    export runs: the ONNX export would cost seconds, and what it exports is the step
    `resolve_checkpoint` gives, as the export from a run's folder above shows.)"""
    ckpt, _ = trained
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(ckpt / "run.json", run / "run.json")
    _, newest = complete_checkpoints(ckpt)[-1]
    for step in ("step_00000020", "step_00000030"):  # an older intact step, the newest
        shutil.copytree(newest, run / step)
    (run / "step_00000030" / ".metadata").write_bytes(b"not a pickle")
    before = tree_digests(run)
    said: list[str] = []
    assert resolve_checkpoint(run, say=said.append) == (20, run / "step_00000020")
    (line,) = said
    assert line.startswith(f"checkpoint {run / 'step_00000030'} (its .metadata cannot be read")
    assert line.endswith(f"taking step 20 ({run / 'step_00000020'}), the newest intact checkpoint")
    # The command says it once, as its own line (its OUT, a name Triton cannot take, is
    # refused after that, before any work; an OUT inside the run is refused before it).
    assert export_cli.main([str(run), "--out", str(tmp_path / "not a model name")]) == 2
    err = capsys.readouterr().err
    assert [e for e in err.splitlines() if "truncated or corrupt" in e] == [f"export: {line}"]
    assert "Traceback" not in err
    _fails([str(run / "step_00000030"), "--out", str(tmp_path / "a")], capsys, "is truncated or")
    (run / "step_00000020" / ".metadata").write_bytes(b"")
    _fails([str(run), "--out", str(tmp_path / "b")], capsys, "holds no intact checkpoint")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    (run / "step_00000020" / ".metadata").write_bytes((newest / ".metadata").read_bytes())
    assert tree_digests(run) == before  # nothing set aside, as a resume would
    assert not (run / "x").exists()


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


def _enum_name(message: Any, field: str) -> str:
    """The name of an enum field's value, read from the message's own descriptor."""
    enum = message.DESCRIPTOR.fields_by_name[field].enum_type
    return str(enum.values_by_number[getattr(message, field)].name)


_TRITON_TYPE = {onnx.TensorProto.INT64: "TYPE_INT64", onnx.TensorProto.FLOAT: "TYPE_FP32"}


def test_the_triton_repository_is_a_model_config_matching_the_graph(
    trained: tuple[Path, Path],
) -> None:
    _, out = trained
    model_config = model_config_class()  # Triton's own message, from tritonclient
    repo = out / "triton"
    assert sorted(p.name for p in repo.iterdir()) == ["tiny", "tiny-int8"]  # make serve's names
    for name, onnx_file in (("tiny", "model.onnx"), ("tiny-int8", "model.int8.onnx")):
        model_dir = repo / name
        assert sorted(str(p.relative_to(model_dir)) for p in model_dir.rglob("*")) == [
            "1",
            "1/model.onnx",
            "config.pbtxt",
        ]
        served = model_dir / "1" / "model.onnx"
        assert served.is_file() and not served.is_symlink()
        assert os.path.samefile(served, out / onnx_file)  # a hard link: no second copy
        config = text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config())
        assert config.name == name and config.backend == "onnxruntime" and not config.platform
        # 128-token context x 256 logit rows is small: the full batch of 32 applies.
        assert config.max_batch_size == max_batch_size(128, 256) == MAX_BATCH_SIZE
        assert config.WhichOneof("scheduling_choice") == "dynamic_batching"
        assert config.dynamic_batching.max_queue_delay_microseconds == 5000
        (group,) = config.instance_group
        assert group.count == 1 and _enum_name(group, "kind") == "KIND_GPU"
        graph = onnx.load(str(served)).graph
        initializers = {i.name for i in graph.initializer}
        graph_inputs = [v for v in graph.input if v.name not in initializers]
        pairs = [
            *zip(config.input, graph_inputs, strict=True),
            *zip(config.output, graph.output, strict=True),
        ]
        for declared, value in pairs:
            shape = [
                d.dim_value if d.HasField("dim_value") else -1
                for d in value.type.tensor_type.shape.dim
            ]
            assert declared.name == value.name
            assert (
                _enum_name(declared, "data_type") == _TRITON_TYPE[value.type.tensor_type.elem_type]
            )
            assert shape[0] == -1  # the batch axis Triton's dynamic batching fills ...
            assert list(declared.dims) == shape[1:]  # ... is left out of the declaration
        assert [(t.name, list(t.dims)) for t in config.input] == [("token_ids", [-1])]
        assert [(t.name, list(t.dims)) for t in config.output] == [("logits", [-1, 256])]
        # What dynamic batching does, done by hand: two requests joined along the batch
        # axis. fp32 rows never see each other; the int8 model quantises activations
        # with one scale per tensor, so a companion moves its logits slightly.
        session = ort.InferenceSession(str(served), providers=["CPUExecutionProvider"])
        rows = np.array([list(b"The fal"), list(b"and the")], dtype=np.int64)
        joined = session.run(None, {"token_ids": rows})[0]
        for i in range(2):
            alone = session.run(None, {"token_ids": rows[i : i + 1]})[0]
            assert np.abs(joined[i] - alone[0]).max() <= (1e-5 if name == "tiny" else 2e-2)


def test_export_refuses_a_foreign_folder_and_the_checkpoint_itself(
    trained: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt, out = trained
    foreign = tmp_path / "mine"
    (foreign / "sub").mkdir(parents=True)
    (foreign / "notes.txt").write_text("my notes")
    (foreign / "sub" / "data.bin").write_bytes(b"\x00\x01")
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    step = complete_checkpoints(ckpt)[-1][1]
    before = {p: tree_digests(p) for p in (foreign, ckpt)}
    before_file = a_file.read_text()

    _fails([str(ckpt), "--out", str(foreign)], capsys, f"OUT {foreign} is not an earlier export")
    _fails([str(ckpt), "--out", str(ckpt)], capsys, f"OUT {ckpt} is the checkpoint directory")
    # Given one step, the checkpoint directory is still the run's whole --ckpt-dir.
    _fails([str(step), "--out", str(ckpt)], capsys, "is the checkpoint directory")
    _fails([str(ckpt), "--out", str(step)], capsys, "is inside the checkpoint directory")
    _fails([str(ckpt), "--out", str(ckpt / "export")], capsys, "is inside the checkpoint")
    _fails([str(ckpt), "--out", str(ckpt.parent)], capsys, "contains the checkpoint directory")
    _fails([str(ckpt), "--out", str(a_file)], capsys, "it is a file, not a directory")
    assert {p: tree_digests(p) for p in (foreign, ckpt)} == before
    assert a_file.read_text() == before_file
    assert not (ckpt / "export").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs

    # An output another export is writing (it holds the lock beside it): refused at
    # once, naming that export, nothing written.
    busy = tmp_path / "busy"
    held = acquire(busy, "OUT", print)
    try:
        _fails([str(ckpt), "--out", str(busy)], capsys, f"OUT {busy} is being written by another")
    finally:
        held.release()
    assert not busy.exists()

    # An earlier export (here one from before Triton repositories, and of another step)
    # is replaced whole; the lock an export killed on the way left beside it is taken
    # over, saying so.
    earlier = tmp_path / "exports" / "tiny"
    shutil.copytree(out, earlier, ignore=shutil.ignore_patterns("triton"))
    card = read_card(earlier)
    stale = card.to_json().replace(f'"step": "{card.source["step"]}"', '"step": "0"')
    (earlier / "model_card.json").write_text(stale)
    killed = {"pid": 4194304, "host": "h", "started": "2026-11-29T09:00:00Z", "command": "x"}
    (tmp_path / "exports" / "tiny.lock").write_text(json.dumps(killed))
    capsys.readouterr()
    assert export_cli.main([str(ckpt), "--out", str(earlier)]) == 0
    assert capsys.readouterr().err == (
        f"export: taking over the lock {earlier}.lock of an earlier run that ended without "
        "releasing it (pid 4194304 on h, started 2026-11-29T09:00:00Z)\n"
    )
    assert read_card(earlier).source["step"] == "30"
    assert (earlier / "triton" / "tiny-int8" / "config.pbtxt").is_file()
    assert [p.name for p in earlier.parent.iterdir()] == ["tiny"]  # nothing aside, no lock

    # A file the user put into an export makes it theirs: refused, kept as it is.
    (earlier / "notes.txt").write_text("mine now")
    (earlier / "triton" / "tiny" / "README").write_text("mine too")
    before_user = tree_digests(earlier)
    _fails([str(ckpt), "--out", str(earlier)], capsys, "files an export does not write")
    assert tree_digests(earlier) == before_user


def test_export_into_an_empty_folder(trained: tuple[Path, Path], tmp_path: Path) -> None:
    ckpt, _ = trained
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_cli.main([str(ckpt), "--out", str(empty)]) == 0
    assert read_card(empty).name == "empty"
    assert (empty / "triton" / "empty" / "1" / "model.onnx").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["empty"]


def test_a_failure_mid_export_leaves_the_earlier_export_whole(
    trained: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ckpt, out = trained
    earlier = tmp_path / "tiny"
    shutil.copytree(out, earlier)
    before = tree_digests(earlier)

    # The disk fills while the Triton repository is half written.
    def disk_full(root: Path, *args: object, **kwargs: object) -> None:
        (root / "tiny" / "1").mkdir(parents=True)
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(export_cli, "write_repository", disk_full)
        _fails([str(ckpt), "--out", str(earlier)], capsys, "No space left on device")
    assert tree_digests(earlier) == before
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]

    # Renaming the new export in fails after the earlier one was moved aside: it is
    # renamed back.
    rename = Path.rename

    def failing_rename(self: Path, target: Any) -> Path:
        if self.name.startswith(".tiny.partial-"):
            raise OSError(5, "Input/output error")
        return rename(self, target)

    with monkeypatch.context() as patch:
        patch.setattr(Path, "rename", failing_rename)
        _fails([str(ckpt), "--out", str(earlier)], capsys, "Input/output error")
    assert tree_digests(earlier) == before
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]

    # Ctrl-C while the model is being exported: one line, exit 130, the earlier export
    # whole, its temporary directory and lock gone.
    def interrupted(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(export_cli, "export_onnx", interrupted)
        assert export_cli.main([str(ckpt), "--out", str(earlier)]) == export_cli.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "export: interrupted; nothing at the output was changed\n"
    assert tree_digests(earlier) == before
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]
