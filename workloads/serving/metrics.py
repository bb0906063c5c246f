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
#: The drift gauge's name and help, shared with the drift service (which computes the
#: same gauge from KServe's request logger for every runtime).
DRIFT_NAME = "uae_predictor_drift_score"
DRIFT_HELP = "Drift of the live prompts from the training data (token_js, prompt_length_psi)."
DRIFT_LABELS = ("model", "version", "statistic")
DRIFT = Gauge(DRIFT_NAME, DRIFT_HELP, DRIFT_LABELS)
BATCH_SIZE = Histogram(
    "uae_predictor_batch_size",
    "Requests answered by one model call (concurrent requests are batched).",
    ["model", "version"],
    buckets=(1, 2, 4, 8, 16, 32),
)
