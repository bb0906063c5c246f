"""Float8 training (torchao): what the conversion swaps and keeps, a short run through
torchao's float8 emulation tracking fp32 on the CPU, and the one-line refusal where
the hardware has no float8 tensor cores (here, and on an older GPU). The speed and the
bf16 comparison on real float8 matmuls are `make gpu-check`'s (they need an H100)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from modules.validation import InvalidArgsError
from tests.workloads.helpers import sigterm_restored
from workloads.data.byte_tokenizer import ensure_shards
from workloads.data.shards import ShardLoader
from workloads.training import bench, float8, gpu_check, train
from workloads.training.config import ModelConfig, override, preset
from workloads.training.engine import (
    DeviceBatches,
    build_model,
    build_optimizer,
    resolve,
    train_step,
)
from workloads.training.model import GPT

#: Relative difference allowed between the emulated float8 run's losses and fp32's over
#: `STEPS` steps (measured: 2e-4 on the tiny model; float8's 3-bit mantissa would show
#: up far above this only if scaling were wrong).
LOSS_RTOL = 1e-2
STEPS = 4


def test_the_blocks_linear_layers_become_float8_and_the_lm_head_does_not() -> None:
    model = GPT(preset("tiny").model)
    keys = list(model.state_dict())
    assert float8.convert(model, "rowwise") == 4 * 2  # 4 linear layers x 2 blocks
    assert type(model.blocks[0].attn.c_attn).__name__ == "Float8Linear"  # type: ignore[union-attr]
    assert type(model.blocks[1].mlp.c_proj).__name__ == "Float8Linear"  # type: ignore[union-attr]
    assert type(model.lm_head) is nn.Linear
    assert model.lm_head.weight is model.wte.weight  # still tied
    # The same state-dict keys and fp32 weights: checkpoints stay interchangeable.
    assert list(model.state_dict()) == keys
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_layers_whose_dimensions_the_float8_matmul_cannot_take_are_left_alone() -> None:
    config = ModelConfig(n_layer=1, n_head=2, n_embd=40, block_size=16, vocab_size=256)
    model = GPT(config)  # 40 wide: not a multiple of 16
    assert float8.convert(model, "tensorwise") == 0
    assert not float8.converts(nn.Linear(64, 64), "lm_head")
    assert float8.converts(nn.Linear(64, 192), "blocks.0.attn.c_attn")


def _losses(tmp_path: Path, recipe: str) -> list[float]:
    config = override(
        preset("tiny"),
        {
            "data_dir": str(tmp_path / "data"), "metrics_port": "0", "steps": str(STEPS),
            "dtype": "fp32", "compile": "off", "micro_batch_size": "4", "seq_len": "32",
        },
    )  # fmt: skip
    resolved = resolve(config, torch.device("cpu"))
    model = build_model(config, resolved)
    if recipe != "off":
        float8.convert(model, recipe, emulate=True)
    optimizer = build_optimizer(model, config, resolved)
    loader = ShardLoader(
        ensure_shards(Path(config.data_dir), Path(config.corpus)),
        batch=4,
        seq_len=32,
        rank=0,
        world_size=1,
        vocab_size=256,
    )
    batches = DeviceBatches(loader, resolved)
    return [
        float(
            train_step(
                model=model,
                optimizer=optimizer,
                batches=batches,
                config=config,
                resolved=resolved,
                step=step,
            ).loss
        )
        for step in range(1, STEPS + 1)
    ]


@pytest.mark.parametrize("recipe", float8.RECIPES)
def test_emulated_float8_training_tracks_fp32(tmp_path: Path, recipe: str) -> None:
    reference = _losses(tmp_path, "off")
    losses = _losses(tmp_path, recipe)
    assert losses[-1] < losses[0]  # it learns
    worst = max(abs(a - b) / b for a, b in zip(losses, reference, strict=True))
    assert worst < LOSS_RTOL, (losses, reference)
    assert losses != reference  # the float8 casts did round something


def test_training_with_float8_on_a_cpu_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--preset", "tiny", "--steps", "1", "--float8", "rowwise", "--metrics-port", "0"]
    args += ["--data-dir", str(tmp_path / "data")]
    with sigterm_restored():
        assert train.main(args) == train.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "--float8: got 'rowwise'; float8 training needs an NVIDIA GPU" in err
    assert "this is a cpu: use --float8 off" in err
    assert "Traceback" not in err


def test_a_gpu_without_float8_tensor_cores_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    with pytest.raises(InvalidArgsError) as raised:
        float8.check_device("tensorwise", torch.device("cuda", 0))
    assert "NVIDIA A100 is 8.0" in raised.value.problems[0].expected
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert float8.device_problem(torch.device("cuda", 0)) is None
    float8.check_device("off", torch.device("cpu"))  # off is never refused


def test_float8_is_a_config_choice_the_deepspeed_engine_refuses() -> None:
    with pytest.raises(InvalidArgsError, match="float8"):
        override(preset("tiny"), {"float8": "e4m3"})
    with pytest.raises(InvalidArgsError) as raised:
        override(preset("tiny"), {"float8": "rowwise", "engine": "deepspeed", "compile": "off"})
    assert [p.field for p in raised.value.problems] == ["float8"]


def test_the_benchmark_and_gpu_check_plan_float8_and_say_why_it_is_not_run_here() -> None:
    fast = bench.fast_overrides(torch.device("cpu"))
    planned = bench.variants(fast, ablate=True, cuda=False)
    names = [name for name, _ in planned]
    assert {"fast+float8-tensorwise", "fast+float8-rowwise"} <= set(names)
    skipped: list[str] = []
    kept = bench.drop_float8_if_unavailable(planned, torch.device("cpu"), skipped)
    assert not any("float8" in name for name, _ in kept)
    assert len(skipped) == 2 and all("not run (float8 training needs" in s for s in skipped)
    steps = gpu_check.plan(1)
    assert [s.name for s in steps if s.phase == "float8"] == [n for n, _ in gpu_check.FLOAT8_RUNS]
    assert any(s.phase == "bench" and s.name == "fast+float8-rowwise" for s in steps)
