"""Monitoring values, the training PodMonitor, the GPU dashboard and the alert rules."""

from __future__ import annotations

import json

import pytest

from modules.k8s.monitoring.alerts import gpu_alert_rules, prometheus_rule, training_alert_rules
from modules.k8s.monitoring.dashboards import dashboard_queries, dashboards_configmap, gpu_dashboard
from modules.k8s.monitoring.spec import (
    MonitoringSpec,
    kube_prometheus_stack_values,
    training_pod_monitor,
)
from modules.validation import InvalidArgsError
from tests.k8s.crd_checks import crd_errors
from tests.k8s.fixtures import onprem_args
from tests.k8s.programs import registrations, releases

SPEC = MonitoringSpec()


def test_prometheus_keeps_data_on_an_encrypted_volume_with_retention() -> None:
    values = kube_prometheus_stack_values(SPEC, "gp3-encrypted", managed_control_plane=True)
    prom = values["prometheus"]["prometheusSpec"]
    claim = prom["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "gp3-encrypted"
    assert claim["resources"]["requests"]["storage"] == "100Gi"
    assert prom["retention"] == "15d"
    assert prom["retentionSize"] == "85GB"
    am = values["alertmanager"]["alertmanagerSpec"]["storage"]["volumeClaimTemplate"]["spec"]
    assert am["storageClassName"] == "gp3-encrypted"
    # Our PodMonitor, PrometheusRule and the GPU Operator's ServiceMonitor are picked up.
    assert prom["podMonitorSelectorNilUsesHelmValues"] is False
    assert prom["serviceMonitorSelectorNilUsesHelmValues"] is False
    assert prom["ruleSelectorNilUsesHelmValues"] is False


def test_on_prem_uses_the_configured_storage_class() -> None:
    values = releases(registrations("onprem"))["kube-prometheus-stack"]["values"]
    claim = values["prometheus"]["prometheusSpec"]["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == onprem_args().onprem.storage_class  # type: ignore[union-attr]
    assert "kubeScheduler" not in values  # only managed control planes hide these


@pytest.mark.parametrize("access", ["port-forward", "internal-load-balancer"])
def test_grafana_is_never_public(access: str) -> None:
    spec = MonitoringSpec(grafana_access=access)  # type: ignore[arg-type]
    grafana = kube_prometheus_stack_values(spec, "gp3-encrypted", True)["grafana"]
    service = grafana["service"]
    # Grafana serves TLS: its Service listens on 443 and forwards to 3000.
    assert (service["port"], service["targetPort"], service["portName"]) == (443, 3000, "https")
    if access == "port-forward":
        assert service["type"] == "ClusterIP" and "annotations" not in service
    else:
        assert service["type"] == "LoadBalancer"
        annotations = service["annotations"]
        assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
        assert annotations["service.beta.kubernetes.io/aws-load-balancer-internal"] == "true"
    assert grafana["ingress"] == {"enabled": False}
    assert grafana["adminPassword"] == ""  # random, not the chart's well-known default
    assert grafana["grafana.ini"]["analytics"]["reporting_enabled"] is False
    assert grafana["grafana.ini"]["auth.anonymous"]["enabled"] is False


def test_platform_services_run_on_the_system_pool_and_node_exporter_everywhere() -> None:
    values = kube_prometheus_stack_values(SPEC, "gp3-encrypted", True)
    system = {"gpuplatform.ae/role": "system"}
    assert values["prometheus"]["prometheusSpec"]["nodeSelector"] == system
    assert values["grafana"]["nodeSelector"] == system
    assert values["prometheusOperator"]["nodeSelector"] == system
    tolerated = {t["key"] for t in values["prometheus-node-exporter"]["tolerations"]}
    assert tolerated == {"nvidia.com/gpu", "gpuplatform.ae/fabric"}


def test_training_pods_are_scraped_on_their_metrics_port() -> None:
    monitor = training_pod_monitor(["vision", "nlp"])
    spec = monitor["spec"]
    assert spec["selector"] == {"matchLabels": {"gpuplatform.ae/metrics": "training"}}
    assert spec["namespaceSelector"] == {"matchNames": ["team-nlp", "team-vision"]}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"
    targets = {r["targetLabel"] for r in endpoint["relabelings"]}
    assert "training_job" in targets


DASHBOARD_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_NVLINK_RX_BYTES",
    "training_step_time_seconds",
    "training_tokens_per_second",
    "training_mfu_ratio",
    "training_data_wait_ratio",
)


def test_the_gpu_dashboard_shows_every_required_panel() -> None:
    dashboard = gpu_dashboard()
    queries = "\n".join(dashboard_queries(dashboard))
    for metric in DASHBOARD_METRICS:
        assert metric in queries, metric
    # Per-pod and per-job attribution.
    assert "by (namespace, pod)" in queries
    assert "label_batch_kubernetes_io_job_name" in queries
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_panels_do_not_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in gpu_dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        cells = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & taken, panel["title"]
        taken |= cells


def test_the_dashboard_configmap_is_loaded_by_grafanas_sidecar() -> None:
    configmap = dashboards_configmap()
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == "monitoring"
    (text,) = configmap["data"].values()
    assert json.loads(text)["uid"] == "gpuplatform-gpu"
    values = kube_prometheus_stack_values(SPEC, "gp3-encrypted", True)
    sidecar = values["grafana"]["sidecar"]["dashboards"]
    assert (sidecar["label"], sidecar["labelValue"]) == ("grafana_dashboard", "1")


def test_alerts_cover_what_the_issue_asks_for() -> None:
    names = {r.alert for r in gpu_alert_rules(SPEC) + training_alert_rules(SPEC)}
    assert {
        "GpuXidError",
        "GpuUncorrectedEccError",
        "GpuThermalThrottling",
        "GpuPowerThrottling",
        "GpuAllocatedButIdle",
        "GpuNodeNotReady",
        "TrainingJobNoProgress",
    } <= names
    stall = next(r for r in training_alert_rules(SPEC) if r.alert == "TrainingJobNoProgress")
    assert "changes(training_step[20m])" in stall.expr
    idle = next(
        r
        for r in gpu_alert_rules(MonitoringSpec(idle_gpu_minutes=90))
        if r.alert == "GpuAllocatedButIdle"
    )
    assert "[90m]" in idle.expr and "< 5" in idle.expr


def test_prometheus_rule_groups() -> None:
    rule = prometheus_rule(SPEC)
    assert rule["metadata"]["namespace"] == "monitoring"
    groups = {g["name"]: g["rules"] for g in rule["spec"]["groups"]}
    assert set(groups) == {"gpuplatform.gpu", "gpuplatform.training"}
    for rules in groups.values():
        for r in rules:
            assert r["labels"]["severity"] in ("critical", "warning", "info")
            assert r["annotations"]["summary"] and r["annotations"]["description"]


def test_monitoring_spec_reports_every_problem() -> None:
    with pytest.raises(InvalidArgsError) as error:
        MonitoringSpec(retention_days=0, grafana_access="public", idle_gpu_minutes=1)  # type: ignore[arg-type]
    assert {p.field for p in error.value.problems} == {
        "retention_days",
        "grafana_access",
        "idle_gpu_minutes",
    }


def test_internal_load_balancer_is_eks_only() -> None:
    with pytest.raises(InvalidArgsError) as error:
        onprem_args(monitoring=MonitoringSpec(grafana_access="internal-load-balancer"))
    assert [p.field for p in error.value.problems] == ["monitoring.grafana_access"]


@pytest.mark.parametrize(
    ("field", "broken", "error"),
    [
        ("selector", None, "spec.selector: required"),
        ("podMetricsEndpoints", [], "spec.podMetricsEndpoints: at least one endpoint"),
        ("podMetricsEndpoints", [{"path": "/metrics"}], "podMetricsEndpoints[].port: required"),
    ],
)
def test_the_crd_checks_catch_a_pod_monitor_that_scrapes_nothing(
    field: str, broken: object, error: str
) -> None:
    """The checks every shipped PodMonitor passes (`crd_errors`) refuse a broken one."""
    monitor = training_pod_monitor(["nlp"])
    assert crd_errors([monitor]) == []
    spec = dict(monitor["spec"])
    if broken is None:
        del spec[field]
    else:
        spec[field] = broken
    assert any(e.endswith(error) for e in crd_errors([{**monitor, "spec": spec}]))
