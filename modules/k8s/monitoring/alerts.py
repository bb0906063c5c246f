"""Alert rules for GPUs and training jobs (a PrometheusRule for the Prometheus Operator).

GPU rules read the DCGM exporter (see `modules.k8s.gpu.spec.DCGM_FIELDS`), node rules read
kube-state-metrics, and the training rule reads the metrics the training pods export
(``training_step`` and friends, scraped by the platform's PodMonitor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modules.k8s.common import Manifest, metadata
from modules.k8s.monitoring.spec import MonitoringSpec
from modules.k8s.names import MONITORING_NAMESPACE

PROMETHEUS_RULE_NAME = "gpuplatform-alerts"

# NVML clock-event reason bits (DCGM_FI_DEV_CLOCKS_EVENT_REASONS): hardware slowdown
# (0x8), hardware thermal slowdown (0x40) and hardware power brake (0x80). PromQL has no
# bitwise AND, so a bit is tested as floor(x / bit) % 2.
HW_SLOWDOWN_BITS = {"hw_slowdown": 8, "hw_thermal_slowdown": 64, "hw_power_brake": 128}


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule."""

    alert: str
    expr: str
    for_minutes: int
    severity: str
    summary: str
    description: str

    def manifest(self) -> dict[str, Any]:
        rule: dict[str, Any] = {
            "alert": self.alert,
            "expr": self.expr,
            "labels": {"severity": self.severity, "platform": "gpuplatform"},
            "annotations": {"summary": self.summary, "description": self.description},
        }
        if self.for_minutes:
            rule["for"] = f"{self.for_minutes}m"
        return rule


def gpu_alert_rules(spec: MonitoringSpec) -> list[AlertRule]:
    """XID and ECC errors, throttling, heat, idle allocated GPUs, GPU nodes not ready."""
    where = "GPU {{ $labels.gpu }} on {{ $labels.Hostname }}"
    hw_bits = " or ".join(
        f"(floor(DCGM_FI_DEV_CLOCKS_EVENT_REASONS / {bit}) % 2 == 1)"
        for bit in HW_SLOWDOWN_BITS.values()
    )
    return [
        AlertRule(
            "GpuXidError",
            "DCGM_FI_DEV_XID_ERRORS > 0",
            0,
            "critical",
            f"XID error on {where}",
            "The driver reported XID {{ $value }}. Check NVIDIA's XID catalogue; drain the "
            "node if the XID calls for a reset or replacement.",
        ),
        AlertRule(
            "GpuUncorrectedEccError",
            "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0"
            " or increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[10m]) > 0"
            " or DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
            0,
            "critical",
            f"Uncorrected ECC error on {where}",
            "Double-bit ECC errors or failed row remapping: the GPU's memory is not "
            "reliable. Drain the node and reset or replace the GPU.",
        ),
        AlertRule(
            "GpuThermalThrottling",
            f"rate(DCGM_FI_DEV_THERMAL_VIOLATION[5m]) > 0 or {hw_bits}",
            10,
            "warning",
            f"Thermal or hardware throttling on {where}",
            "The GPU's clocks are being reduced for temperature or by hardware slowdown. "
            "Check cooling and the node's power supply.",
        ),
        AlertRule(
            "GpuPowerThrottling",
            "rate(DCGM_FI_DEV_POWER_VIOLATION[5m]) / 1e6 > 0.2",
            15,
            "warning",
            f"Power throttling on {where}",
            "More than 20% of the time the GPU runs capped by its power limit.",
        ),
        AlertRule(
            "GpuHighTemperature",
            f"DCGM_FI_DEV_GPU_TEMP > {spec.gpu_temperature_alert_celsius}",
            5,
            "warning",
            f"{where} is above {spec.gpu_temperature_alert_celsius} C",
            "The GPU runs hot ({{ $value }} C); expect throttling.",
        ),
        AlertRule(
            "GpuAllocatedButIdle",
            f'avg_over_time(DCGM_FI_DEV_GPU_UTIL{{pod!=""}}[{spec.idle_gpu_minutes}m])'
            f" < {spec.idle_gpu_utilization_percent}",
            5,
            "warning",
            "GPU held by {{ $labels.namespace }}/{{ $labels.pod }} is idle",
            f"The pod holds {where} but used under {spec.idle_gpu_utilization_percent}% of it "
            f"for {spec.idle_gpu_minutes} minutes. Stop the job or release the GPU.",
        ),
        AlertRule(
            "GpuNodeNotReady",
            'kube_node_status_condition{condition="Ready",status="true"} == 0'
            ' and on (node) kube_node_status_capacity{resource="nvidia_com_gpu"} > 0',
            spec.node_not_ready_minutes,
            "critical",
            "GPU node {{ $labels.node }} is not Ready",
            "A node with GPUs has not been Ready for "
            f"{spec.node_not_ready_minutes} minutes; its jobs cannot progress.",
        ),
    ]


def training_alert_rules(spec: MonitoringSpec) -> list[AlertRule]:
    """A training job whose step counter stopped, and one starved for data."""
    return [
        AlertRule(
            "TrainingJobNoProgress",
            "max by (namespace, training_job) "
            f"(changes(training_step[{spec.training_stall_minutes}m])) == 0",
            5,
            "warning",
            "Training job {{ $labels.namespace }}/{{ $labels.training_job }} makes no progress",
            f"training_step has not changed for {spec.training_stall_minutes} minutes: "
            "the job is hung, waiting on a rank, or stuck loading data.",
        ),
        AlertRule(
            "TrainingJobDataStarved",
            "avg by (namespace, training_job) (avg_over_time(training_data_wait_ratio[15m])) > 0.3",
            15,
            "info",
            "Training job {{ $labels.namespace }}/{{ $labels.training_job }} waits on data",
            "More than 30% of step time is spent waiting for input; the GPUs are underused.",
        ),
    ]


def prometheus_rule(spec: MonitoringSpec) -> Manifest:
    """The PrometheusRule with both groups."""
    groups = [
        {"name": "gpuplatform.gpu", "rules": [r.manifest() for r in gpu_alert_rules(spec)]},
        {
            "name": "gpuplatform.training",
            "rules": [r.manifest() for r in training_alert_rules(spec)],
        },
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata(PROMETHEUS_RULE_NAME, MONITORING_NAMESPACE),
        "spec": {"groups": groups},
    }
