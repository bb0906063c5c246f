"""`TrainingJob`: a training job's Kubernetes objects as one Pulumi component.

The component only registers what `manifests.training_job_manifests` decides (a
Kubeflow Trainer TrainJob, or an Indexed Job and its Service), each object through the
cluster's explicit Kubernetes provider.
"""

from __future__ import annotations

import pulumi

from modules.k8s.objects import KubernetesObject
from modules.k8s.trainer.training_job.manifests import service_name, training_job_manifests
from modules.k8s.trainer.training_job.spec import TrainingJobSpec

TYPE_TOKEN = "gpuplatform:workloads:TrainingJob"


class TrainingJob(pulumi.ComponentResource):
    """A queued, checkpointed training job on one node pool.

    Args:
        resource_name: the component's Pulumi name (children are named after it).
        spec: the validated job description.
        provider: the cluster's Kubernetes provider (default providers are disabled).
        opts: options of the component itself.

    Outputs: ``job_name``, ``service_name`` (the headless Service pods resolve each
    other by: the JobSet's, named after the TrainJob, or the Indexed Job's), ``namespace``.
    """

    def __init__(
        self,
        resource_name: str,
        spec: TrainingJobSpec,
        provider: pulumi.ProviderResource,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(TYPE_TOKEN, resource_name, None, opts)
        self.objects: list[KubernetesObject] = []
        for manifest in training_job_manifests(spec):
            kind = str(manifest["kind"]).lower()
            self.objects.append(
                KubernetesObject(
                    f"{resource_name}-{kind}",
                    manifest,
                    pulumi.ResourceOptions(parent=self, provider=provider),
                )
            )
        self.job_name = pulumi.Output.from_input(spec.name)
        headless = spec.name if spec.launcher == "trainer" else service_name(spec)
        self.service_name = pulumi.Output.from_input(headless)
        self.namespace = pulumi.Output.from_input(spec.namespace)
        self.register_outputs(
            {
                "job_name": self.job_name,
                "service_name": self.service_name,
                "namespace": self.namespace,
            }
        )
