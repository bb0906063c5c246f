"""Every PromQL expression the platform ships parses (alerts and dashboard queries).

Needs the ``promql-parser`` package (Python binding of the Rust PromQL parser) from the
dev dependencies; until it is installed the module is reported as skipped, with the
reason, in the test summary.
"""

from __future__ import annotations

import pytest

from modules.k8s.alerts import gpu_alert_rules, training_alert_rules
from modules.k8s.dashboards import dashboard_queries, gpu_dashboard
from modules.k8s.monitoring import MonitoringSpec

promql_parser = pytest.importorskip(
    "promql_parser", reason="install the dev dependency promql-parser to check PromQL syntax"
)

ALERTS = {
    r.alert: r.expr
    for r in gpu_alert_rules(MonitoringSpec()) + training_alert_rules(MonitoringSpec())
}
# Grafana substitutes its variables before Prometheus sees a query.
QUERIES = [q.replace("$node", ".*") for q in dashboard_queries(gpu_dashboard())]


@pytest.mark.parametrize("name", sorted(ALERTS))
def test_alert_expression_parses(name: str) -> None:
    promql_parser.parse(ALERTS[name])


@pytest.mark.parametrize("query", QUERIES)
def test_dashboard_query_parses(query: str) -> None:
    promql_parser.parse(query)


def test_the_parser_rejects_broken_promql() -> None:
    with pytest.raises(ValueError):
        promql_parser.parse("rate(DCGM_FI_DEV_GPU_UTIL[5m]")
