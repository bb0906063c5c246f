"""The bundled example training job every shipped stack deploys, suspended."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.platform.component import KubernetesPlatform
from modules.k8s.trainer.training_job.component import TrainingJob
from modules.k8s.trainer.training_job.spec import TrainingJobSpec
from modules.pools import NodePoolProfile
from modules.validation import InvalidArgsError

from .config import PROJECT, ExampleJobSpec
from .config_parsing import ConfigError, stack_key


def build_example_job(
    job: ExampleJobSpec,
    pools: tuple[NodePoolProfile, ...],
    platform: KubernetesPlatform,
    provider: k8s.Provider,
    image: str,
    *,
    trainer: bool = True,
) -> TrainingJob:
    """Queue the example job in its team's namespace, on its pool, suspended.

    Args:
        job: which team, pool, preset and size.
        pools: the stack's node pools.
        platform: the Kubernetes layer (team placements and readiness).
        provider: the cluster's Kubernetes provider.
        image: the training image reference (tagged, in the UAE).
        trainer: the stack runs Kubeflow Trainer (a TrainJob on the platform's
            runtime); without it (``trainer.enabled: false``) the job is the platform's
            own Indexed Job.
    """
    pool = next(p for p in pools if p.name == job.pool)
    placement = platform.placements[job.team]
    # An example should not outrank real work: research where the team may use it.
    priority = (
        "research" if "research" in placement.priority_classes else placement.priority_classes[0]
    )
    try:
        spec = TrainingJobSpec(
            name=f"example-{job.preset}",
            namespace=placement.namespace,
            pool=pool,
            local_queue=placement.local_queue,
            priority_class=priority,
            service_account=placement.service_account,
            image=image,
            checkpoint_claim=placement.checkpoint_claim,
            preset=job.preset,
            nodes=job.nodes,
            min_nodes=job.min_nodes,
            tp=job.tp,
            # Held: suspended and not yet in the team's queue (Kueue would admit and
            # start it). A user releases it by setting exampleJob.suspended: false.
            hold=job.suspended,
            cpu_training=not pool.has_gpus,
            launcher="trainer" if trainer else "indexed-job",
            tracking=placement.tracking,
        )
    except InvalidArgsError as err:
        raise ConfigError(
            [p.describe(f"{PROJECT}:exampleJob ({stack_key(p.field)})") for p in err.problems]
        ) from None
    return TrainingJob(
        "example-job",
        spec,
        provider,
        pulumi.ResourceOptions(
            depends_on=[*platform.platform_ready, *platform.team_ready[job.team]]
        ),
    )
