"""Figures and their Prometheus export."""

from __future__ import annotations

import pytest

from workloads.training.metrics import (
    METRIC_NAMES,
    MetricsExporter,
    ThroughputWindow,
    format_mfu,
    peak_bf16_tflops,
)
from workloads.training.metrics_endpoint import METRICS_PORT


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A10G", 70.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA L4", 121.0),
        ("Tesla T4", None),
        (None, None),
    ],
)
def test_peak_lookup_by_device_name(name: str | None, peak: float | None) -> None:
    assert peak_bf16_tflops(name) == peak


def test_window_figures() -> None:
    window = ThroughputWindow(
        tokens_per_step=1000, flops_per_token=6e9, devices=2, peak_tflops=100.0
    )
    window.started = 10.0
    for _ in range(4):
        window.add_step(data_wait_s=0.1)
    stats = window.stats(now=12.0)
    assert stats.step_time_s == pytest.approx(0.5)
    assert stats.tokens_per_s == pytest.approx(2000.0)
    assert stats.tflops == pytest.approx(2000 * 6e9 / 2 / 1e12)
    assert stats.mfu == pytest.approx(stats.tflops / 100.0)
    assert stats.data_wait_ratio == pytest.approx(0.2)


def test_cpu_mfu_is_not_applicable() -> None:
    window = ThroughputWindow(1000, 6e9, 1, None)
    window.add_step(0.0)
    assert window.stats().mfu is None
    assert format_mfu(None) == "n/a"


def test_exporter_sets_the_documented_metrics() -> None:
    exporter = MetricsExporter(0)
    window = ThroughputWindow(1000, 6e9, 1, 989.0)
    window.add_step(0.0)
    exporter.update(7, 2.5, window.stats())
    values = {
        sample.name: sample.value
        for family in exporter.registry.collect()
        for sample in family.samples
    }
    assert set(METRIC_NAMES) <= set(values)
    assert values["training_step"] == 7
    assert values["training_loss"] == 2.5
    assert METRICS_PORT == 9500
