"""Serving on CPUs: the KServe model server around the inference library (V2 protocol,
batching, admission control, drift scores). ``python -m workloads.serving`` runs it."""
