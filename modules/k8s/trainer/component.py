"""`KubeflowTrainer`: installs Kubeflow Trainer (with JobSet) and registers the
platform's ClusterTrainingRuntimes that `runtimes` builds."""

from __future__ import annotations

from modules.component_base import Outputs
from modules.k8s.objects import KubernetesObject
from modules.k8s.platform.service import PlatformService
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.tracking.manifests import team_tracking_access
from modules.k8s.trainer.runtimes import RuntimeSite, training_runtimes
from modules.k8s.trainer.spec import (
    KUBEFLOW_TRAINER,
    TRAINER_NAMESPACE,
    TRAINER_NS,
    network_policies,
    team_trainjob_rbac,
    trainer_values,
)


def runtime_site(args: KubernetesPlatformArgs) -> RuntimeSite:
    """What every training pod gets from the cluster: its team's MLflow wiring (where the
    cluster tracks)."""
    tracking = team_tracking_access() if args.tracking_enabled else None
    return RuntimeSite(tracking)


class KubeflowTrainer(PlatformService):
    """The trainer and JobSet controllers, the platform's runtimes (none where the stack
    gave no training image: `KubernetesPlatformArgs.trainer_inputs`; each pod gets
    `runtime_site`), and each team's right to run TrainJobs in its namespace."""

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        # Default deny and the controllers' exact allowances, before anything runs there.
        fenced = self.fenced_namespace(TRAINER_NS, network_policies(args.network))
        self.release = self.install(
            "kubeflow-trainer",
            KUBEFLOW_TRAINER,
            TRAINER_NAMESPACE,
            trainer_values(args.trainer),
            [*fenced, *self.waits_for],
        )
        manifests = (
            training_runtimes(args.pools, args.trainer_inputs, args.trainer, runtime_site(args))
            if args.trainer_inputs is not None
            else []
        )
        # The CRDs and the runtimes' validating webhook come with the release.
        self.runtimes: list[KubernetesObject] = [self.add(m, [self.release]) for m in manifests]
        # Each team may run TrainJobs in its own namespace.
        oidc = args.onprem.oidc if args.onprem is not None else None
        for team in args.teams:
            for manifest in team_trainjob_rbac(team.name, oidc):
                self.add(manifest, [self.team_namespaces[team.name]])
        return {
            "trainer": f"{TRAINER_NAMESPACE}/kubeflow-trainer",
            "runtimes": [m["metadata"]["name"] for m in manifests],
        }
