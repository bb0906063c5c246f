"""The DeepSpeed engine on CPU: real 2-process ZeRO-1/2/3 training under torchrun with
gloo and DeepSpeed's CPU accelerator, checkpoint and resume, and the refusals.

These tests need the training environment with deepspeed installed (pyproject.toml's
``workloads`` group; ``deepspeed>=0.19.8,<0.20``). DeepSpeed's CPU accelerator
JIT-compiles its shared-memory collective op on first use, so a C++ compiler (g++)
and ninja must be present; it then talks gloo (oneCCL is not needed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import deepspeed
import pytest

from tests.workloads import training_runs
from tests.workloads.helpers import (
    losses_by_step,
    run_torchrun,
    sigterm_restored,
    tiny_args,
)
from workloads.training.checkpoint import checkpoint_engine, complete_checkpoints

pytestmark = pytest.mark.slow

#: Wide enough that ZeRO-3 really partitions the parameters: DeepSpeed keeps
#: parameters under 1e5 elements whole on every rank (stage3_param_persistence_threshold),
#: and tiny's 64-wide matrices are all under it; 512 wide, every matrix is over.
WIDE = ["--n-embd", "512", "--n-head", "8", "--seq-len", "32", "--micro-batch-size", "4"]


@pytest.fixture(autouse=True, scope="module")
def extensions_of_this_environment() -> Iterator[None]:
    """DeepSpeed's shared-memory op is built (~50 CPU s of g++) into torch's extension
    cache, by default ~/.cache/torch_extensions, one per machine: every checkout's
    environment that loads it from there rebuilds it for its own torch. This
    environment keeps its build (TORCH_EXTENSIONS_DIR, read by this process and the
    workers it starts), unless one is set already."""
    if "TORCH_EXTENSIONS_DIR" in os.environ:
        yield
        return
    os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(sys.prefix) / "torch-extensions")
    try:
        yield
    finally:
        del os.environ["TORCH_EXTENSIONS_DIR"]


def args(run_dir: Path, *extra: str) -> list[str]:
    return tiny_args(
        run_dir.parent / "data",
        run_dir / "log.jsonl",
        "--log-every",
        "1",
        "--grad-accum-steps",
        "2",
        *extra,
    )


def train(run_dir: Path, *extra: str, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    done = run_torchrun("workloads.train", args(run_dir, *extra), nproc=nproc, timeout_s=400)
    return done


def test_deepspeed_is_the_tested_release_on_its_cpu_accelerator() -> None:
    from deepspeed.accelerator import get_accelerator  # noqa: PLC0415

    major, minor = (int(x) for x in deepspeed.__version__.split(".")[:2])
    assert (major, minor) == (0, 19), deepspeed.__version__
    assert get_accelerator().device_name() == "cpu"
    assert get_accelerator().communication_backend_name() == "gloo"


@pytest.fixture(scope="session")
def torch_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    """The torch engine's DDP on the same model, data and schedule (6 steps of 2
    micro-steps, fp32): the run tests/workloads/test_torchrun.py also compares."""
    run = training_runs.accum_run(tmp_path_factory, "ddp-no-sync")
    assert run.done.returncode == 0, run.output
    assert training_runs.ACCUM_STEPS == 6
    return losses_by_step(run.log)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_stage_trains_like_ddp_and_resumes_exactly(
    stage: int, tmp_path: Path, torch_reference: dict[int, float]
) -> None:
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    extra = [
        "--engine",
        "deepspeed",
        "--zero-stage",
        str(stage),
        "--dtype",
        "fp32",
        "--steps",
        "6",
        "--ckpt-dir",
        str(ckpt),
        "--ckpt-every",
        "3",
    ]
    first = train(run_dir, *extra)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"world 2 (1 node(s)), deepspeed zero-{stage}, cpu fp32" in first.stdout
    losses = losses_by_step(run_dir / "log.jsonl")
    # The same model, data, schedule and clipping as the torch engine's DDP: in fp32
    # only the order of the gradient reductions differs.
    assert sorted(losses) == list(range(1, 7))
    for step, loss in torch_reference.items():
        assert losses[step] == pytest.approx(loss, rel=1e-4), (step, losses, torch_reference)
    assert losses[6] < losses[1] - 0.3
    saved = complete_checkpoints(ckpt)
    assert [step for step, _ in saved] == [3, 6]
    assert all(checkpoint_engine(path) == "deepspeed" for _, path in saved)
    assert {p.name for p in (ckpt / "step_00000003").glob("rng_rank*.pt")} == {
        "rng_rank0.pt",
        "rng_rank1.pt",
    }
    # Lose the end of the run: the rerun resumes from step 3 and repeats steps 4-6.
    shutil.rmtree(ckpt / "step_00000006")
    (run_dir / "log.jsonl").unlink()
    second = train(run_dir, *extra)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "at step 3" in second.stdout and "RNG restored" in second.stdout
    resumed = losses_by_step(run_dir / "log.jsonl")
    assert sorted(resumed) == [4, 5, 6]
    assert all(resumed[s] == losses[s] for s in resumed), (resumed, losses)


def test_bf16_zero3_partitions_chunked_loss_and_activation_checkpointing_agree(
    tmp_path: Path,
) -> None:
    """bf16 ZeRO-3 with every matrix partitioned: the chunked loss (which reads the
    tied LM-head weight outside its module) and activation checkpointing (which
    re-runs each block's forward, and so its parameter gathers, in the backward) must
    learn exactly what the plain run learns."""
    common = [*WIDE, "--engine", "deepspeed", "--zero-stage", "3", "--dtype", "bf16"]
    common += ["--steps", "3"]
    losses = {}
    for name, extra in {
        "plain": ["--chunked-loss", "off"],
        "chunked": ["--chunked-loss", "on", "--loss-chunk-tokens", "48"],
        "recompute": ["--chunked-loss", "off", "--activation-checkpointing", "on"],
    }.items():
        run_dir = tmp_path / name
        done = train(run_dir, *common, *extra)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "deepspeed zero-3, cpu bf16 weights" in done.stdout
        losses[name] = losses_by_step(run_dir / "log.jsonl")
    plain = losses["plain"]
    assert plain[3] < plain[1]
    for step, loss in plain.items():
        # The chunked loss sums in another order (bf16 matmuls per chunk).
        assert losses["chunked"][step] == pytest.approx(loss, rel=2e-3), step
        assert losses["recompute"][step] == loss, step


def test_world_of_one_and_the_resume_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from workloads.training import train as trainer  # noqa: PLC0415

    ckpt = tmp_path / "ckpt"
    # `python -m workloads.train` without torchrun is a world of one: its main, in this
    # process (no torchrun variables), as the bench runs DeepSpeed here too. The
    # engine sets LOCAL_RANK for DeepSpeed; monkeypatch takes it away again after.
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    one_args = [
        *args(tmp_path / "one", "--engine", "deepspeed", "--zero-stage", "2"),
        "--steps", "2", "--ckpt-dir", str(ckpt),
    ]  # fmt: skip
    with sigterm_restored():
        assert trainer.main(one_args) == trainer.EXIT_OK
    assert "world 1 (1 node(s)), deepspeed zero-2" in capsys.readouterr().out
    assert [step for step, _ in complete_checkpoints(ckpt)] == [2]
    # Two ranks cannot load one rank's ZeRO partitions: exit 2 with what to do.
    wider = train(
        tmp_path / "two",
        "--engine",
        "deepspeed",
        "--zero-stage",
        "2",
        "--steps",
        "4",
        "--ckpt-dir",
        str(ckpt),
    )
    assert wider.returncode != 0
    assert "saved by 1 ranks and this run has 2" in wider.stderr + wider.stdout
    assert "train: preset" not in wider.stdout  # refused before DeepSpeed built its engine
    # The torch engine does not read DeepSpeed's format, and says which engine to use
    # (a world of one, in this process).
    with sigterm_restored():
        status = trainer.main([*args(tmp_path / "torch"), "--steps", "4", "--ckpt-dir", str(ckpt)])
    captured = capsys.readouterr()
    assert status != 0
    assert "written by the DeepSpeed engine" in captured.err + captured.out
    assert [step for step, _ in complete_checkpoints(ckpt)] == [2]  # nothing deleted


def test_bench_measures_zero_stages_one_after_another_in_one_process(tmp_path: Path) -> None:
    """`make bench ARGS=--ablate` and gpu-check run the DeepSpeed variants in one
    process: each sets up (and tears down) its own one-rank process group."""
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    from workloads.training import bench  # noqa: PLC0415
    from workloads.training.config import override, preset  # noqa: PLC0415

    common = {"data_dir": str(tmp_path / "data"), "metrics_port": "0", "steps": "3"}
    losses: dict[str, list[float]] = {}
    linear = torch.nn.functional.linear
    for stage in ("2", "3", "2"):
        config = override(
            preset("tiny"), {"engine": "deepspeed", "zero_stage": stage, "dtype": "fp32"} | common
        )
        result = bench.run_variant(
            config, f"deepspeed-zero{stage}", torch.device("cpu"), warmup=1, steps=2
        )
        assert f"engine deepspeed zero-{stage}" in result.switches
        assert result.tokens_per_s > 0 and result.peak_memory_gib is not None
        losses.setdefault(stage, []).append(result.final_loss)
        assert not dist.is_initialized()  # its group is gone with it
        # ZeRO-3's memory-efficient linear is gone with it too: the next variant's
        # model computes with torch's own.
        assert torch.nn.functional.linear is linear
    # Same seed, same data: every stage learns the same thing.
    assert losses["2"][0] == losses["2"][1]
    assert losses["3"][0] == pytest.approx(losses["2"][0], rel=1e-4)
