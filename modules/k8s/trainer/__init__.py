"""Kubeflow Trainer and the platform's ClusterTrainingRuntimes (torch, DeepSpeed, MPI)."""
