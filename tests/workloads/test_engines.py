"""Engine selection and the parts of the DeepSpeed engine, the elastic batch plan and
activation checkpointing that need no second process and no deepspeed package.

The DeepSpeed engine's real training runs are in tests/training_deepspeed/ (they need
the training environment with deepspeed installed)."""

from __future__ import annotations

import json
import math
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from modules.validation import InvalidArgsError
from tests.workloads.helpers import REPO_ROOT, sigterm_restored
from workloads.training import deepspeed_engine, elastic, train
from workloads.training.checkpoint import (
    DEEPSPEED_MARKER,
    METADATA_FILE,
    CheckpointError,
    checkpoint_engine,
)
from workloads.training.compat import dcp_kwargs
from workloads.training.config import override, preset
from workloads.training.distributed import Topology
from workloads.training.engine import build_model, resolve

CPU = torch.device("cpu")


def test_engine_and_zero_stage_are_validated_with_the_rest() -> None:
    with pytest.raises(InvalidArgsError) as err:
        override(
            preset("tiny"),
            {
                "engine": "megatron",
                "zero_stage": "4",
                "global_batch_size": "-1",
            },
        )
    fields = {p.field for p in err.value.problems}
    assert fields == {"engine", "zero_stage", "global_batch_size"}
    with pytest.raises(InvalidArgsError) as err:
        override(preset("tiny"), {"engine": "deepspeed", "parallelism": "fsdp2", "compile": "on"})
    messages = {p.field: p.expected for p in err.value.problems}
    assert "DeepSpeed shards by --zero-stage" in messages["parallelism"]
    assert "runs eager" in messages["compile"]


def test_deepspeed_resolves_eager_and_without_no_sync_and_names_its_stage() -> None:
    config = override(preset("tiny"), {"engine": "deepspeed", "zero_stage": "3"})
    resolved = resolve(config, CPU)
    assert resolved.strategy == "deepspeed zero-3"
    assert not resolved.compile and not resolved.no_sync_accum
    assert resolve(preset("tiny"), CPU).strategy == "ddp"
    torch_fsdp = resolve(override(preset("tiny"), {"parallelism": "fsdp2"}), CPU)
    assert torch_fsdp.strategy == "fsdp2" and torch_fsdp.zero_stage == 0


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_ds_config_carries_the_train_config(stage: int) -> None:
    config = override(
        preset("tiny"),
        {
            "engine": "deepspeed",
            "zero_stage": str(stage),
            "grad_accum_steps": "4",
            "grad_clip": "0.5",
            "dtype": "bf16" if torch.cpu._is_avx512_bf16_supported() else "fp32",
        },
    )
    resolved = resolve(config, CPU)
    ds = deepspeed_engine.ds_config(config, resolved, world_size=8)
    assert ds["train_micro_batch_size_per_gpu"] == 16
    assert ds["gradient_accumulation_steps"] == 4
    assert ds["train_batch_size"] == 16 * 4 * 8  # DeepSpeed checks this product
    assert ds["gradient_clipping"] == 0.5
    assert ds["zero_optimization"]["stage"] == stage
    assert ds["bf16"]["enabled"] == (resolved.amp_dtype is torch.bfloat16)
    assert ds["fp16"]["enabled"] is False
    # No second CUDA stream on a CPU.
    assert ds["zero_optimization"]["overlap_comm"] is False
    assert ("stage3_prefetch_bucket_size" in ds["zero_optimization"]) == (stage == 3)


def test_ds_config_bf16_reduces_in_fp32_on_cuda_shapes() -> None:
    config = override(preset("gpt2-124m"), {"engine": "deepspeed", "dtype": "auto"})
    resolved = resolve(config, CPU)  # CPU: auto is fp32
    assert deepspeed_engine.ds_config(config, resolved, 1)["communication_data_type"] is None
    bf16 = override(config, {"dtype": "bf16"})
    if torch.cpu._is_avx512_bf16_supported():
        ds = deepspeed_engine.ds_config(bf16, resolve(bf16, CPU), 1)
        assert ds["bf16"]["enabled"] and ds["communication_data_type"] == "fp32"


def test_deepspeed_missing_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # as where it is not installed
    with sigterm_restored():
        status = train.main(
            [
                "--preset",
                "tiny",
                "--engine",
                "deepspeed",
                "--data-dir",
                str(tmp_path / "data"),
                "--metrics-port",
                "0",
            ]
        )
    assert status == train.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "--engine: got 'deepspeed'" in err and deepspeed_engine.REQUIREMENT in err
    assert "Traceback" not in err
    assert not (tmp_path / "data").exists()  # refused before any work


def test_deepspeed_is_imported_with_mlflow_hidden_and_mlflow_imports_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DeepSpeed's autotuner imports MLflow whenever it can, and the trainer never runs
    it: MLflow is hidden (None in sys.modules: ImportError) while deepspeed is imported,
    unless it was imported already, and is importable again after, failed import or not."""
    seen: list[object] = []

    def import_module(name: str) -> ModuleType:
        seen.append(sys.modules.get("mlflow", "absent"))
        if name != "deepspeed":
            raise AssertionError(name)
        return ModuleType(name)

    monkeypatch.setattr(deepspeed_engine, "importlib", SimpleNamespace(import_module=import_module))
    monkeypatch.delitem(sys.modules, "mlflow", raising=False)
    assert deepspeed_engine.import_deepspeed().__name__ == "deepspeed"
    assert seen == [None] and "mlflow" not in sys.modules
    imported = ModuleType("mlflow")
    monkeypatch.setitem(sys.modules, "mlflow", imported)
    deepspeed_engine.import_deepspeed()
    assert seen[-1] is imported and sys.modules["mlflow"] is imported

    def not_installed(name: str) -> ModuleType:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(deepspeed_engine, "importlib", SimpleNamespace(import_module=not_installed))
    monkeypatch.delitem(sys.modules, "mlflow")
    with pytest.raises(InvalidArgsError):
        deepspeed_engine.import_deepspeed()
    assert "mlflow" not in sys.modules


def test_the_deepspeed_requirement_is_the_training_images() -> None:
    groups = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert deepspeed_engine.REQUIREMENT in groups["optional-dependencies"]["training"]
    # The image installs the training lock, whose deepspeed must satisfy the requirement.
    dockerfile = (REPO_ROOT / "workloads" / "Dockerfile").read_text()
    assert "locks/training.txt" in dockerfile
    lock = (REPO_ROOT / "locks" / "training.txt").read_text()
    pinned = re.search(r"^deepspeed==(\S+)", lock, re.MULTILINE)
    assert pinned is not None, "deepspeed is missing from locks/training.txt"
    specifier = SpecifierSet(deepspeed_engine.REQUIREMENT.removeprefix("deepspeed"))
    assert Version(pinned[1]) in specifier


def test_checkpoint_engine_tells_the_formats_apart(tmp_path: Path) -> None:
    dcp, ds, partial = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for path in (dcp, ds, partial):
        path.mkdir()
    (dcp / METADATA_FILE).write_bytes(b"")
    (ds / DEEPSPEED_MARKER).write_text("{}")
    assert checkpoint_engine(dcp) == "torch"
    assert checkpoint_engine(ds) == "deepspeed"
    assert checkpoint_engine(partial) is None


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # the DCP save below
def test_an_unfit_deepspeed_checkpoint_is_refused_before_the_engine_is_built(
    tmp_path: Path,
) -> None:
    """`saved_global_batch` is read before DeepSpeed builds its engine (workloads.training
    .train.run): a checkpoint the run cannot resume is refused there, naming why."""
    saved = tmp_path / "ds" / "step_00000002"
    saved.mkdir(parents=True)
    marker = {"step": 2, "world_size": 1, "zero_stage": 2, "global_batch": 16}
    marker |= {"data_shard": 0, "data_position": 0}
    (saved / DEEPSPEED_MARKER).write_text(json.dumps(marker))

    def checkpointer(root: Path, world_size: int, zero_stage: int = 2) -> Any:
        topology = Topology(world_size=world_size, local_world_size=world_size)
        return deepspeed_engine.DeepSpeedCheckpointer(
            root, topology=topology, device=CPU, group=None, zero_stage=zero_stage
        )

    assert checkpointer(tmp_path / "ds", world_size=1).saved_global_batch() == 16
    assert checkpointer(tmp_path / "new", world_size=2).saved_global_batch() == 0
    with pytest.raises(CheckpointError, match="saved by 1 ranks and this run has 2"):
        checkpointer(tmp_path / "ds", world_size=2).saved_global_batch()
    with pytest.raises(CheckpointError, match="saved with --zero-stage 2, this run has 3"):
        checkpointer(tmp_path / "ds", world_size=1, zero_stage=3).saved_global_batch()
    dcp = tmp_path / "dcp" / "step_00000002"
    # A readable DCP checkpoint (an unreadable one is skipped as corrupt, not refused).
    dcp_save({"w": torch.zeros(1)}, checkpoint_id=str(dcp), **dcp_kwargs(dcp_save, True))
    assert (dcp / METADATA_FILE).is_file()
    with pytest.raises(CheckpointError, match="written by the torch engine"):
        checkpointer(tmp_path / "dcp", world_size=1).saved_global_batch()


# --- elastic ------------------------------------------------------------------------


def test_plan_keeps_the_global_batch_by_accumulation() -> None:
    # 2 nodes x 16 sequences x 1 micro-step = 32; one node left: 2 micro-steps.
    plan = elastic.plan_batch(32, micro_batch=16, world_size=1)
    assert (plan.grad_accum_steps, plan.global_batch, plan.lr_scale) == (2, 32, 1.0)
    assert plan.exact
    # GPT-2 124M: 0.5M tokens per step on 1 GPU at 32 x 16; on 8 GPUs 2 micro-steps.
    assert elastic.plan_batch(512, 32, 8).grad_accum_steps == 2
    line = elastic.describe(plan, 1, 1)
    assert "grad accumulation 1 -> 2 keeps the global batch of 32 sequences" in line


def test_plan_scales_the_learning_rate_only_when_the_batch_cannot_be_kept() -> None:
    plan = elastic.plan_batch(32, micro_batch=16, world_size=3)  # 48 per micro-step
    assert plan.grad_accum_steps == 1 and plan.global_batch == 48 and not plan.exact
    assert plan.lr_scale == pytest.approx(math.sqrt(48 / 32))
    assert "learning rate x 1.2247 (square-root scaling)" in elastic.describe(plan, 1, 3)
    small = elastic.plan_batch(100, micro_batch=16, world_size=2)  # 32 per micro-step
    assert small.grad_accum_steps == 3 and small.global_batch == 96
    assert small.lr_scale == pytest.approx(math.sqrt(96 / 100))
    with pytest.raises(ValueError):
        elastic.plan_batch(0, 16, 1)


def test_train_plans_from_the_flag_then_the_checkpoint_then_the_config() -> None:
    base = override(preset("tiny"), {"grad_accum_steps": "2"})
    same, plan = train._plan_batch(base, world_size=2, saved_global_batch=0)
    assert same.grad_accum_steps == 2 and plan.target == 64
    shrunk, plan = train._plan_batch(base, world_size=1, saved_global_batch=64)
    assert shrunk.grad_accum_steps == 4 and shrunk.learning_rate == base.learning_rate
    flagged = override(base, {"global_batch_size": "48"})
    odd, plan = train._plan_batch(flagged, world_size=2, saved_global_batch=64)
    assert plan.target == 48 and odd.grad_accum_steps == 2  # 64 is the nearest reachable
    assert odd.learning_rate == pytest.approx(base.learning_rate * math.sqrt(64 / 48))


# --- activation checkpointing ------------------------------------------------------


def test_activation_checkpointing_gives_the_same_loss_and_gradients() -> None:
    results = {}
    for recompute in (False, True):
        config = override(
            preset("small"), {"activation_checkpointing": "on" if recompute else "off"}
        )
        model = build_model(config, resolve(config, CPU))
        assert model.activation_checkpointing is recompute
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randint(0, 256, (4, 128), generator=generator)
        targets = torch.randint(0, 256, (4, 128), generator=generator)
        loss = model(inputs, targets)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[recompute] = (loss.item(), grads)
    (plain_loss, plain), (ckpt_loss, ckpt) = results[False], results[True]
    assert ckpt_loss == plain_loss
    assert plain.keys() == ckpt.keys() and len(plain) > 10
    for name, grad in plain.items():
        torch.testing.assert_close(ckpt[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_activation_checkpointing_recomputes_the_blocks_in_the_backward() -> None:
    """It is really on: each block's forward runs twice per training step, and once
    without gradients (evaluation keeps no activations anyway)."""
    config = override(preset("tiny"), {"activation_checkpointing": "on"})
    model = build_model(config, resolve(config, CPU))
    calls: list[int] = []
    for index, block in enumerate(model.blocks):
        # A layer inside the block: the recomputation calls its forward again.
        layer = block.get_submodule("mlp.c_fc")
        layer.register_forward_hook(lambda *_, i=index: calls.append(i))
    inputs = torch.randint(0, 256, (2, 16))
    model(inputs, inputs).backward()
    assert sorted(calls) == [0, 0, 1, 1]
    calls.clear()
    with torch.no_grad():
        model(inputs, inputs)
    assert calls == [0, 1]


def test_the_switch_is_in_the_run_line() -> None:
    config = override(preset("tiny"), {"activation_checkpointing": "on"})
    assert re.search(r"on: .*activation_checkpointing", resolve(config, CPU).describe())
