"""The feature store (Feast) on the cluster: `spec` (typed settings, pure manifests and
Helm values) and `component` (the thin Pulumi component that registers them)."""
