"""`make gpu-check` without a GPU: the dry run's plan, the clear refusal, the carried
wheels, and that the workloads import and read data with torch alone (no numpy)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

from tests.workloads.helpers import REPO_ROOT
from workloads.training import gpu_check


def test_dry_run_plans_every_check_at_the_presets_shape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert gpu_check.main(["--dry-run", "--gpus", "1"]) == gpu_check.EXIT_OK
    out = capsys.readouterr().out
    steps = gpu_check.plan(1)
    phases = list(dict.fromkeys(s.phase for s in steps))
    assert phases == [
        "environment",
        "health",
        "fwd-bwd",
        "train-resume",
        "engines",
        "float8",
        "nccl",
        "bench",
    ]
    bench = {s.name: s.detail for s in steps if s.phase == "bench"}
    assert list(bench)[:2] == ["baseline", "fast"]
    for variant in (
        "fast-chunked_loss",
        "fast-prefetch",
        "fast-compile",
        "fast+reduce-overhead",
        "fast+activation_checkpointing",
        "deepspeed-zero2",
        "deepspeed-zero3",
    ):
        assert variant in bench
    engines = {s.name: s.detail for s in steps if s.phase == "engines"}
    assert list(engines) == [
        "torch fast",
        "torch fast + activation checkpointing",
        "deepspeed zero-2",
        "deepspeed zero-3 + activation checkpointing",
    ]
    assert "resume atol" in engines["deepspeed zero-3 + activation checkpointing"]
    assert all("8x2, 8 steps" in detail for detail in engines.values())
    # max-autotune's autotuning alone outlasts the time limit: left to `make bench`.
    assert "fast+max-autotune" not in bench
    # The preset's real shape: 32 sequences x 16 micro-steps of 1024 tokens.
    assert all("32x16 (524288 tokens/step)" in detail for detail in bench.values())
    assert all("seq 1024" in detail for detail in bench.values())
    assert "124.5M parameters" in out and "single-rank" in out
    assert "deepspeed zero-3 + activation checkpointing" in out and "deepspeed-zero2" in out


def test_dry_run_for_several_gpus_plans_the_fabric_check() -> None:
    nccl = [s for s in gpu_check.plan(8) if s.phase == "nccl"]
    assert nccl[0].name == "fabric_check" and "8 ranks" in nccl[0].detail


def test_without_a_gpu_it_says_so_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ran: list[object] = []

    def run_all(*args: object) -> int:
        ran.append(args)
        return 0

    monkeypatch.setattr(gpu_check, "run_all", run_all)
    assert gpu_check.main(["--out-dir", str(tmp_path)]) == gpu_check.EXIT_NO_GPU
    assert "no CUDA GPU here" in capsys.readouterr().err
    assert ran == [] and not any(tmp_path.iterdir())


def test_bad_arguments_are_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_check.main(["--timeout-s", "5"]) == gpu_check.EXIT_USAGE
    assert "--timeout-s" in capsys.readouterr().err


def test_carried_pure_python_wheel_is_imported_when_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    wheel = tmp_path / "fake_carried_mod-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake_carried_mod/__init__.py", "VALUE = 42\n")
    monkeypatch.setattr(gpu_check, "CARRIED", (("fake_carried_mod", "fake_carried_mod"),))
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert gpu_check.missing_modules() == ["fake_carried_mod"]
    added = gpu_check.add_carried_wheels(tmp_path)
    assert added == [f"fake_carried_mod from {wheel}"]
    module = __import__("fake_carried_mod")
    assert module.VALUE == 42
    sys.modules.pop("fake_carried_mod", None)


def test_workloads_need_only_torch_for_the_data_path_and_the_plan(tmp_path: Path) -> None:
    """A GPU machine may have nothing but torch: numpy and nvidia-ml-py blocked."""
    script = f"""
import sys
sys.modules["numpy"] = None
sys.modules["pynvml"] = None
from pathlib import Path
from workloads.training import gpu_check, train, bench
from workloads.data.shards import ShardLoader
from workloads.data.byte_tokenizer import ensure_shards
from workloads.training.config import DEFAULT_CORPUS
files = ensure_shards(Path({str(tmp_path)!r}), DEFAULT_CORPUS)
inputs, targets = ShardLoader(files, batch=2, seq_len=8, rank=0, world_size=1,
                              vocab_size=256).next_batch()
assert inputs.shape == (2, 8), inputs.shape
assert "numpy" not in {{m for m, v in sys.modules.items() if v is not None}}
sys.exit(gpu_check.main(["--dry-run"]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu_check dry run" in done.stdout


def test_a_failed_check_is_reported_recorded_and_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's plumbing with every GPU step replaced: report, record, exit status."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(gpu_check, "environment", lambda phase, added: phase.say("torch x"))
    monkeypatch.setattr(gpu_check, "health", lambda phase: phase.say("gpu0 healthy"))

    def broken(phase: gpu_check.Phase, data_dir: Path) -> None:
        raise RuntimeError("first line\nthe kernel failed")

    monkeypatch.setattr(gpu_check, "fwd_bwd", broken)
    monkeypatch.setattr(gpu_check, "train_resume", lambda phase, data, work: phase.say("fell"))
    monkeypatch.setattr(gpu_check, "engines", lambda phase, data, work: phase.say("agree"))
    monkeypatch.setattr(gpu_check, "nccl", lambda phase, timeout: phase.say("nccl ok"))
    monkeypatch.setattr(
        gpu_check, "run_bench", lambda phase, data, deadline: ["| gpt2-124m | fast |"]
    )
    benchmarks = tmp_path / "BENCHMARKS.md"
    benchmarks.write_text("# Benchmarks\n\nBy hand.\n", encoding="utf-8")
    args = argparse.Namespace(
        timeout_s=600.0,
        data_dir=str(tmp_path / "data"),
        skip="",
        out_dir=str(tmp_path / "out"),
        record=str(benchmarks),
    )
    assert (
        gpu_check.run_all(args, [], "python -m workloads.training.gpu_check")
        == gpu_check.EXIT_FAILED
    )
    captured = capsys.readouterr()
    assert "FAILED: fwd-bwd" in captured.err and "the kernel failed" in captured.err
    section = (tmp_path / "out" / "gpu-nvidia-h100-80gb-hbm3.md").read_text()
    assert "- fwd-bwd: FAILED" in section and "- health: passed" in section
    assert "RuntimeError: the kernel failed" in section and "| gpt2-124m | fast |" in section
    recorded = benchmarks.read_text()
    assert "By hand." in recorded
    assert "<!-- bench:gpu-check-nvidia-h100-80gb-hbm3 begin -->" in recorded


def test_bench_interrupted_by_the_time_limit_keeps_what_it_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from workloads.training import bench  # noqa: PLC0415

    real_fast = bench.fast_overrides
    monkeypatch.setattr(bench, "fast_overrides", lambda device: real_fast(device, bf16=True))

    def measure_preset(*args: object, into: bench.Measured, **kwargs: object) -> bench.Measured:
        into.results.append(
            bench.Result(
                "gpt2-124m",
                "baseline",
                "x",
                124.0,
                524288,
                20.0,
                26000.0,
                22.0,
                0.02,
                0.0,
                10.9,
                shape="16x32",
            )
        )
        raise gpu_check.TimeLimitError

    monkeypatch.setattr(bench, "measure_preset", measure_preset)
    phase = gpu_check.Phase("bench")
    lines = gpu_check.run_bench(phase, Path("unused"), time.monotonic() + 1000)
    assert not phase.ok and "ran out while measuring fast" in phase.lines[0]
    assert any("| gpt2-124m | baseline |" in line and "16x32" in line for line in lines)
    assert "- gpt2-124m fast: interrupted by the time limit" in lines
    assert "- gpt2-124m fast+reduce-overhead: not run (time limit)" in lines
    assert any(
        line.startswith("- gpt2-124m fast+max-autotune: left to `make bench ARGS=--ablate`")
        for line in lines
    )
    # Too little time left: not started, and the reason says what to do.
    late = gpu_check.Phase("bench")
    assert gpu_check.run_bench(late, Path("unused"), time.monotonic() + 10) == []
    assert not late.ok and "make bench ARGS=--ablate" in late.lines[0]


def test_a_failing_variant_keeps_the_others_figures_and_fails_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A variant that raises (not out of memory) is listed as failed with its error;
    the variants measured before and after it keep their rows, and the check fails."""
    from workloads.training import bench  # noqa: PLC0415

    real_fast = bench.fast_overrides
    monkeypatch.setattr(bench, "fast_overrides", lambda device: real_fast(device, bf16=True))
    # Installed or not here, the DeepSpeed variants are run (by the stand-in below).
    monkeypatch.setattr(bench, "deepspeed_installed", lambda: True)
    ran: list[str] = []

    def run_variant(config: object, variant: str, *args: object) -> bench.Result:
        ran.append(variant)
        if variant == "fast+reduce-overhead":
            raise RuntimeError("accessing tensor output of CUDAGraphs that has been overwritten")
        return bench.Result(
            "gpt2-124m", variant, "x", 124.0, 524288, 1.0, 5e5, 300.0, 0.3, 0.0, 3.0
        )

    monkeypatch.setattr(bench, "run_variant", run_variant)
    monkeypatch.setattr("workloads.training.compat.compiler_reset", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    phase = gpu_check.Phase("bench")
    lines = gpu_check.run_bench(phase, Path("unused"), time.monotonic() + 1000)
    assert not phase.ok and any("1 variant(s) failed" in line for line in phase.lines)
    assert ran[-1] == "fast+reduce-overhead" and "fast" in ran and "baseline" in ran
    assert "deepspeed-zero3" in ran
    assert any("| gpt2-124m | fast |" in line for line in lines)
    assert any(
        "fast+reduce-overhead: failed: RuntimeError: accessing tensor output" in line
        for line in lines
    )


def test_the_engine_variants_are_the_benchs_and_configs_the_trainer_accepts() -> None:
    """The DeepSpeed and activation-checkpointing variants gpu-check plans are real
    configs (the dry run builds each one) with the switches they are named after."""
    from workloads.training import bench  # noqa: PLC0415
    from workloads.training.config import override, preset  # noqa: PLC0415

    fast = bench.fast_overrides(torch.device("cuda"), bf16=True)
    planned = dict(gpu_check.bench_variants(fast))
    base = preset(gpu_check.PRESET)
    zero3 = override(base, planned["deepspeed-zero3"])
    assert (zero3.engine, zero3.zero_stage, zero3.dtype, zero3.compile) == (
        "deepspeed",
        3,
        "bf16",
        "off",
    )
    assert override(base, planned["deepspeed-zero2"]).zero_stage == 2
    assert override(base, planned["fast+activation_checkpointing"]).activation_checkpointing
    runs = dict(gpu_check.ENGINE_RUNS)
    assert override(base, fast | runs[gpu_check.ENGINE_RESUMED]).zero_stage == 3


def test_without_deepspeed_its_variants_fail_the_bench_and_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from workloads.training import bench  # noqa: PLC0415

    real_fast = bench.fast_overrides
    monkeypatch.setattr(bench, "fast_overrides", lambda device: real_fast(device, bf16=True))
    monkeypatch.setattr(bench, "deepspeed_installed", lambda: False)
    ran: list[str] = []

    def run_variant(config: object, variant: str, *args: object) -> bench.Result:
        ran.append(variant)
        return bench.Result(
            "gpt2-124m", variant, "x", 124.0, 524288, 1.0, 5e5, 300.0, 0.3, 0.0, 3.0
        )

    monkeypatch.setattr(bench, "run_variant", run_variant)
    monkeypatch.setattr("workloads.training.compat.compiler_reset", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    phase = gpu_check.Phase("bench")
    lines = gpu_check.run_bench(phase, Path("unused"), time.monotonic() + 1000)
    assert "fast+activation_checkpointing" in ran
    assert not any(name.startswith("deepspeed") for name in ran)
    assert not phase.ok
    assert any(
        "deepspeed-zero3: not run: the deepspeed package is not installed" in line
        and "pip install 'deepspeed>=0.19.8,<0.20'" in line
        for line in lines
    )


def test_without_deepspeed_the_engines_check_fails_and_runs_the_torch_ones(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from workloads.training import bench, train  # noqa: PLC0415

    monkeypatch.setattr(bench, "deepspeed_installed", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    ran: list[tuple[str, bool]] = []

    def fake_run(config: object, topology: object) -> int:
        from workloads.training.config import TrainConfig  # noqa: PLC0415

        assert isinstance(config, TrainConfig)
        ran.append((config.engine, config.activation_checkpointing))
        log = Path(config.log_jsonl)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(
            "".join(
                f'{{"step": {s}, "loss": {11.0 - 0.1 * s}}}\n'
                for s in range(1, gpu_check.ENGINE_STEPS + 1)
            )
        )
        return train.EXIT_OK

    monkeypatch.setattr(train, "run", fake_run)
    monkeypatch.setattr("workloads.training.compat.compiler_reset", lambda: None)
    phase = gpu_check.Phase("engines")
    gpu_check.engines(phase, tmp_path / "data", tmp_path)
    assert ran == [("torch", False), ("torch", True)]
    assert not phase.ok
    assert "pip install 'deepspeed>=0.19.8,<0.20'" in phase.lines[0]
    assert any("at most 0.00e+00 from torch fast" in line for line in phase.lines)
