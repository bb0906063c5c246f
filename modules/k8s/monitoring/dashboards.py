"""Grafana dashboards as code.

`gpu_dashboard` builds the "GPU fleet and training" dashboard: per-GPU hardware panels
from the DCGM exporter (utilisation, SM and tensor-core activity, memory, power,
temperature, XID and ECC errors, NVLink traffic), attribution of GPUs to pods and jobs,
and the training jobs' own metrics (step time, tokens/s, MFU, data wait). It ships in a
ConfigMap that Grafana's sidecar loads (label ``grafana_dashboard: "1"``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from modules.k8s.common import Manifest, metadata
from modules.k8s.names import MONITORING_NAMESPACE

DASHBOARD_LABEL = "grafana_dashboard"
DASHBOARD_CONFIGMAP = "gpuplatform-dashboards"
GPU_DASHBOARD_UID = "gpuplatform-gpu"
GPU_DASHBOARD_FILE = "gpu-fleet-and-training.json"

#: Per-GPU filter from the dashboard's variables.
GPU_FILTER = 'Hostname=~"$node"'
#: Pod -> job attribution: kube-state-metrics exports the pod label the Job controller
#: sets (allow-listed in the monitoring values), joined onto per-pod GPU series.
JOB_LABEL = "label_batch_kubernetes_io_job_name"
JOB_JOIN = f"* on (namespace, pod) group_left ({JOB_LABEL}) kube_pod_labels"


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """One dashboard panel: a title, its queries and the unit of its values."""

    title: str
    targets: tuple[Target, ...]
    unit: str = "short"
    kind: str = "timeseries"
    description: str = ""


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


def _rows() -> tuple[Row, ...]:
    f = GPU_FILTER
    per_gpu = "{{Hostname}} GPU {{gpu}}"
    return (
        Row(
            "GPU hardware",
            (
                Panel(
                    "GPU utilisation",
                    (Target(f"DCGM_FI_DEV_GPU_UTIL{{{f}}}", per_gpu),),
                    "percent",
                    description="Share of time a kernel ran on the GPU.",
                ),
                Panel(
                    "SM activity",
                    (Target(f"DCGM_FI_PROF_SM_ACTIVE{{{f}}}", per_gpu),),
                    "percentunit",
                    description="Share of cycles with at least one warp on an SM.",
                ),
                Panel(
                    "Tensor core activity",
                    (Target(f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{f}}}", per_gpu),),
                    "percentunit",
                    description="Share of cycles the tensor (matrix) pipes are busy.",
                ),
                Panel(
                    "GPU memory used",
                    (
                        Target(
                            f"DCGM_FI_DEV_FB_USED{{{f}}} / "
                            f"(DCGM_FI_DEV_FB_USED{{{f}}} + DCGM_FI_DEV_FB_FREE{{{f}}})",
                            per_gpu,
                        ),
                    ),
                    "percentunit",
                ),
                Panel(
                    "Power draw",
                    (Target(f"DCGM_FI_DEV_POWER_USAGE{{{f}}}", per_gpu),),
                    "watt",
                ),
                Panel(
                    "Temperature",
                    (Target(f"DCGM_FI_DEV_GPU_TEMP{{{f}}}", per_gpu),),
                    "celsius",
                ),
                Panel(
                    "NVLink traffic",
                    (
                        Target(f"DCGM_FI_PROF_NVLINK_TX_BYTES{{{f}}}", "tx " + per_gpu),
                        Target(f"DCGM_FI_PROF_NVLINK_RX_BYTES{{{f}}}", "rx " + per_gpu),
                    ),
                    "Bps",
                ),
                Panel(
                    "Throttling (share of time)",
                    (
                        Target(
                            f"rate(DCGM_FI_DEV_POWER_VIOLATION{{{f}}}[5m]) / 1e6",
                            "power " + per_gpu,
                        ),
                        Target(
                            f"rate(DCGM_FI_DEV_THERMAL_VIOLATION{{{f}}}[5m]) / 1e6",
                            "thermal " + per_gpu,
                        ),
                    ),
                    "percentunit",
                ),
                Panel(
                    "XID errors (last code)",
                    (Target(f"DCGM_FI_DEV_XID_ERRORS{{{f}}} > 0", per_gpu),),
                    "none",
                    description="Last XID error code reported by the driver; empty is healthy.",
                ),
                Panel(
                    "Uncorrected ECC errors (1h)",
                    (
                        Target(
                            f"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{f}}}[1h])",
                            per_gpu,
                        ),
                    ),
                    "none",
                ),
            ),
        ),
        Row(
            "Who uses the GPUs",
            (
                Panel(
                    "GPU utilisation by pod",
                    (
                        Target(
                            'avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""})',
                            "{{namespace}}/{{pod}}",
                        ),
                    ),
                    "percent",
                ),
                Panel(
                    "GPUs held by job",
                    (
                        Target(
                            f'count by (namespace, {JOB_LABEL}) (DCGM_FI_DEV_GPU_UTIL{{pod!=""}} '
                            f"{JOB_JOIN})",
                            "{{namespace}}/{{" + JOB_LABEL + "}}",
                        ),
                    ),
                    "none",
                ),
                Panel(
                    "GPU utilisation by job",
                    (
                        Target(
                            f'avg by (namespace, {JOB_LABEL}) (DCGM_FI_DEV_GPU_UTIL{{pod!=""}} '
                            f"{JOB_JOIN})",
                            "{{namespace}}/{{" + JOB_LABEL + "}}",
                        ),
                    ),
                    "percent",
                ),
                Panel(
                    "Idle allocated GPUs",
                    (
                        Target(
                            'count by (namespace) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{pod!=""}'
                            "[30m]) < 5)",
                            "{{namespace}}",
                        ),
                    ),
                    "none",
                    description="GPUs held by a pod but under 5% busy over 30 minutes.",
                ),
            ),
        ),
        Row(
            "Training jobs",
            (
                Panel(
                    "Step",
                    (
                        Target(
                            "max by (namespace, training_job) (training_step)", "{{training_job}}"
                        ),
                    ),
                    "none",
                ),
                Panel(
                    "Loss",
                    (
                        Target(
                            "avg by (namespace, training_job) (training_loss)", "{{training_job}}"
                        ),
                    ),
                    "none",
                ),
                Panel(
                    "Step time",
                    (
                        Target(
                            "max by (namespace, training_job) (training_step_time_seconds)",
                            "{{training_job}}",
                        ),
                    ),
                    "s",
                ),
                Panel(
                    "Tokens per second",
                    (
                        Target(
                            "sum by (namespace, training_job) (training_tokens_per_second)",
                            "{{training_job}}",
                        ),
                    ),
                    "short",
                ),
                Panel(
                    "Model FLOPs utilisation (MFU)",
                    (
                        Target(
                            "avg by (namespace, training_job) (training_mfu_ratio)",
                            "{{training_job}}",
                        ),
                    ),
                    "percentunit",
                ),
                Panel(
                    "Data wait (share of step time)",
                    (
                        Target(
                            "avg by (namespace, training_job) (training_data_wait_ratio)",
                            "{{training_job}}",
                        ),
                    ),
                    "percentunit",
                ),
            ),
        ),
    )


PANEL_WIDTH = 8
PANEL_HEIGHT = 8
GRID_COLUMNS = 24


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": PANEL_HEIGHT, "w": PANEL_WIDTH, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "expr": t.expr,
                "legendFormat": t.legend,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
            }
            for i, t in enumerate(panel.targets)
        ],
    }


def label_variable(name: str, label: str, query: str) -> dict[str, Any]:
    """A dashboard variable over the values of one Prometheus label (``label_values``),
    multi-select with "All"."""
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": name},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
    }


def dashboard_model(
    uid: str, title: str, tags: list[str], rows: Sequence[Row], variables: list[dict[str, Any]]
) -> dict[str, Any]:
    """A dashboard as Grafana's JSON model: ``rows`` of panels on a 24-column grid, a
    data-source variable followed by ``variables``."""
    panels: list[dict[str, Any]] = []
    panel_id, y = 1, 0
    for row in rows:
        panels.append(
            {
                "id": panel_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_COLUMNS, "x": 0, "y": y},
                "panels": [],
            }
        )
        panel_id, y = panel_id + 1, y + 1
        for index, panel in enumerate(row.panels):
            x = (index * PANEL_WIDTH) % GRID_COLUMNS
            if index and x == 0:
                y += PANEL_HEIGHT
            panels.append(_panel_json(panel, panel_id, x, y))
            panel_id += 1
        y += PANEL_HEIGHT
    datasource = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
    }
    return {
        "uid": uid,
        "title": title,
        "tags": tags,
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [datasource, *variables]},
        "panels": panels,
    }


def gpu_dashboard() -> dict[str, Any]:
    """The GPU fleet and training dashboard as Grafana's JSON model."""
    node = label_variable("node", "Node", "label_values(DCGM_FI_DEV_GPU_UTIL, Hostname)")
    return dashboard_model(
        GPU_DASHBOARD_UID,
        "GPU fleet and training",
        ["gpuplatform", "gpu", "training"],
        _rows(),
        [node],
    )


def dashboard_configmap(name: str, file_name: str, dashboard: dict[str, Any]) -> Manifest:
    """A ConfigMap in the monitoring namespace that Grafana's sidecar loads
    ``dashboard`` from (it watches the ``grafana_dashboard`` label), as ``file_name``."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(name, MONITORING_NAMESPACE, labels={DASHBOARD_LABEL: "1"}),
        "data": {file_name: json.dumps(dashboard, indent=1, sort_keys=True)},
    }


def dashboards_configmap() -> Manifest:
    """The GPU fleet dashboard's ConfigMap."""
    return dashboard_configmap(DASHBOARD_CONFIGMAP, GPU_DASHBOARD_FILE, gpu_dashboard())


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL query of a dashboard (for tests and reviews)."""
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
