"""The predictor's Prometheus metrics (served on the model server's ``/metrics``).

The names are a contract with the cluster side: the serving dashboard and the drift and
error-rate alerts (`modules/k8s/serving/observability.py`) query exactly these.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter(
    "uae_predictor_requests",
    "Inference requests by model, version and HTTP status code.",
    ["model", "version", "code"],
)
DURATION = Histogram(
    "uae_predictor_request_duration_seconds",
    "Inference request latency, admission to response.",
    ["model", "version"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
REJECTED = Counter(
    "uae_predictor_rejected",
    "Requests refused before inference (overload, size, timeout, bad input).",
    ["model", "version", "reason"],
)
DRIFT = Gauge(
    "uae_predictor_drift_score",
    "Drift of the live prompts from the training data (token_js, prompt_length_psi).",
    ["model", "version", "statistic"],
)
BATCH_SIZE = Histogram(
    "uae_predictor_batch_size",
    "Requests answered by one model call (concurrent requests are batched).",
    ["model", "version"],
    buckets=(1, 2, 4, 8, 16, 32),
)
