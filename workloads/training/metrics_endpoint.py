"""Where a training process serves its metrics: the constants the deploy layer needs,
kept free of prometheus_client and torch so the offline plan (`make plan`) imports them
without the workloads' dependencies."""

from __future__ import annotations

#: Default port of the metrics endpoint (container port named ``metrics``).
#: 9400 is the DCGM exporter's on GPU nodes, so training uses 9500.
METRICS_PORT = 9500
METRICS_PORT_NAME = "metrics"
