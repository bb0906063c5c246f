"""GPU telemetry and the preflight health check, with NVML absent and with a fake NVML
whose functions report the faults the check must catch."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml
import pytest

from workloads.training import health, telemetry


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    ecc_uncorrected: int = 0
    remap: tuple[int, int, int, int] = (0, 0, 0, 0)  # correctable, uncorrectable, pending, failed
    nvlinks_up: int = 18
    nvlinks: int = 18
    clock_reasons: int = 0
    calls: list[str] = field(default_factory=list)


def install_fake_nvml(monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu]) -> None:
    """Replace pynvml's entry points with ones answering from ``gpus``."""
    fake = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda i: gpus[i],
        "nvmlDeviceGetName": lambda g: g.name,
        "nvmlDeviceGetUUID": lambda g: f"GPU-{gpus.index(g):04d}",
        "nvmlDeviceGetUtilizationRates": lambda g: SimpleNamespace(gpu=97, memory=40),
        "nvmlDeviceGetMemoryInfo": lambda g: SimpleNamespace(used=60 * 2**30, total=80 * 2**30),
        "nvmlDeviceGetPowerUsage": lambda g: 650_000,
        "nvmlDeviceGetEnforcedPowerLimit": lambda g: 700_000,
        "nvmlDeviceGetClockInfo": lambda g, clock: 1755,
        "nvmlDeviceGetMaxClockInfo": lambda g, clock: 1980,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda g: g.clock_reasons,
        "nvmlDeviceGetTemperature": lambda g, sensor: 61,
        "nvmlDeviceGetTotalEccErrors": lambda g, kind, counter: (
            g.ecc_uncorrected if kind == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 3
        ),
        "nvmlDeviceGetRemappedRows": lambda g: g.remap,
    }

    def nvlink_state(g: FakeGpu, link: int) -> int:
        if link >= g.nvlinks:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_FEATURE_ENABLED if link < g.nvlinks_up else 0

    fake["nvmlDeviceGetNvLinkState"] = nvlink_state
    for name, function in fake.items():
        monkeypatch.setattr(pynvml, name, function)


def test_sampling_reads_every_field(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_nvml(monkeypatch, [FakeGpu(), FakeGpu()])
    samples = telemetry.sample_gpus()
    assert len(samples) == 2
    gpu = samples[0]
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.uuid == "GPU-0000"
    assert (gpu.utilization_pct, gpu.temperature_c) == (97, 61)
    assert gpu.power_w == 650.0 and gpu.power_limit_w == 700.0
    assert (gpu.sm_clock_mhz, gpu.sm_clock_max_mhz) == (1755, 1980)
    assert gpu.memory_total_mib == 80 * 1024
    assert (gpu.ecc_uncorrected_volatile, gpu.ecc_corrected_volatile) == (0, 3)
    assert gpu.remap_pending is False and gpu.nvlink_up == gpu.nvlink_total == 18
    assert "power 650/700 W" in gpu.summary()


def test_healthy_node_passes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install_fake_nvml(monkeypatch, [FakeGpu() for _ in range(8)])
    assert health.main(["--expect-gpus", "8", "--expect-nvlink"]) == 0
    assert "health: OK (8 GPU(s))" in capsys.readouterr().out


def test_uncorrected_ecc_and_pending_remap_fail_with_clear_messages(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = [FakeGpu(), FakeGpu(ecc_uncorrected=2), FakeGpu(remap=(0, 1, 1, 0))]
    install_fake_nvml(monkeypatch, gpus)
    assert health.main(["--expect-gpus", "3"]) == 1
    err = capsys.readouterr().err
    assert "health: FAILED" in err
    assert "GPU 1 (NVIDIA H100 80GB HBM3, GPU-0001): 2 uncorrected ECC error(s)" in err
    assert "GPU 2 (NVIDIA H100 80GB HBM3, GPU-0002): row remapping pending" in err
    assert "GPU 0" not in err.split("FAILED", 1)[1]


def test_failed_remap_nvlink_down_throttling_and_count(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hw_slowdown = int(pynvml.nvmlClocksEventReasonHwSlowdown)
    gpus = [FakeGpu(remap=(0, 0, 0, 1)), FakeGpu(nvlinks_up=16, clock_reasons=hw_slowdown)]
    install_fake_nvml(monkeypatch, gpus)
    assert health.main(["--expect-gpus", "8", "--expect-nvlink"]) == 1
    err = capsys.readouterr().err
    assert "expected 8 GPU(s), NVML sees 2" in err
    assert "row remap failed" in err
    assert "2 of 18 NVLink links down" in err
    assert "hw_slowdown" in err


def test_nvml_library_absent_is_clean(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_library() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    with pytest.raises(telemetry.NvmlUnavailableError, match="NVML could not start"):
        telemetry.sample_gpus()
    assert health.main(["--expect-gpus", "0"]) == 0
    assert "no NVIDIA GPU/NVML here" in capsys.readouterr().out
    assert health.main(["--expect-gpus", "8"]) == 1
    err = capsys.readouterr().err
    assert "expected 8 GPU(s) but NVML is unavailable" in err and "Traceback" not in err


def test_nvidia_ml_py_not_installed_is_clean(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(telemetry.NvmlUnavailableError, match="not installed"):
        telemetry.load_nvml()
    assert health.main(["--expect-gpus", "0"]) == 0
    assert "nvidia-ml-py (pynvml) is not installed" in capsys.readouterr().out


def test_unsupported_queries_read_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_nvml(monkeypatch, [FakeGpu(nvlinks=0)])

    def not_supported(*_: object) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetRemappedRows", not_supported)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEccErrors", not_supported)
    (gpu,) = telemetry.sample_gpus()
    assert gpu.remap_pending is None and gpu.ecc_uncorrected_volatile is None
    assert gpu.nvlink_total is None and gpu.errors == ()
    assert health.problems([gpu], 1, expect_nvlink=False) == []
    assert "no NVLink" in health.problems([gpu], 1, expect_nvlink=True)[0]
