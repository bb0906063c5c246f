"""Monitoring: kube-prometheus-stack, GPU and training metrics (`spec`: `MonitoringSpec` and
the chart values), the alert rules (`alerts`), the Grafana dashboards (`dashboards`, also
used by cost and serving) and the component (`component`: `Monitoring`)."""
