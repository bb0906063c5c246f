"""Spark on the cluster: the Kubeflow Spark Operator and the data-preparation jobs
(`spec`: typed settings, pure manifests and Helm values; `component`: the thin Pulumi
component that registers them)."""
