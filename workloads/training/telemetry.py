"""GPU telemetry through NVML (nvidia-ml-py, imported as ``pynvml``).

`sample_gpus` reads, for every GPU: utilisation, memory, power against its limit, SM
clock against its maximum and the reasons it is held down (throttling), temperature,
ECC error counts, remapped-row counts (pending remaps need a GPU reset) and NVLink
link states. A query the GPU does not support reads as ``None`` rather than failing.
Where there is no NVIDIA driver or no nvidia-ml-py, `NvmlUnavailableError` says so in one
line and the caller carries on without GPU telemetry.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")

# NVML's clock event ("throttle") reason bits, by the constant names nvidia-ml-py uses.
THROTTLE_REASONS: tuple[tuple[str, str], ...] = (
    ("nvmlClocksEventReasonGpuIdle", "gpu_idle"),
    ("nvmlClocksEventReasonApplicationsClocksSetting", "applications_clocks_setting"),
    ("nvmlClocksEventReasonSwPowerCap", "sw_power_cap"),
    ("nvmlClocksEventReasonHwSlowdown", "hw_slowdown"),
    ("nvmlClocksEventReasonSyncBoost", "sync_boost"),
    ("nvmlClocksEventReasonSwThermalSlowdown", "sw_thermal_slowdown"),
    ("nvmlClocksEventReasonHwThermalSlowdown", "hw_thermal_slowdown"),
    ("nvmlClocksEventReasonHwPowerBrakeSlowdown", "hw_power_brake_slowdown"),
    ("nvmlClocksEventReasonDisplayClockSetting", "display_clock_setting"),
)
#: Reasons that mean the GPU is being slowed by a fault or limit, not by being idle.
HARMFUL_THROTTLE_REASONS = frozenset(
    {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"}
)


class NvmlUnavailableError(RuntimeError):
    """No NVML here (no nvidia-ml-py, no NVIDIA driver, or no GPU): the reason in words."""


@dataclass(frozen=True)
class GpuSample:
    """One GPU's readings (``None`` where the GPU does not report the value)."""

    index: int
    name: str
    uuid: str | None = None
    utilization_pct: int | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    throttle_reasons: tuple[str, ...] = ()
    temperature_c: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_volatile: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    nvlink_up: int | None = None
    nvlink_total: int | None = None
    errors: tuple[str, ...] = field(default_factory=tuple)

    def summary(self) -> str:
        """One log line."""
        parts = [f"gpu{self.index} {self.name}"]
        if self.utilization_pct is not None:
            parts.append(f"util {self.utilization_pct}%")
        if self.memory_used_mib is not None and self.memory_total_mib:
            parts.append(
                f"mem {self.memory_used_mib / 1024:.1f}/{self.memory_total_mib / 1024:.0f} GiB"
            )
        if self.power_w is not None and self.power_limit_w:
            parts.append(f"power {self.power_w:.0f}/{self.power_limit_w:.0f} W")
        if self.sm_clock_mhz is not None:
            parts.append(f"sm {self.sm_clock_mhz}/{self.sm_clock_max_mhz or '?'} MHz")
        if self.temperature_c is not None:
            parts.append(f"{self.temperature_c} C")
        harmful = [r for r in self.throttle_reasons if r in HARMFUL_THROTTLE_REASONS]
        if harmful:
            parts.append("THROTTLED: " + ",".join(harmful))
        return ", ".join(parts)


def load_nvml() -> ModuleType:
    """Import nvidia-ml-py and initialise NVML; `NvmlUnavailableError` with the reason."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError as err:
        raise NvmlUnavailableError("nvidia-ml-py (pynvml) is not installed") from err
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise NvmlUnavailableError(f"NVML could not start: {err}") from err
    return nvml


@contextlib.contextmanager
def nvml_session() -> Iterator[ModuleType]:
    """NVML, initialised for the block and shut down after it."""
    nvml = load_nvml()
    try:
        yield nvml
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _sample_one(nvml: ModuleType, index: int) -> GpuSample:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    errors: list[str] = []

    def read(what: str, query: Callable[[], T]) -> T | None:
        try:
            return query()
        except nvml.NVMLError_NotSupported:
            return None
        except nvml.NVMLError as err:
            errors.append(f"{what}: {err}")
            return None

    util = read("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    memory = read("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    power_mw = read("power", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
    limit_mw = read("power limit", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))

    def clock_reasons() -> int:
        try:
            return int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        except nvml.NVMLError_FunctionNotFound:  # drivers before the 535 rename
            return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

    reasons_mask = read("clock event reasons", clock_reasons)
    reasons = tuple(
        label
        for constant, label in THROTTLE_REASONS
        if reasons_mask is not None and int(reasons_mask) & int(getattr(nvml, constant, 0))
    )
    remap = read("remapped rows", lambda: nvml.nvmlDeviceGetRemappedRows(handle))
    links_up = links_total = None
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 0))
    for link in range(max_links):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError:
            continue  # link not present on this GPU
        links_total = (links_total or 0) + 1
        links_up = (links_up or 0) + (1 if state == nvml.NVML_FEATURE_ENABLED else 0)
    return GpuSample(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=read("uuid", lambda: _text(nvml.nvmlDeviceGetUUID(handle))),
        utilization_pct=None if util is None else int(util.gpu),
        memory_used_mib=None if memory is None else memory.used / 2**20,
        memory_total_mib=None if memory is None else memory.total / 2**20,
        power_w=None if power_mw is None else power_mw / 1000.0,
        power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
        sm_clock_mhz=read(
            "sm clock", lambda: int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        ),
        sm_clock_max_mhz=read(
            "sm max clock", lambda: int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
        ),
        throttle_reasons=reasons,
        temperature_c=read(
            "temperature",
            lambda: int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        ),
        ecc_uncorrected_volatile=read(
            "uncorrected ECC",
            lambda: int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            ),
        ),
        ecc_corrected_volatile=read(
            "corrected ECC",
            lambda: int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC
                )
            ),
        ),
        remapped_rows_correctable=None if remap is None else int(remap[0]),
        remapped_rows_uncorrectable=None if remap is None else int(remap[1]),
        remap_pending=None if remap is None else bool(remap[2]),
        remap_failed=None if remap is None else bool(remap[3]),
        nvlink_up=links_up,
        nvlink_total=links_total,
        errors=tuple(errors),
    )


def sample_gpus() -> list[GpuSample]:
    """Readings of every GPU NVML sees; `NvmlUnavailableError` where there is no NVML."""
    with nvml_session() as nvml:
        count = int(nvml.nvmlDeviceGetCount())
        return [_sample_one(nvml, index) for index in range(count)]
