"""``make prune``: the importance scores and the pruned shapes, pruning units that
contribute nothing leaves the logits unchanged, a pruned checkpoint of the session's
DDP run round-trips and resumes, and bad inputs are one line each."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import cast

import pytest
import torch

from tests.workloads import training_runs
from tests.workloads.helpers import losses_by_step, sigterm_restored
from tests.workloads.training_runs import TrainerRun
from workloads.training import distill, prune, train
from workloads.training.checkpoint import complete_checkpoints
from workloads.training.config import ModelConfig, preset
from workloads.training.distributed import Topology
from workloads.training.lineage import read_run_record
from workloads.training.model import GPT, Block


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> TrainerRun:
    """The shared two-rank tiny run (tests/workloads/training_runs.py): what is pruned."""
    run = training_runs.ddp_run(tmp_path_factory)
    assert run.done.returncode == 0, run.output[-3000:]
    return run


def _block(model: GPT, layer: int) -> Block:
    return cast(Block, model.blocks[layer])


def _model(n_head: int = 4) -> GPT:
    torch.manual_seed(0)
    config = ModelConfig(n_layer=2, n_head=n_head, n_embd=64, block_size=32, vocab_size=256)
    return GPT(config).eval()


def _ids(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (3, 32), generator=torch.Generator().manual_seed(seed))


def test_units_that_contribute_nothing_score_zero_and_pruning_them_changes_no_logit() -> None:
    model = _model()
    dim = model.config.attn_head_dim  # 16
    silent_heads = [1, 2]  # in block 0; head 3 in block 1
    silent_neurons = list(range(0, 256, 2))  # half of each MLP
    with torch.no_grad():
        for layer, heads in ((0, silent_heads), (1, [3])):
            for head in heads:
                _block(model, layer).attn.c_proj.weight[:, head * dim : (head + 1) * dim] = 0
            _block(model, layer).mlp.c_proj.weight[:, silent_neurons] = 0
    scores = prune.importance(model, [_ids(2), _ids(3)])
    assert scores.heads.shape == (2, 4) and scores.neurons.shape == (2, 256)
    assert scores.heads[0, silent_heads].abs().max() == 0 and scores.heads[1, 3] == 0
    assert scores.heads[0, [0, 3]].min() > 0 and scores.neurons[:, 1::2].min() > 0
    assert scores.neurons[:, silent_neurons].abs().max() == 0
    # One head and half the neurons go from each block: the silent ones.
    keep_heads = prune.kept(scores.heads, 1)
    keep_neurons = prune.kept(scores.neurons, 128)
    assert keep_heads[1] == [0, 1, 2] and 3 not in keep_heads[1]
    assert keep_neurons == [list(range(1, 256, 2))] * 2
    pruned = prune.prune_model(model, keep_heads, keep_neurons).eval()
    config = pruned.config
    assert (config.n_head, config.head_dim, config.mlp_width) == (3, 16, 128)
    assert config.attn_width == 48 and config.n_embd == 64
    attn, mlp = _block(pruned, 0).attn, _block(pruned, 0).mlp
    assert tuple(attn.c_attn.weight.shape) == (3 * 48, 64)
    assert tuple(attn.c_proj.weight.shape) == (64, 48)
    assert tuple(mlp.c_fc.weight.shape) == (128, 64)
    assert tuple(mlp.c_proj.weight.shape) == (64, 128)
    with torch.no_grad():
        before, after = model.logits(_ids(4)), pruned.logits(_ids(4))
    # Block 0 lost one of its two silent heads: nothing it computed reached the output.
    assert torch.allclose(before, after, atol=1e-5), (before - after).abs().max()
    assert pruned.num_parameters() < model.num_parameters()


def test_pruning_a_head_that_contributes_changes_the_logits() -> None:
    """The equivalence above is not vacuous: removing a working head is visible."""
    model = _model()
    pruned = prune.prune_model(model, [[1, 2, 3], [1, 2, 3]], [list(range(256))] * 2).eval()
    with torch.no_grad():
        assert not torch.allclose(model.logits(_ids()), pruned.logits(_ids()), atol=1e-3)


def test_a_pruned_config_keeps_the_head_width() -> None:
    config = prune.pruned_config(preset("small").model, heads=2, mlp_width=256)
    assert (config.n_head, config.attn_head_dim, config.attn_width) == (2, 32, 64)
    assert config.mlp_hidden == 256
    model = GPT(config)
    ids = _ids()[:, :16]
    assert tuple(model.logits(ids).shape) == (3, 16, 256)


@pytest.mark.parametrize(
    ("raw", "total", "removed"), [("0.5", 4, 2), ("1", 4, 1), ("0", 4, 0), ("0.25", 512, 128)]
)
def test_amounts_are_fractions_with_a_point_and_counts_without(
    raw: str, total: int, removed: int
) -> None:
    assert prune.parse_amount(raw, total, "HEADS") == removed


@pytest.mark.parametrize(
    ("raw", "message"),
    [("1.0", "must be a fraction in [0, 1)"), ("4", "removes all 4"), ("x", "not a number")],
)
def test_bad_amounts_say_what_to_give(raw: str, message: str) -> None:
    with pytest.raises(distill.DistillError, match=message.replace("[", r"\[").replace(")", r"\)")):
        prune.parse_amount(raw, 4, "HEADS")


def test_prunes_a_checkpoint_that_exports_load_and_the_trainer_resumes(
    tmp_path: Path, ddp_run: TrainerRun, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pruned"
    args = ["--ckpt", str(ddp_run.ckpt), "--out", str(out), "--heads", "1", "--mlp", "0.5"]
    args += ["--steps", "2", "--calibration-batches", "2"]
    with sigterm_restored():
        assert prune.main(args) == distill.EXIT_OK
    printed = capsys.readouterr().out
    assert "held-out loss" in printed and "before recovery" in printed
    # Step 0 (the pruned weights) and the end of the recovery.
    assert [s for s, _ in complete_checkpoints(out)] == [0, 2]
    marker = json.loads((out / "prune.json").read_text())
    assert len(marker["kept_heads"]) == 2 and all(len(h) == 1 for h in marker["kept_heads"])
    record = read_run_record(out)
    assert record is not None
    shape = record.config.model
    assert (shape.n_head, shape.head_dim, shape.mlp_width) == (1, 32, 128)
    # The round trip through the checkpoint: the run record's model takes the weights.
    model = distill.load_source_model(distill.find_source(out), torch.device("cpu"))
    assert tuple(_block(model, 0).attn.c_attn.weight.shape) == (96, 64)
    # The trainer resumes it with the run record's config (as make train does with
    # --n-head 1 --head-dim 32 --mlp-width 128).
    config = dataclasses.replace(record.config, steps=3, log_jsonl=str(tmp_path / "train.jsonl"))
    with sigterm_restored():
        assert train.run(config, Topology()) == train.EXIT_OK
    assert sorted(losses_by_step(tmp_path / "train.jsonl")) == [3]


def _refusal(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with sigterm_restored():
        assert prune.main(list(args)) == distill.EXIT_USER_ERROR
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and captured.out == "", captured
    return lines[0]


def test_bad_inputs_are_one_line_each(
    tmp_path: Path, ddp_run: TrainerRun, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ["--out", str(tmp_path / "out")]
    ckpt = ["--ckpt", str(ddp_run.ckpt), *out]
    assert "no such directory" in _refusal(capsys, "--ckpt", str(tmp_path / "x"), *out)
    assert "remove nothing" in _refusal(capsys, *ckpt)
    assert "removes all 2 per block" in _refusal(capsys, *ckpt, "--heads", "2")
    shape = _refusal(capsys, *ckpt, "--heads", "1", "--n-head", "1")
    assert "--n-head is set by make prune" in shape
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    refused = _refusal(capsys, "--ckpt", str(ddp_run.ckpt), "--out", str(foreign), "--mlp", "0.5")
    assert "not an earlier make prune output" in refused
    assert [p.name for p in foreign.iterdir()] == ["keep.txt"]
    assert not (tmp_path / "out").exists()
