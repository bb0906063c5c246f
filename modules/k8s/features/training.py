"""The tabular model's training job on the cluster, as pure manifests: a Kubeflow Trainer
``TrainJob`` in a team's namespace, queued by Kueue, on the platform's CPU runtime for
the features image, reading the offline store in the stack's bucket through EKS Pod
Identity and tracking to MLflow (``python -m workloads.features train``).

Why not upstream's ``xgboost-distributed`` runtime (Trainer v2.3.0,
``manifests/base/runtimes/xgboost_distributed.yaml``): its ML policy (``xgboost: {}``)
injects the ``DMLC_*`` variables of XGBoost's Rabit tracker, which LightGBM does not
read (its distributed mode has its own machine list and ports), and its image is
upstream's CUDA XGBoost image from outside the country, without Feast or this
repository's feature definitions. The model trains in seconds on one node, so the
platform's runtime has no ML policy at all: Trainer's plain policy runs the TrainJob's
image and command on ``numNodes`` pods, with the TrainJob's environment.

The runtime pins the pool (required node affinity, its taints) and the PriorityClass
(``preemptible``: a retraining job yields to research and production work, and every
team may use it); its pod is restricted, non-root, with a read-only root filesystem
and a writable ``/tmp``. Requests equal limits (Guaranteed QoS), far below a node: the
job shares the CPU pool with other work, and Kueue counts its requests in the team's
quota.
"""

from __future__ import annotations

from typing import Any

from modules.k8s import rbac
from modules.k8s.common import Manifest, metadata
from modules.k8s.features.spec import pod_security, restricted_container
from modules.k8s.names import LOCAL_QUEUE_NAME, TrackingAccess, team_namespace
from modules.k8s.trainer.pods import pool_node_affinity, pool_tolerations
from modules.k8s.trainer.runtimes import ANCESTOR_LABEL, FRAMEWORK_LABEL, POOL_LABEL
from modules.k8s.trainer.spec import TRAINER_API
from modules.k8s.trainer.tracking import tracking_wiring
from modules.pools import NodePoolProfile

#: The runtime's framework label (informational for Trainer: no ML policy of that name).
FRAMEWORK = "features"
PRIORITY_CLASS = "preemptible"
JOB_NAME = "smb-churn-train"
#: The job's identity in the team's namespace: EKS Pod Identity maps it to a role that
#: reads the offline store's prefix only (`stacks.features_layer`).
SERVICE_ACCOUNT = "features-trainer"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CPU = "2"
MEMORY = "4Gi"
THREADS = 2
WORKDIR = "/tmp/train"


def runtime_name(pool: str) -> str:
    """``features-<pool>``: the runtime a features TrainJob names."""
    return f"{FRAMEWORK}-{pool}"


def training_runtime(pool: NodePoolProfile, image: str, tracking: TrackingAccess) -> Manifest:
    """The platform's ClusterTrainingRuntime for the features image on ``pool``, wired to
    the tracking server as the training runtimes are (`tracking_wiring`: the URI, the
    cluster CA, and the team's MLflow login as MLflow's credentials file, from Secrets
    with the same names in every team namespace), so the job registers as its team's
    user."""
    amounts = {"cpu": CPU, "memory": MEMORY}
    tracking_env, tracking_volumes, tracking_mounts = tracking_wiring(tracking)
    container = {
        "name": "node",
        "image": image,
        "imagePullPolicy": "Always",
        "command": ["python", "-m", "workloads.features", "train"],
        "env": [
            {"name": "FEAST_USAGE", "value": "False"},
            # MLflow's client finds its credentials file under HOME (`tracking_wiring`).
            {"name": "HOME", "value": "/tmp"},
            *tracking_env,
        ],
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "securityContext": restricted_container(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *tracking_mounts],
    }
    pod = {
        "restartPolicy": "Never",
        "serviceAccountName": SERVICE_ACCOUNT,
        # The trainer calls no Kubernetes API, and EKS Pod Identity projects its own
        # token (modules.k8s.rbac): none is mounted.
        "automountServiceAccountToken": False,
        "priorityClassName": PRIORITY_CLASS,
        "securityContext": pod_security(),
        "affinity": {"nodeAffinity": pool_node_affinity(pool)},
        "tolerations": pool_tolerations(pool),
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "5Gi"}}, *tracking_volumes],
    }
    return {
        "apiVersion": TRAINER_API,
        "kind": "ClusterTrainingRuntime",
        "metadata": metadata(
            runtime_name(pool.name), labels={FRAMEWORK_LABEL: FRAMEWORK, POOL_LABEL: pool.name}
        ),
        "spec": {
            # No ML policy: Trainer's plain policy (see the module's docstring).
            "mlPolicy": {"numNodes": 1},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                                "spec": {
                                    "backoffLimit": 2,
                                    "template": {"spec": pod},
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def train_job(
    *,
    team: str,
    pool: str,
    image: str,
    offline_uri: Any,
    s3_endpoint: str,
    region: str,
    tracking_uri: str,
    held: bool,
) -> Manifest:
    """The TrainJob: ``workloads.features train`` on the offline store ``offline_uri``
    (``s3://<bucket>/features``, a Pulumi output of the bucket's name), registering in
    the tracking server at ``tracking_uri``. Suspended; with the team's queue label
    unless ``held`` (Kueue then admits and starts it)."""
    labels = {"app.kubernetes.io/name": JOB_NAME, "app.kubernetes.io/part-of": "gpuplatform"}
    if not held:
        labels[QUEUE_LABEL] = LOCAL_QUEUE_NAME
    return {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": {"name": JOB_NAME, "namespace": team_namespace(team), "labels": labels},
        "spec": {
            "runtimeRef": {
                "name": runtime_name(pool),
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
            },
            "trainer": {
                "image": image,
                "args": [
                    *("--offline-uri", offline_uri, "--s3-endpoint", s3_endpoint),
                    *("--tracking-uri", tracking_uri, "--workdir", WORKDIR),
                    *("--threads", str(THREADS)),
                ],
                "numNodes": 1,
                "env": [
                    # The signing region of PyArrow's and s3fs's S3 clients.
                    {"name": "AWS_REGION", "value": region},
                    {"name": "AWS_DEFAULT_REGION", "value": region},
                ],
            },
            "suspend": True,
        },
    }


def service_account(team: str) -> Manifest:
    return rbac.service_account(metadata(SERVICE_ACCOUNT, team_namespace(team)), mount_token=False)
