"""Training figures: step time, tokens/s, TFLOP/s, MFU, data-wait share; and their
export as Prometheus metrics for the monitoring layer.

MFU is model FLOPs utilisation: model FLOPs per token (`workloads.training.model.flops_per_token`)
times tokens per second, divided by the devices' peak dense bf16 rate, looked up by
device name below. On a CPU, or a GPU missing from the table, MFU is not applicable
and is reported as ``n/a`` (and not exported).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge, start_http_server

#: Exported metric names (the monitoring layer's alerts use ``training_step``).
METRIC_STEP = "training_step"
METRIC_LOSS = "training_loss"
METRIC_STEP_TIME = "training_step_time_seconds"
METRIC_TOKENS_PER_SECOND = "training_tokens_per_second"
METRIC_TFLOPS = "training_model_tflops_per_second"
METRIC_MFU = "training_mfu_ratio"
METRIC_DATA_WAIT = "training_data_wait_ratio"
METRIC_NAMES: tuple[str, ...] = (
    METRIC_STEP,
    METRIC_LOSS,
    METRIC_STEP_TIME,
    METRIC_TOKENS_PER_SECOND,
    METRIC_TFLOPS,
    METRIC_MFU,
    METRIC_DATA_WAIT,
)

# Peak dense (no sparsity) bf16 tensor-core TFLOP/s per GPU, from NVIDIA's data sheets.
# Matched against torch.cuda.get_device_name() by substring, first match wins, so the
# more specific names come first ("H100 PCIe" before "H100").
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GH200", 989.0),
    ("H200", 989.0),  # same SXM5 compute as H100 SXM, more and faster memory
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # H100 SXM5 ("NVIDIA H100 80GB HBM3")
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("A10G", 70.0),  # AWS's A10 variant (g5); NVIDIA publishes no sheet, ~70 dense
    ("A10", 125.0),
    ("L4", 121.0),
)


def peak_bf16_tflops(device_name: str | None) -> float | None:
    """Peak dense bf16 TFLOP/s of one device by name, ``None`` when unknown or CPU."""
    if not device_name:
        return None
    for key, peak in PEAK_BF16_TFLOPS:
        if key in device_name:
            return peak
    return None


@dataclass(frozen=True)
class WindowStats:
    """Figures over the steps since the last log line.

    Args:
        steps: optimizer steps in the window.
        step_time_s: mean wall time of one step.
        tokens_per_s: tokens processed per second by all ranks together.
        tflops: achieved model TFLOP/s per device.
        mfu: ``tflops`` over the device's peak dense bf16 rate, ``None`` if unknown.
        data_wait_ratio: share of the window spent waiting for batches.
    """

    steps: int
    step_time_s: float
    tokens_per_s: float
    tflops: float
    mfu: float | None
    data_wait_ratio: float


class ThroughputWindow:
    """Accumulates steps between log lines.

    Args:
        tokens_per_step: tokens all ranks process in one optimizer step.
        flops_per_token: model training FLOPs per token.
        devices: devices sharing the work (the world size).
        peak_tflops: one device's peak, ``None`` where MFU is not applicable.
    """

    def __init__(
        self,
        tokens_per_step: int,
        flops_per_token: float,
        devices: int,
        peak_tflops: float | None,
    ) -> None:
        self.tokens_per_step = tokens_per_step
        self.flops_per_token = flops_per_token
        self.devices = devices
        self.peak_tflops = peak_tflops
        self.reset()

    def reset(self) -> None:
        self.started = time.perf_counter()
        self.steps = 0
        self.data_wait_s = 0.0

    def add_step(self, data_wait_s: float) -> None:
        self.steps += 1
        self.data_wait_s += data_wait_s

    def stats(self, now: float | None = None) -> WindowStats:
        """The window's figures (call after the device has been synchronised)."""
        elapsed = max((now or time.perf_counter()) - self.started, 1e-9)
        steps = max(self.steps, 1)
        tokens_per_s = self.tokens_per_step * self.steps / elapsed
        tflops = tokens_per_s * self.flops_per_token / self.devices / 1e12
        mfu = tflops / self.peak_tflops if self.peak_tflops else None
        return WindowStats(
            steps=self.steps,
            step_time_s=elapsed / steps,
            tokens_per_s=tokens_per_s,
            tflops=tflops,
            mfu=mfu,
            data_wait_ratio=min(1.0, self.data_wait_s / elapsed),
        )


def format_mfu(mfu: float | None) -> str:
    return "n/a" if mfu is None else f"{100 * mfu:.1f}%"


class MetricsExporter:
    """The ``training_*`` gauges, served over HTTP when a port is given.

    Args:
        port: TCP port (0: keep the gauges but serve nothing, e.g. in tests).
        registry: the registry to use (a fresh one by default, not the global).
        host: the address to bind (``0.0.0.0``: every interface, as a pod needs).
    """

    def __init__(
        self, port: int = 0, registry: CollectorRegistry | None = None, *, host: str = "0.0.0.0"
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.port = port
        #: The address actually bound (host, port), None when nothing is served.
        self.bound: tuple[str, int] | None = None

        def gauge(name: str, text: str) -> Gauge:
            return Gauge(name, text, registry=self.registry)

        self.step = gauge(METRIC_STEP, "Optimizer steps completed")
        self.loss = gauge(METRIC_LOSS, "Training loss (mean over ranks) at the last log step")
        self.step_time = gauge(METRIC_STEP_TIME, "Mean wall time of one optimizer step")
        self.tokens = gauge(METRIC_TOKENS_PER_SECOND, "Tokens per second, all ranks together")
        self.tflops = gauge(METRIC_TFLOPS, "Achieved model TFLOP/s per device")
        self.mfu = gauge(METRIC_MFU, "Model FLOPs utilisation against peak dense bf16 (0-1)")
        self.data_wait = gauge(METRIC_DATA_WAIT, "Share of step time spent waiting for data")
        if port:
            server, _ = start_http_server(port, addr=host, registry=self.registry)
            self.bound = (str(server.server_address[0]), int(server.server_address[1]))

    def update(self, step: int, loss: float, stats: WindowStats) -> None:
        self.step.set(step)
        self.loss.set(loss)
        self.step_time.set(stats.step_time_s)
        self.tokens.set(stats.tokens_per_s)
        self.tflops.set(stats.tflops)
        if stats.mfu is not None:
            self.mfu.set(stats.mfu)
        self.data_wait.set(stats.data_wait_ratio)

    def set_step(self, step: int) -> None:
        self.step.set(step)
