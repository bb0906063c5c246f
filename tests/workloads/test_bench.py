"""The benchmark: one measured variant, the speedup table, and recording into a file
without disturbing what else it holds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from workloads.training import bench, tracking_overhead
from workloads.training.config import override, preset


def test_baseline_variant_measures_a_real_run(tmp_path: Path) -> None:
    config = override(
        preset("tiny"),
        bench.BASELINE | {"data_dir": str(tmp_path / "data"), "metrics_port": "0", "steps": "5"},
    )
    result = bench.run_variant(config, "baseline", torch.device("cpu"), warmup=1, steps=4)
    assert result.tokens_per_step == 16 * 64
    assert result.tokens_per_s > 0 and result.step_time_s > 0 and result.tflops > 0
    assert result.mfu is None  # CPU
    assert "fp32" in result.switches and "on: none" in result.switches


def result(variant: str, tokens_per_s: float) -> bench.Result:
    return bench.Result(
        "tiny", variant, "cpu fp32, on: none", 0.12, 1024, 0.01, tokens_per_s, 0.1, None, 0.01, 3.0
    )


def test_table_states_speedup_over_the_baseline() -> None:
    lines = bench.table([result("baseline", 100.0), result("fast", 250.0)])
    assert any("| tiny | fast |" in line and "| 2.50x |" in line for line in lines)
    assert any("| tiny | baseline |" in line and "| 1.00x |" in line for line in lines)
    assert any("n/a" in line for line in lines)


def test_record_replaces_only_this_machines_section(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\nNotes written by hand.\n", encoding="utf-8")
    bench.record(path, "cpu", ["first"])
    bench.record(path, "gpu-nvidia-h100", ["gpu figures"])
    bench.record(path, "cpu", ["second"])
    text = path.read_text(encoding="utf-8")
    assert "Notes written by hand." in text
    assert "second" in text and "first" not in text
    assert "gpu figures" in text
    assert text.count("<!-- bench:cpu begin -->") == 1


def test_bad_preset_is_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--presets", "gpt9"]) == 2
    assert "one of tiny" in capsys.readouterr().err


@pytest.mark.slow
def test_fast_path_compiles_and_computes_the_same_loss_as_the_baseline(tmp_path: Path) -> None:
    device = torch.device("cpu")
    common = {"data_dir": str(tmp_path / "data"), "metrics_port": "0", "steps": "3"}
    losses = {}
    for variant, switches in (("baseline", bench.BASELINE), ("fast", bench.fast_overrides(device))):
        config = override(preset("tiny"), switches | common)
        measured = bench.run_variant(config, variant, device, warmup=1, steps=2)
        losses[variant] = measured.final_loss
        if variant == "fast":
            assert "compile" in measured.switches and "sdpa" in measured.switches
    # Same weights, same batches, three steps: bf16 autocast and the padded vocabulary
    # change the arithmetic only slightly.
    assert losses["fast"] == pytest.approx(losses["baseline"], abs=0.1)


def test_tracking_overhead_is_measured_against_a_store_the_training_image_can_open() -> None:
    # The training image has mlflow-skinny only: a sqlite store would never start.
    (line,) = tracking_overhead.overhead_lines(0.05)
    assert "`log_step` costs" in line and "budget" in line


def test_tracking_overhead_says_in_one_line_why_it_was_not_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A store the client cannot open: the bench reports it at once instead of waiting.
    monkeypatch.setattr(Path, "as_uri", lambda self: f"unknown-scheme://{self}")
    (line,) = tracking_overhead.overhead_lines(0.05)
    assert line.startswith("- tracking (MLflow): not measured, a run could not be created (")
