"""What watches the inference services: the scrape, the alert rules and the dashboard.

The CPU predictor exports, per model version (labels ``model`` and ``version``):

* ``uae_predictor_requests_total{model,version,code}`` (counter),
* ``uae_predictor_request_duration_seconds`` (histogram),
* ``uae_predictor_drift_score{model,version,statistic}`` (gauge; ``statistic`` is
  ``token_js``, the Jensen-Shannon distance of live token frequencies from the training
  reference, or ``prompt_length_psi``, the population stability index of prompt lengths),
* ``uae_predictor_rejected_total{model,version,reason}`` (counter: 4xx and shed load).

Drift is computed outside the predictors, for the CPU predictor and Triton alike, by
each InferenceService's drift service (``<name>-drift``, fed by KServe's request logger;
`modules.k8s.serving.inference_service.drift`), which exports the same
``uae_predictor_drift_score`` gauge; a PodMonitor scrapes it.

Triton (GPU pools) exports its own ``nv_inference_*`` series with the same ``model`` and
``version`` labels. Every panel groups by ``model, version``, so a canary and its stable
version sit side by side.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from modules.k8s.common import Manifest, metadata
from modules.k8s.monitoring.alerts import AlertRule
from modules.k8s.monitoring.dashboards import (
    DASHBOARD_LABEL,
    Panel,
    Row,
    Target,
    dashboard_model,
    label_variable,
)
from modules.k8s.monitoring.spec import team_pod_monitor
from modules.k8s.names import MONITORING_NAMESPACE
from modules.k8s.serving.spec import ServingSpec

#: KServe labels every predictor pod with its InferenceService's name.
ISVC_POD_LABEL = "serving.kserve.io/inferenceservice"
#: Container port names of the runtimes: the CPU predictor serves /metrics on its REST
#: port; Triton on a port of its own.
PREDICTOR_HTTP_PORT_NAME = "http1"
TRITON_METRICS_PORT_NAME = "metrics"
SERVING_POD_MONITOR = "inference-services"
DRIFT_POD_MONITOR = "drift-services"
#: Label of every drift service pod: the InferenceService whose inputs it watches.
DRIFT_POD_LABEL = "gpuplatform.ae/drift-for"
DRIFT_METRICS_PORT_NAME = "metrics"
SERVING_RULE_NAME = "gpuplatform-serving-alerts"
SERVING_DASHBOARD_CONFIGMAP = "gpuplatform-serving-dashboard"
SERVING_DASHBOARD_UID = "gpuplatform-serving"
SERVING_DASHBOARD_FILE = "model-serving.json"

REQUESTS = "uae_predictor_requests_total"
DURATION = "uae_predictor_request_duration_seconds"
DRIFT = "uae_predictor_drift_score"
REJECTED = "uae_predictor_rejected_total"
BY_VERSION = "model, version"
MODEL_FILTER = 'model=~"$model"'


def _error_ratio(window: str, where: str = "") -> str:
    inner = f"{{{where}}}" if where else ""
    errors = f'{REQUESTS}{{{where + ", " if where else ""}code=~"5.."}}'
    return (
        f"sum by ({BY_VERSION}) (rate({errors}[{window}]))"
        f" / sum by ({BY_VERSION}) (rate({REQUESTS}{inner}[{window}]))"
    )


def _latency_quantile(quantile: float, window: str, where: str = "") -> str:
    inner = f"{{{where}}}" if where else ""
    return (
        f"histogram_quantile({quantile}, sum by ({BY_VERSION}, le) "
        f"(rate({DURATION}_bucket{inner}[{window}])))"
    )


def serving_alert_rules(spec: ServingSpec) -> list[AlertRule]:
    """Input drift past its threshold for ``drift_minutes``; errors; slow answers."""
    version = "{{ $labels.model }} version {{ $labels.version }}"
    return [
        AlertRule(
            "ModelInputDrift",
            f'{DRIFT}{{statistic="token_js"}} > {spec.drift_token_js_threshold}'
            f' or {DRIFT}{{statistic="prompt_length_psi"}}'
            f" > {spec.drift_prompt_length_psi_threshold}",
            spec.drift_minutes,
            "warning",
            f"Inputs of {version} drift from its training data",
            "Drift statistic {{ $labels.statistic }} is {{ $value }}, above its threshold "
            f"for {spec.drift_minutes} minutes (token_js > {spec.drift_token_js_threshold}, "
            f"prompt_length_psi > {spec.drift_prompt_length_psi_threshold}). Compare the "
            "live prompts with the training data; retrain or roll back the version.",
        ),
        AlertRule(
            "InferenceServiceErrors",
            f"{_error_ratio('10m')} > {spec.error_rate_percent / 100:g}",
            10,
            "critical",
            f"{version} answers with server errors",
            f"More than {spec.error_rate_percent:g}% of requests failed with 5xx over 10 "
            "minutes. During a canary, roll the canary back.",
        ),
        AlertRule(
            "InferenceServiceSlow",
            f"{_latency_quantile(0.99, '10m')} > {spec.latency_p99_seconds:g}",
            10,
            "warning",
            f"{version} is slow",
            f"p99 latency is {{{{ $value }}}} s, above {spec.latency_p99_seconds:g} s for 10 "
            "minutes. Check saturation (replicas, batch size) and rejected requests.",
        ),
    ]


def serving_prometheus_rule(spec: ServingSpec) -> Manifest:
    """The PrometheusRule with the serving group."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata(SERVING_RULE_NAME, MONITORING_NAMESPACE),
        "spec": {
            "groups": [
                {
                    "name": "gpuplatform.serving",
                    "rules": [r.manifest() for r in serving_alert_rules(spec)],
                }
            ]
        },
    }


def inference_pod_monitor(team_names: Sequence[str]) -> Manifest:
    """Scrape every predictor pod KServe runs in the team namespaces: the CPU predictor
    on its REST port, Triton on its metrics port. Each series gets the InferenceService
    name (``inference_service``) and the namespace."""
    return team_pod_monitor(
        SERVING_POD_MONITOR,
        team_names,
        {"matchExpressions": [{"key": ISVC_POD_LABEL, "operator": "Exists"}]},
        [PREDICTOR_HTTP_PORT_NAME, TRITON_METRICS_PORT_NAME],
        ("serving_kserve_io_inferenceservice", "inference_service"),
    )


def drift_pod_monitor(team_names: Sequence[str]) -> Manifest:
    """Scrape every InferenceService's drift service in the team namespaces, its series
    labelled with the InferenceService (``inference_service``) as the predictors' are."""
    return team_pod_monitor(
        DRIFT_POD_MONITOR,
        team_names,
        {"matchExpressions": [{"key": DRIFT_POD_LABEL, "operator": "Exists"}]},
        [DRIFT_METRICS_PORT_NAME],
        ("gpuplatform_ae_drift_for", "inference_service"),
        node=False,
    )


def _threshold(value: float) -> Target:
    return Target(f"vector({value:g})", "threshold")


def _rows(spec: ServingSpec) -> tuple[Row, ...]:
    f = MODEL_FILTER
    legend = "{{model}} v{{version}}"
    return (
        Row(
            "Traffic and errors per model version",
            (
                Panel(
                    "Requests per second",
                    (
                        Target(
                            f"sum by ({BY_VERSION}) (rate({REQUESTS}{{{f}}}[5m]))",
                            legend,
                        ),
                    ),
                    "reqps",
                    description="Canary and stable versions side by side: the traffic split.",
                ),
                Panel(
                    "Error rate (5xx share)",
                    (Target(_error_ratio("5m", f), legend),),
                    "percentunit",
                ),
                Panel(
                    "Rejected requests (4xx, shed load)",
                    (
                        Target(
                            f"sum by ({BY_VERSION}, reason) (rate({REJECTED}{{{f}}}[5m]))",
                            "{{model}} v{{version}} {{reason}}",
                        ),
                    ),
                    "reqps",
                ),
            ),
        ),
        Row(
            "Latency and drift per model version",
            (
                Panel(
                    "Latency p50 / p99",
                    (
                        Target(_latency_quantile(0.5, "5m", f), f"{legend} p50"),
                        Target(_latency_quantile(0.99, "5m", f), f"{legend} p99"),
                    ),
                    "s",
                ),
                Panel(
                    "Drift: token distribution (Jensen-Shannon)",
                    (
                        Target(
                            f'max by ({BY_VERSION}) ({DRIFT}{{{f}, statistic="token_js"}})',
                            legend,
                        ),
                        _threshold(spec.drift_token_js_threshold),
                    ),
                    description="Distance of live token frequencies from the training data.",
                ),
                Panel(
                    "Drift: prompt length (PSI)",
                    (
                        Target(
                            f"max by ({BY_VERSION}) "
                            f'({DRIFT}{{{f}, statistic="prompt_length_psi"}})',
                            legend,
                        ),
                        _threshold(spec.drift_prompt_length_psi_threshold),
                    ),
                    description="Population stability index of prompt lengths.",
                ),
            ),
        ),
        Row(
            "Triton (GPU pools)",
            (
                Panel(
                    "Triton successful inferences per second",
                    (
                        Target(
                            f"sum by ({BY_VERSION}) "
                            f"(rate(nv_inference_request_success{{{f}}}[5m]))",
                            legend,
                        ),
                    ),
                    "reqps",
                ),
                Panel(
                    "Triton failed inferences per second",
                    (
                        Target(
                            f"sum by ({BY_VERSION}) "
                            f"(rate(nv_inference_request_failure{{{f}}}[5m]))",
                            legend,
                        ),
                    ),
                    "reqps",
                ),
            ),
        ),
    )


def serving_dashboard(spec: ServingSpec) -> dict[str, Any]:
    """The "Model serving" dashboard as Grafana's JSON model (same grid as the GPU one)."""
    model = label_variable("model", "Model", f"label_values({REQUESTS}, model)")
    return dashboard_model(
        SERVING_DASHBOARD_UID,
        "Model serving",
        ["gpuplatform", "serving", "drift"],
        _rows(spec),
        [model],
    )


def serving_dashboard_configmap(spec: ServingSpec) -> Manifest:
    """The ConfigMap Grafana's dashboard sidecar loads (same label as the GPU one)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            SERVING_DASHBOARD_CONFIGMAP, MONITORING_NAMESPACE, labels={DASHBOARD_LABEL: "1"}
        ),
        "data": {
            SERVING_DASHBOARD_FILE: json.dumps(serving_dashboard(spec), indent=1, sort_keys=True)
        },
    }
