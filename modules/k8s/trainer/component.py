"""`KubeflowTrainer`: installs Kubeflow Trainer (with JobSet) and registers the
platform's ClusterTrainingRuntimes that `runtimes` builds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi

from modules.k8s.common import helm_release, register
from modules.k8s.objects import KubernetesObject
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.trainer.runtimes import RuntimeSite, training_runtimes
from modules.k8s.trainer.spec import (
    KUBEFLOW_TRAINER,
    TRAINER_NAMESPACE,
    TRAINER_NS,
    network_policies,
    team_trainjob_rbac,
    trainer_values,
)


class KubeflowTrainer(pulumi.ComponentResource):
    """The trainer and JobSet controllers, the platform's runtimes (none where the stack
    gave no training image: `KubernetesPlatformArgs.trainer_inputs`), and each team's
    right to run TrainJobs in its namespace. ``site`` is what every training pod gets
    from the cluster (the tracking wiring, whether the ServiceAccount token is mounted)."""

    def __init__(
        self,
        name: str,
        args: KubernetesPlatformArgs,
        team_namespaces: Mapping[str, pulumi.Resource],
        *,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
        site: RuntimeSite | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:KubeflowTrainer", name, None, opts)
        provider = args.provider
        ns = register(TRAINER_NS.manifest(args.kubernetes_version), self, provider)
        # Default deny and the controllers' exact allowances, before anything runs there.
        fences = [
            register(m, self, provider, depends_on=[ns]) for m in network_policies(args.network)
        ]
        self.release = helm_release(
            "kubeflow-trainer",
            KUBEFLOW_TRAINER,
            TRAINER_NAMESPACE,
            values=trainer_values(args.trainer),
            parent=self,
            provider=provider,
            depends_on=[ns, *fences, *depends_on],
        )
        manifests = (
            training_runtimes(args.pools, args.trainer_inputs, args.trainer, site)
            if args.trainer_inputs is not None
            else []
        )
        # The CRDs and the runtimes' validating webhook come with the release.
        self.runtimes: list[KubernetesObject] = [
            register(m, self, provider, depends_on=[self.release]) for m in manifests
        ]
        # Each team may run TrainJobs in its own namespace.
        oidc = args.onprem.oidc if args.onprem is not None else None
        for team in args.teams:
            for manifest in team_trainjob_rbac(team.name, oidc):
                register(manifest, self, provider, depends_on=[team_namespaces[team.name]])
        self.register_outputs(
            {
                "trainer": f"{TRAINER_NAMESPACE}/kubeflow-trainer",
                "runtimes": [m["metadata"]["name"] for m in manifests],
            }
        )
