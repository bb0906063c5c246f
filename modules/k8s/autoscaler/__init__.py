"""The Cluster Autoscaler on EKS (`spec`: its values; `component`: `Autoscaler`)."""
