"""Every PromQL expression the platform ships parses (alerts and dashboard queries).

Uses ``promql-parser`` (Python binding of the Rust PromQL parser), a dev dependency.
"""

from __future__ import annotations

import promql_parser
import pytest

from modules.k8s.monitoring.alerts import gpu_alert_rules, training_alert_rules
from modules.k8s.monitoring.dashboards import dashboard_queries, gpu_dashboard
from modules.k8s.monitoring.spec import MonitoringSpec

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
