"""Names the Kubernetes layer and its consumers agree on.

The workloads (``TrainingJob``) and the AWS side (Pod Identity, access entries) refer to
these objects by name, so every name is derived here from the team name alone; nothing
needs an output of a running cluster to know where a team's job goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from modules.pools import LABEL_PREFIX

MONITORING_NAMESPACE = "monitoring"
GPU_OPERATOR_NAMESPACE = "gpu-operator"
NETWORK_OPERATOR_NAMESPACE = "nvidia-network-operator"
KUEUE_NAMESPACE = "kueue-system"
STORAGE_NAMESPACE = "gpuplatform-storage"
KUBE_SYSTEM = "kube-system"

#: ServiceAccount of every team's training pods; the AWS side associates
#: ``<team namespace>/trainer`` with the team's IAM role through EKS Pod Identity.
TRAINER_SERVICE_ACCOUNT = "trainer"
#: ServiceAccount of the Cluster Autoscaler; the AWS side creates its Pod Identity role
#: for exactly ``kube-system/cluster-autoscaler``.
CLUSTER_AUTOSCALER_SERVICE_ACCOUNT = "cluster-autoscaler"

#: UID/GID the training containers run as (the images' ``USER``); team checkpoint
#: directories on the shared file system belong to them. 10000 or more, so that no
#: container user is also a user of the node (checkov CKV_K8S_40).
TRAINER_UID = 10001
TRAINER_GID = 10001

LOCAL_QUEUE_NAME = "training"
CHECKPOINT_CLAIM_NAME = "checkpoints"
COHORT_NAME = "gpuplatform"

SITE_CONFIGMAP_NAME = "gpuplatform-site"

#: Storage classes created on EKS: the default one for platform volumes, and one that
#: keeps the EBS volume when its claim is deleted (checkpoints are data).
DEFAULT_STORAGE_CLASS = "gp3-encrypted"
RETAINED_STORAGE_CLASS = "gp3-encrypted-retain"

#: Priority classes (Kubernetes PriorityClass and Kueue WorkloadPriorityClass share the
#: names), highest first, with their values.
PRIORITY_CLASSES: dict[str, int] = {
    "production": 100_000,
    "research": 50_000,
    "preemptible": 10_000,
}

#: Pods of training jobs carry this label; the PodMonitor scrapes their ``metrics`` port.
METRICS_LABEL = f"{LABEL_PREFIX}/metrics"
METRICS_LABEL_VALUE = "training"
METRICS_PORT_NAME = "metrics"

TEAM_LABEL = f"{LABEL_PREFIX}/team"
PART_OF = {"app.kubernetes.io/part-of": "gpuplatform", "app.kubernetes.io/managed-by": "pulumi"}


def team_namespace(team: str) -> str:
    """The namespace of a team: ``team-<name>``."""
    return f"team-{team}"


def team_group(team: str) -> str:
    """The Kubernetes group bound to a team's namespace (``team:<name>``); on EKS an
    access entry maps the team's IAM role to this group."""
    return f"team:{team}"


def team_cluster_queue(team: str) -> str:
    return f"team-{team}"


def secondary_network_name(team: str) -> str:
    """The IPoIB secondary network attached to a team's pods (on-prem, when enabled)."""
    return f"ipoib-{team}"


@dataclass(frozen=True)
class TrackingAccess:
    """How a team's jobs reach the cluster's MLflow tracking server.

    Args:
        uri: the server's address (``MLFLOW_TRACKING_URI``; https).
        credentials_secret: the Secret in the team namespace with the team's MLflow
            user (keys ``username`` and ``password``).
        ca_secret: the Secret in the team namespace whose ``ca_key`` is the cluster CA
            the server's certificate is verified with.
        ca_key: the CA's key in ``ca_secret`` (default ``ca.crt``).
    """

    uri: str
    credentials_secret: str
    ca_secret: str
    ca_key: str = "ca.crt"


@dataclass(frozen=True)
class TeamPlacement:
    """Where a team's training job goes: what the workloads' ``TrainingJob`` takes.

    Args:
        namespace: the team namespace.
        local_queue: the Kueue LocalQueue (label ``kueue.x-k8s.io/queue-name``).
        service_account: the ServiceAccount with the team's cloud identity.
        checkpoint_claim: the PersistentVolumeClaim for checkpoints.
        priority_classes: PriorityClass names the team's jobs may use, highest first
            (higher ones are refused by the namespace quota).
        secondary_network: the NetworkAttachmentDefinition to request for IPoIB
            (``k8s.v1.cni.cncf.io/networks``), or ``None`` where there is none.
        tracking: how the team's jobs reach the tracking server, or ``None`` where the
            cluster runs none.
    """

    namespace: str
    local_queue: str
    service_account: str
    checkpoint_claim: str
    priority_classes: tuple[str, ...]
    secondary_network: str | None = None
    tracking: TrackingAccess | None = None


def team_placement(
    team: str,
    secondary_network: bool = False,
    priority_classes: tuple[str, ...] = tuple(PRIORITY_CLASSES),
    tracking: TrackingAccess | None = None,
) -> TeamPlacement:
    """The placement of a team's jobs (pure: derived from the team name, the
    PriorityClasses the team may use and what the cluster offers)."""
    return TeamPlacement(
        namespace=team_namespace(team),
        local_queue=LOCAL_QUEUE_NAME,
        service_account=TRAINER_SERVICE_ACCOUNT,
        checkpoint_claim=CHECKPOINT_CLAIM_NAME,
        priority_classes=priority_classes,
        secondary_network=secondary_network_name(team) if secondary_network else None,
        tracking=tracking,
    )


#: cert-manager's ClusterIssuer of the cluster CA (`modules.k8s.pki`), here so that what
#: only needs its name (the serving spec, which the serving image imports) needs no Pulumi.
CLUSTER_CA_ISSUER = "gpuplatform-cluster-ca"
