"""Deploying the training workloads as Kueue-queued Kubeflow Trainer TrainJobs (`TrainingJob`)."""

from workloads.deploy.component import TYPE_TOKEN, TrainingJob
from workloads.deploy.manifests import training_job_manifests
from workloads.deploy.spec import TrainingJobSpec

__all__ = ["TYPE_TOKEN", "TrainingJob", "TrainingJobSpec", "training_job_manifests"]
