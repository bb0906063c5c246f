"""Kubeflow Trainer: the engine that runs the platform's distributed training jobs.

* The upstream chart ``kubeflow-trainer`` (pinned below) installs the controller, its
  admission webhooks, the ``TrainJob``/``TrainingRuntime``/``ClusterTrainingRuntime``
  CRDs and, as its dependency, JobSet (the controller builds one JobSet per TrainJob).
  Both controllers run on the system pool, in their own ``restricted`` namespace, behind
  ClusterIP Services only; the webhook's certificate is the controller's own (its
  built-in certificate management writes and rotates the Secret; no cert-manager).
  None of the chart's built-in runtimes is installed: their images come from outside
  the country and know nothing of the platform's fabric, quotas or security.
* The platform's own ClusterTrainingRuntimes (`modules.k8s.trainer.runtimes`): torch,
  DeepSpeed and MPI, one per training pool and PriorityClass.
* Kueue admits TrainJobs (integration ``trainer.kubeflow.org/trainjob``, enabled in
  `modules.k8s.queueing.spec`): a TrainJob carries its team's queue label.

Versions read at tag v2.3.0 (commit 658725bd) of github.com/kubeflow/trainer:
``charts/kubeflow-trainer/Chart.yaml`` (chart 2.3.0, dependency ``jobset`` 0.12.0 from
``oci://registry.k8s.io/jobset/charts``), ``values.yaml`` (the keys set here).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from modules.k8s import netpol, rbac
from modules.k8s.common import Manifest, PlatformNamespace, metadata, system_node_selector
from modules.k8s.names import team_group, team_namespace
from modules.k8s.site.oidc import OidcSpec
from modules.k8s.versions import Chart
from modules.validation import Checker

KUBEFLOW_TRAINER = Chart("oci://ghcr.io/kubeflow/charts/kubeflow-trainer", "2.3.0")
#: The controller image's tag: the chart formats its own version as ``v<version>``.
TRAINER_VERSION = "v2.3.0"
#: The JobSet release the chart depends on (chart 0.12.0, controller v0.12.0).
JOBSET_VERSION = "v0.12.0"
TRAINER_NAMESPACE = "kubeflow-system"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
#: Kueue's name for the TrainJob integration.
TRAINJOB_INTEGRATION = "trainer.kubeflow.org/trainjob"
#: The controllers' pods as the charts label them (kubeflow-trainer's manager
#: ``trainer.manager.selectorLabels``; JobSet's ``jobset.controller.selectorLabels``),
#: and the admission webhook port both serve (their Deployments' ``webhook`` and
#: ``webhook-server`` container ports): read at the tags above.
TRAINER_CONTROLLER_LABELS = {
    "app.kubernetes.io/name": "kubeflow-trainer",
    "app.kubernetes.io/component": "manager",
}
JOBSET_CONTROLLER_LABELS = {
    "app.kubernetes.io/name": "jobset",
    "app.kubernetes.io/component": "controller",
}
WEBHOOK_PORT = 9443
#: Upstream images (registry, repository): the chart's controller and JobSet's.
CONTROLLER_IMAGE = ("ghcr.io", "kubeflow/trainer/trainer-controller-manager")
JOBSET_IMAGE = ("registry.k8s.io", "jobset/jobset")
#: Their repositories under a mirror (``<registry>/<repository>:<tag>``).
MIRRORED_REPOSITORIES = (CONTROLLER_IMAGE[1], JOBSET_IMAGE[1])

Framework = Literal["torch", "deepspeed", "mpi"]
FRAMEWORKS: tuple[Framework, ...] = ("torch", "deepspeed", "mpi")

# repository[:tag][@digest] with a tag or digest (the same rule as the training image).
_IMAGE = re.compile(
    r"^[a-z0-9.-]+(?::[0-9]+)?(?:/[a-z0-9._/-]+)?"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)


@dataclass(frozen=True)
class TrainerSpec:
    """Kubeflow Trainer settings (config key ``uae-gpu-platform:trainer``).

    Args:
        enabled: install the trainer and the platform's runtimes (default true).
        registry: a registry in the country that mirrors the controller's and JobSet's
            images (``host[:port][/path]``; the images keep their upstream repository
            paths under it, `MIRRORED_REPOSITORIES`). Default: on AWS the stack's own
            ECR (one repository per image, created by the stack); on premises
            ``onprem.registry`` where set, else the chart's upstream images, which the
            advisory image rule of the policy pack lists for review.
        frameworks: which runtimes to provide: ``torch``, ``deepspeed``, ``mpi``
            (default all three).
        mpi_image: the image of the MPI runtime (Horovod over Open MPI, built from
            ``workloads/horovod/Dockerfile``), pinned by tag or digest. Default: the
            training image's repository with the tag ``horovod-<training tag>``.
    """

    enabled: bool = True
    registry: str | None = None
    frameworks: tuple[Framework, ...] = FRAMEWORKS
    mpi_image: str | None = None

    def __post_init__(self) -> None:
        check = Checker()
        check.registry("registry", self.registry)
        unknown = [f for f in self.frameworks if f not in FRAMEWORKS]
        check.require(not unknown, "frameworks", unknown, f"any of {', '.join(FRAMEWORKS)}")
        check.require(
            not self.enabled or bool(self.frameworks),
            "frameworks",
            [],
            "at least one runtime (or enabled: false)",
        )
        check.require(
            len(set(self.frameworks)) == len(self.frameworks),
            "frameworks",
            list(self.frameworks),
            "each framework once",
        )
        image = _IMAGE.match(self.mpi_image) if self.mpi_image is not None else None
        check.require(
            self.mpi_image is None
            or (image is not None and bool(image.group("tag") or image.group("digest"))),
            "mpi_image",
            self.mpi_image,
            "an image reference with a tag or digest",
        )
        check.require(
            image is None or image.group("tag") != "latest",
            "mpi_image",
            self.mpi_image,
            "a fixed tag or digest, not 'latest'",
        )
        check.done()


@dataclass(frozen=True)
class TrainerInputs:
    """What the runtimes need from outside the Kubernetes layer (the stack composes it
    from the training workloads' conventions).

    Args:
        training_image: the training image (``workloads/Dockerfile``), pinned, in the
            country: the torch and DeepSpeed runtimes' trainer and every preflight.
        pool_env: training pool name -> the trainer container's environment on that
            pool (the fabric's NCCL/libfabric settings and the runtime's writable
            locations), as ``training_job.manifests.runtime_env`` decides it.
    """

    training_image: str
    pool_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def horovod_image(training_image: str, spec: TrainerSpec) -> str:
    """The MPI runtime's image: ``spec.mpi_image``, or the training image's repository
    tagged ``horovod-<training tag>`` (built from the training image, so the two are
    released together)."""
    if spec.mpi_image is not None:
        return spec.mpi_image
    repository, _, tag = training_image.split("@", 1)[0].rpartition(":")
    if not repository or "/" in tag:
        raise ValueError(f"training image {training_image!r} has no tag to derive from")
    return f"{repository}:horovod-{tag}"


def _image(default: tuple[str, str], registry: str | None, tag: str) -> dict[str, str]:
    host, repository = default
    return {"registry": registry or host, "repository": repository, "tag": tag}


def trainer_values(spec: TrainerSpec) -> dict[str, Any]:
    """Values of the kubeflow-trainer chart: the controller and JobSet on the system
    pool, images pinned (from ``spec.registry`` where set), the CRDs installed with the
    chart, the controller's own webhook certificate, no built-in runtime, no data cache
    (it would install LeaderWorkerSet and pull more images)."""
    controller = _image(CONTROLLER_IMAGE, spec.registry, TRAINER_VERSION)
    jobset = _image(JOBSET_IMAGE, spec.registry, JOBSET_VERSION)
    return {
        "crds": {"enabled": True},
        # Pulled at each start, as every container the platform registers
        # (`modules.k8s.security.pull_always`; Helm values do not pass through it).
        "image": {**controller, "pullPolicy": "Always"},
        "manager": {
            "replicas": 1,
            "nodeSelector": system_node_selector(),
            "resources": {
                "requests": {"cpu": "100m", "memory": "256Mi"},
                "limits": {"memory": "1Gi"},
            },
            "config": {"certManagement": {"enable": True}},
        },
        "webhook": {"failurePolicy": "Fail"},
        "jobset": {
            "install": True,
            "fullnameOverride": "jobset",
            "image": {
                "repository": f"{jobset['registry']}/{jobset['repository']}",
                "tag": jobset["tag"],
                "pullPolicy": "Always",
            },
            "controller": {"nodeSelector": system_node_selector()},
        },
        "dataCache": {"enabled": False},
        "runtimes": {
            "defaultEnabled": False,
            "torchDistributed": {"enabled": False},
            "deepspeedDistributed": {"enabled": False},
            "mlxDistributed": {"enabled": False},
            "jaxDistributed": {"enabled": False},
            "xgboostDistributed": {"enabled": False},
        },
    }


#: The controllers' namespace: restricted (both run non-root, no capabilities).
TRAINER_NS = PlatformNamespace(TRAINER_NAMESPACE)


def network_policies(network: netpol.ClusterNetwork) -> list[Manifest]:
    """The controllers' namespace: default deny; DNS and the API server (both controllers
    only watch and write objects); the API server calls each one's admission webhook.
    Nothing else reaches them: the TrainJob status server (port 10443) runs only with the
    ``TrainJobStatus`` feature gate, which is off, and no platform monitor scrapes them.
    The training pods themselves run in the team namespaces, under those namespaces'
    policies."""
    ns = TRAINER_NAMESPACE
    return [
        *netpol.baseline(ns, network),
        netpol.allow_from_api_server(
            ns,
            network,
            netpol.tcp(WEBHOOK_PORT),
            pod_labels=TRAINER_CONTROLLER_LABELS,
            name="allow-trainer-webhook",
        ),
        netpol.allow_from_api_server(
            ns,
            network,
            netpol.tcp(WEBHOOK_PORT),
            pod_labels=JOBSET_CONTROLLER_LABELS,
            name="allow-jobset-webhook",
        ),
    ]


def team_trainjob_rbac(team: str, oidc: OidcSpec | None = None) -> list[Manifest]:
    """The team's group may run TrainJobs in its own namespace and read their JobSets (the
    built-in ``edit`` role it has there knows neither kind; the chart ships no aggregated
    role). Nothing cluster-wide: the runtimes' names are documented and in the plan, so
    listing ClusterTrainingRuntimes is left to the platform's administrators. The
    subjects are the team's groups as its namespace's ``edit`` binding names them:
    ``team:<name>``, and on premises with OpenID Connect the identity provider's group."""
    ns = team_namespace(team)
    team_groups = [team_group(team)]
    if oidc is not None:
        team_groups.append(oidc.team_group(team))
    rules = [
        {
            "apiGroups": ["trainer.kubeflow.org"],
            "resources": ["trainjobs"],
            "verbs": ["create", "delete", "get", "list", "watch", "update", "patch"],
        },
        {
            "apiGroups": ["trainer.kubeflow.org"],
            "resources": ["trainjobs/status"],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["jobset.x-k8s.io"],
            "resources": ["jobsets", "jobsets/status"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    return [
        rbac.role(metadata("trainjob-editor", ns), rules),
        rbac.role_binding(
            metadata("team-trainjob-editor", ns), "trainjob-editor", rbac.groups(team_groups)
        ),
    ]
