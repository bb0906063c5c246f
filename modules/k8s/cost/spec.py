"""GPU-hour accounting and budgets: OpenCost fed by the platform's Prometheus.

* OpenCost (pinned chart) in namespace ``opencost``, reading the platform's Prometheus
  (kube-prometheus-stack) and exporting its allocation metrics back to it (a
  ServiceMonitor). It runs with the *custom* price provider on every cluster: the
  prices come from this repository (the dated AWS snapshot for cloud pools, the
  site's own prices on premises), so OpenCost never calls AWS's pricing endpoints
  (outside the UAE) and nothing is exported to a billing service. Its UI is off:
  teams read cost in Grafana.
* Recording rules turn OpenCost's per-container allocations and per-node prices into
  cost per team namespace per hour; per-team budget alerts fire at 80% and 100% of
  the monthly budget (the cost of the last 30 days, summed hour by hour).
* A Grafana dashboard: GPU-hours and cost per team per day and per month, GPU-hours
  per Kueue queue (the pods' ``kueue.x-k8s.io/queue-name`` label, exported by
  kube-state-metrics as the monitoring values allow-list).
* OpenCost reads Prometheus over TLS, trusting only the cluster CA (``ca.crt`` of the
  namespace's `modules.k8s.pki.spec.ca_bundle`); its namespace denies all traffic but
  DNS, the API server, Prometheus on 9090 and Prometheus' scrape of OpenCost's 9003.

OpenCost metric names and labels used here (``container_cpu_allocation``,
``container_memory_allocation_bytes``, ``container_gpu_allocation`` by namespace, pod,
node; ``node_cpu_hourly_cost``, ``node_ram_hourly_cost``, ``node_gpu_hourly_cost`` by
node) were read in opencost's ``pkg/costmodel/metrics.go``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from modules.k8s import netpol
from modules.k8s.common import Manifest, metadata, system_node_selector
from modules.k8s.gateway import manifests as gm
from modules.k8s.gateway import spec as gs
from modules.k8s.monitoring.dashboards import dashboard_configmap
from modules.k8s.monitoring.spec import PROMETHEUS_POD_LABELS, PROMETHEUS_PORT, PROMETHEUS_URL
from modules.k8s.names import MONITORING_NAMESPACE, team_namespace
from modules.k8s.pki.spec import CA_KEY, ca_volume
from modules.k8s.versions import Chart

#: OpenCost's chart (github.com/opencost/opencost-helm-chart, tag opencost-2.5.17,
#: app 1.120.1); values checked against that tag's values.yaml and templates.
OPENCOST = Chart("opencost", "2.5.17", "https://opencost.github.io/opencost-helm-chart")
OPENCOST_NAMESPACE = "opencost"
#: OpenCost's API and metrics port (the chart's ``exporter.apiPort``).
OPENCOST_PORT = 9003
CA_DIR = "/etc/gpuplatform/ca"
COST_RULE_NAME = "gpuplatform-cost"
COST_DASHBOARD_CONFIGMAP = "gpuplatform-cost-dashboard"
COST_DASHBOARD_FILE = "team-gpu-hours-and-cost.json"
#: Fractions of the monthly budget that alert (warning, critical).
BUDGET_THRESHOLDS = ((0.8, "warning"), (1.0, "critical"))

#: Metrics these rules and panels read: OpenCost's and kube-state-metrics' own.
OPENCOST_METRICS = (
    "container_cpu_allocation",
    "container_memory_allocation_bytes",
    "container_gpu_allocation",
    "node_cpu_hourly_cost",
    "node_ram_hourly_cost",
    "node_gpu_hourly_cost",
)
KUBE_STATE_METRICS = ("kube_pod_labels",)
QUEUE_LABEL = "label_kueue_x_k8s_io_queue_name"

CPU_COST = "gpuplatform:namespace_cpu_cost_usd_per_hour"
MEMORY_COST = "gpuplatform:namespace_memory_cost_usd_per_hour"
GPU_COST = "gpuplatform:namespace_gpu_cost_usd_per_hour"
TOTAL_COST = "gpuplatform:namespace_cost_usd_per_hour"
GPUS = "gpuplatform:namespace_gpu_allocation"


@dataclass(frozen=True)
class UnitPrices:
    """Hourly prices OpenCost's custom provider applies to every node of a cluster.

    Args:
        cpu_usd: one vCPU for one hour.
        memory_gib_usd: one GiB of memory for one hour.
        gpu_usd: one GPU for one hour.
        source: where the figures come from (shown in the ConfigMap description).
    """

    cpu_usd: float
    memory_gib_usd: float
    gpu_usd: float
    source: str


@dataclass(frozen=True)
class CostInputs:
    """What cost allocation needs: the unit prices and each team's monthly budget (USD).

    Args:
        cluster_id: the cluster's name in OpenCost (the site name).
        prices: the unit prices (`UnitPrices`).
        budgets: team name -> monthly budget in USD (teams without one get no alert).
        registry: a mirror holding OpenCost's image under its upstream repository path
            (`OPENCOST_IMAGE`; on AWS the stack's own ECR); None: ghcr.io.
    """

    cluster_id: str
    prices: UnitPrices
    budgets: tuple[tuple[str, float], ...] = ()
    registry: str | None = None


#: OpenCost's exporter image as the pinned chart names it: (registry, repository, tag),
#: the tag carrying upstream's digest, which a digest-preserving mirror (``crane copy``)
#: keeps, so the mirror's image is checked to be upstream's.
OPENCOST_IMAGE = (
    "ghcr.io",
    "opencost/opencost",
    "1.120.1@sha256:b0701f9b54e43c9abee98f5784792a5b469ca8951e87da32b161c1fa539ab0e1",
)


def opencost_values(inputs: CostInputs) -> dict[str, Any]:
    """Values of the OpenCost chart (keys as in its values.yaml at the pinned tag)."""
    restricted = {
        "allowPrivilegeEscalation": False,
        # OpenCost writes its pricing configuration under its config path at start.
        "readOnlyRootFilesystem": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    prices = inputs.prices
    return {
        "clusterName": inputs.cluster_id,
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 1001, "fsGroup": 1001},
        "opencost": {
            "nodeSelector": system_node_selector(),
            "exporter": {
                "image": {
                    "registry": inputs.registry or OPENCOST_IMAGE[0],
                    "repository": OPENCOST_IMAGE[1],
                    "tag": OPENCOST_IMAGE[2],
                    "pullPolicy": "Always",
                },
                "defaultClusterId": inputs.cluster_id,
                "securityContext": restricted,
                # Custom prices on every cluster: never the AWS pricing endpoints.
                # SSL_CERT_FILE: Go trusts only the cluster CA (Prometheus' issuer).
                "env": [
                    {"name": "USE_CUSTOM_PROVIDER", "value": "true"},
                    {"name": "SSL_CERT_FILE", "value": f"{CA_DIR}/{CA_KEY}"},
                ],
                "extraVolumeMounts": [
                    {"name": "gpuplatform-ca", "mountPath": CA_DIR, "readOnly": True}
                ],
            },
            "customPricing": {
                "enabled": True,
                "provider": "custom",
                "costModel": {
                    "description": f"gpuplatform prices: {prices.source}",
                    "CPU": f"{prices.cpu_usd:.6f}",
                    "RAM": f"{prices.memory_gib_usd:.6f}",
                    "GPU": f"{prices.gpu_usd:.6f}",
                    # Spot is priced as on-demand (a conservative budget).
                    "spotCPU": f"{prices.cpu_usd:.6f}",
                    "spotRAM": f"{prices.memory_gib_usd:.6f}",
                    "storage": "0",
                    "zoneNetworkEgress": "0",
                    "regionNetworkEgress": "0",
                    "internetNetworkEgress": "0",
                },
            },
            "prometheus": {
                "internal": {"enabled": False},
                "external": {"enabled": True, "url": PROMETHEUS_URL},
            },
            "metrics": {"serviceMonitor": {"enabled": True, "namespace": OPENCOST_NAMESPACE}},
            # No external billing export: the cloud-cost integration stays off.
            "cloudCost": {"enabled": False},
            "carbonCost": {"enabled": False},
            "mcp": {"enabled": False},
            "ui": {"enabled": False},
        },
        "extraVolumes": [ca_volume()],
    }


def opencost_network_policies(network: netpol.ClusterNetwork) -> list[Manifest]:
    """OpenCost reaches DNS, the API server (it lists nodes and pods) and Prometheus;
    Prometheus scrapes it."""
    ns = OPENCOST_NAMESPACE
    return [
        *netpol.baseline(ns, network),
        netpol.allow_egress(
            ns,
            "allow-prometheus",
            [netpol.namespace_peer(MONITORING_NAMESPACE, PROMETHEUS_POD_LABELS)],
            netpol.tcp(PROMETHEUS_PORT),
        ),
        netpol.allow_scrape(ns, netpol.tcp(OPENCOST_PORT)),
    ]


def _per_namespace(allocation: str, price: str, scale: str = "") -> str:
    return (
        f"sum by (namespace) ({allocation}{scale} * on (node) group_left() max by (node) ({price}))"
    )


def recording_rules() -> list[dict[str, str]]:
    """Cost per namespace per hour from OpenCost's allocations and node prices."""
    return [
        {
            "record": CPU_COST,
            "expr": _per_namespace("container_cpu_allocation", "node_cpu_hourly_cost"),
        },
        {
            "record": MEMORY_COST,
            "expr": _per_namespace(
                "container_memory_allocation_bytes", "node_ram_hourly_cost", " / 1073741824"
            ),
        },
        {
            "record": GPU_COST,
            "expr": _per_namespace("container_gpu_allocation", "node_gpu_hourly_cost"),
        },
        {"record": GPUS, "expr": "sum by (namespace) (container_gpu_allocation)"},
        # A namespace without GPU pods has no GPU series: count it as 0.
        {
            "record": TOTAL_COST,
            "expr": f"{CPU_COST} + {MEMORY_COST} + ({GPU_COST} or {CPU_COST} * 0)",
        },
    ]


def last_30_days_cost(team: str) -> str:
    """The team's cost over the last 30 days in USD (hourly cost summed hour by hour)."""
    return f'sum_over_time({TOTAL_COST}{{namespace="{team_namespace(team)}"}}[30d:1h])'


def budget_alerts(budgets: Sequence[tuple[str, float]]) -> list[dict[str, Any]]:
    rules = []
    for team, monthly in budgets:
        for fraction, severity in BUDGET_THRESHOLDS:
            percent = int(fraction * 100)
            rules.append(
                {
                    "alert": f"TeamBudget{percent}Percent",
                    "expr": f"{last_30_days_cost(team)} > {fraction * monthly:.2f}",
                    "for": "1h",
                    "labels": {"severity": severity, "team": team},
                    "annotations": {
                        "summary": f"Team {team} used {percent}% of its monthly budget",
                        "description": (
                            f"Cost of namespace {team_namespace(team)} over the last 30 days "
                            f'is {{{{ $value | printf "%.0f" }}}} USD; budget {monthly:.0f} USD '
                            "(docs/cost.md)."
                        ),
                    },
                }
            )
    return rules


def cost_rule(inputs: CostInputs) -> Manifest:
    groups: list[dict[str, Any]] = [
        {"name": "gpuplatform.cost", "interval": "5m", "rules": recording_rules()}
    ]
    if inputs.budgets:
        groups.append({"name": "gpuplatform.budgets", "rules": budget_alerts(inputs.budgets)})
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata(COST_RULE_NAME, MONITORING_NAMESPACE),
        "spec": {"groups": groups},
    }


def _panel(panel_id: int, title: str, target: tuple[str, str], unit: str) -> dict[str, Any]:
    """A panel on a two-column grid; ``target`` is (PromQL, legend)."""
    expr, legend = target
    row, column = divmod(panel_id - 1, 2)
    return {
        "id": panel_id,
        "type": "timeseries" if "[1d" in expr else "table",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "prometheus"},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "gridPos": {"h": 8, "w": 12, "x": column * 12, "y": row * 8},
        "targets": [{"expr": expr, "legendFormat": legend, "refId": "A"}],
    }


def llm_gateway_rows() -> list[tuple[str, tuple[str, str], str]]:
    """The LLM gateway's rows (docs/llm-gateway.md): requests and tokens per team from AI
    Gateway's gen_ai metrics, and the teams' spend at the stack's prices per million
    tokens (`modules.k8s.gateway.manifests.cost_rules`); empty where no gateway runs."""
    team = gs.TEAM_LABEL
    by_team = f"{{{{{team}}}}}"
    tokens = f'{gm.TOKEN_METRIC}{{gen_ai_token_type=~"input|output"}}'
    # The spend series is USD per second over 5 minutes: summed per 5 minutes, times 300.
    spend_30d = f"sum by ({team}) (sum_over_time({gm.COST_SERIES}[30d:5m]) * 300)"
    tokens_30d = f"sum by ({team}) (increase({tokens}[30d]))"
    return [
        ("LLM gateway requests per team, per day",
         (f"sum by ({team}) (increase({gm.REQUEST_METRIC}[1d]))", by_team), "short"),
        ("LLM gateway tokens per team, per day",
         (f"sum by ({team}) (increase({tokens}[1d]))", by_team), "short"),
        ("LLM gateway cost per team, last 30 days (USD)", (spend_30d, by_team), "currencyUSD"),
        ("LLM gateway USD per million tokens per team, last 30 days",
         (f"{spend_30d} / {tokens_30d} * 1e6", by_team), "currencyUSD"),
    ]  # fmt: skip


def cost_dashboard() -> dict[str, Any]:
    """Team GPU-hours and cost per day and month, and GPU-hours per Kueue queue."""
    teams = 'namespace=~"team-.*"'
    queue_gpus = (
        f"sum by (namespace, {QUEUE_LABEL}) (container_gpu_allocation{{{teams}}} "
        f"* on (namespace, pod) group_left ({QUEUE_LABEL}) "
        f"max by (namespace, pod, {QUEUE_LABEL}) (kube_pod_labels))"
    )
    by_team = "{{namespace}}"
    by_queue = f"{{{{namespace}}}}/{{{{{QUEUE_LABEL}}}}}"

    def over(expr: str, window: str) -> str:
        return f"sum_over_time({expr}[{window}:1h])"

    gpus, cost = f"{GPUS}{{{teams}}}", f"{TOTAL_COST}{{{teams}}}"
    rows = [
        ("GPU-hours per team, per day", (over(gpus, "1d"), by_team), "h"),
        ("GPU-hours per team, last 30 days", (over(gpus, "30d"), by_team), "h"),
        ("Cost per team, per day (USD)", (over(cost, "1d"), by_team), "currencyUSD"),
        ("Cost per team, last 30 days (USD)", (over(cost, "30d"), by_team), "currencyUSD"),
        ("GPU-hours per Kueue queue, per day", (over(f"({queue_gpus})", "1d"), by_queue), "h"),
        ("GPU-hours per Kueue queue, 30 days", (over(f"({queue_gpus})", "30d"), by_queue), "h"),
        *llm_gateway_rows(),
    ]
    panels = [_panel(i + 1, title, target, unit) for i, (title, target, unit) in enumerate(rows)]
    return {
        "uid": "gpuplatform-cost",
        "title": "Team GPU-hours and cost",
        "schemaVersion": 39,
        "time": {"from": "now-30d", "to": "now"},
        "tags": ["gpuplatform", "cost"],
        "panels": panels,
    }


def cost_dashboard_configmap() -> Manifest:
    return dashboard_configmap(COST_DASHBOARD_CONFIGMAP, COST_DASHBOARD_FILE, cost_dashboard())
