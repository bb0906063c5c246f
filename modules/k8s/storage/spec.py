"""Storage: encrypted volumes for the platform and a checkpoint volume per team.

On EKS the default StorageClass is gp3 encrypted with the stack's customer-managed key,
and a second class with the same settings keeps the volume when its claim goes away
(checkpoints are data). Where the stack has FSx for Lustre, the FSx CSI driver mounts
the file system and every team gets its own directory of it:

* a PersistentVolume binds to exactly one claim, so each team gets its own static PV
  and PVC for the same file system, each mounting only ``/teams/<team>`` (a Lustre
  subdirectory mount: ``<dns>@tcp:/<mount name>/teams/<team>``). A team's pods cannot
  see another team's checkpoints, whatever ``subPath`` they ask for;
* Lustre mounts a subdirectory only if it exists, so a one-off Job (platform namespace,
  not a team's) mounts the root once and creates ``/teams/<team>`` for every team,
  owned by the trainer UID/GID, mode 0770.

Without FSx a team's claim is a gp3 volume (ReadWriteOnce: single-node jobs). On premises
the classes come from config; no AWS resource is involved.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Sequence
from typing import Any, Protocol

import pulumi

from modules.k8s import netpol
from modules.k8s.common import (
    Manifest,
    PlatformNamespace,
    metadata,
    pool_taint_tolerations,
    system_node_selector,
)
from modules.k8s.names import (
    CHECKPOINT_CLAIM_NAME,
    DEFAULT_STORAGE_CLASS,
    RETAINED_STORAGE_CLASS,
    STORAGE_NAMESPACE,
    TRAINER_GID,
    TRAINER_UID,
    team_namespace,
)
from modules.k8s.security import scanner_exceptions
from modules.k8s.site.eks import EksInputs, FsxInputs
from modules.k8s.site.onprem import OnPremSpec
from modules.k8s.tenancy.spec import TeamSpec

FSX_DRIVER = "fsx.csi.aws.com"
#: The policy pack's per-object exception (rule ``k8s-run-as-non-root``), with its reason.
RUN_AS_ROOT_EXCEPTION = "policy-exception.gpuplatform.ae/k8s-run-as-non-root"
RUN_AS_ROOT_REASON = (
    "one-off Job: creates the team directories on the shared file system and hands them "
    "to the trainer UID with chown, which needs UID 0 and CAP_CHOWN"
)
FSX_ROOT_CLAIM = "fsx-root"
FSX_MOUNT_PATH = "/fsx"
TEAMS_DIRECTORY = "teams"


class StorageArgs(Protocol):
    """What the storage decisions read of the platform's arguments: where the volumes
    come from (`modules.k8s.platform.spec.KubernetesPlatformArgs` provides it; a
    Protocol, so this module does not import the aggregate that imports the specs)."""

    @property
    def eks(self) -> EksInputs | None: ...

    @property
    def onprem(self) -> OnPremSpec | None: ...


def concat(*parts: pulumi.Input[str]) -> pulumi.Input[str]:
    """Join strings, staying a plain ``str`` when every part is one (so the pure
    functions return plain manifests to tests, and Outputs to the component)."""
    if all(isinstance(p, str) for p in parts):
        return "".join(p for p in parts if isinstance(p, str))
    return pulumi.Output.concat(*parts)


def ebs_storage_classes(kms_key_arn: pulumi.Input[str]) -> list[Manifest]:
    """gp3, encrypted with the stack's KMS key, bound where the pod lands (so the volume
    is created in the pod's zone): the default class, and a ``Retain`` twin."""

    def storage_class(name: str, reclaim: str, default: bool) -> Manifest:
        annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else None
        return {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": metadata(name, annotations=annotations),
            "provisioner": "ebs.csi.aws.com",
            "parameters": {
                "type": "gp3",
                "encrypted": "true",
                "kmsKeyId": kms_key_arn,
                "csi.storage.k8s.io/fstype": "ext4",
            },
            "reclaimPolicy": reclaim,
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": True,
        }

    return [
        storage_class(DEFAULT_STORAGE_CLASS, "Delete", default=True),
        storage_class(RETAINED_STORAGE_CLASS, "Retain", default=False),
    ]


#: The FSx CSI driver's images (chart 1.17.0's values.yaml, vendored: the driver and its
#: CSI sidecars, all from AWS's public ECR), by repository under a mirror -> (upstream
#: registry, tag), and the chart key each is set under (``image`` or
#: ``sidecars.<name>.image``).
FSX_CSI_IMAGES: dict[str, tuple[str, str, str]] = {
    "fsx-csi-driver/aws-fsx-csi-driver": ("public.ecr.aws", "v1.9.0", ""),
    "csi-components/csi-provisioner": ("public.ecr.aws", "v6.2.0-eksbuild.2", "provisioner"),
    "csi-components/csi-resizer": ("public.ecr.aws", "v2.1.0-eksbuild.3", "resizer"),
    "csi-components/livenessprobe": ("public.ecr.aws", "v2.18.0-eksbuild.3", "livenessProbe"),
    "csi-components/csi-node-driver-registrar": (
        "public.ecr.aws",
        "v2.16.0-eksbuild.3",
        "nodeDriverRegistrar",
    ),
}


def fsx_csi_values(registry: str | None = None) -> dict[str, Any]:
    """FSx CSI driver: the controller on the system pool; the node plugin on every node
    that may mount the file system, GPU and fabric nodes included. Static volumes need
    no AWS API call, so the driver needs no IAM role. Every image from ``registry``, a
    mirror under the upstream repository paths (the stack's ECR), at the chart's tags,
    pulled at each start (the chart renders no pull policy for the controller's
    sidecars: there the kubelet's default for a tag applies)."""
    values: dict[str, Any] = {
        "controller": {"nodeSelector": system_node_selector()},
        "node": {"tolerations": pool_taint_tolerations()},
        "sidecars": {},
    }
    for repository, (upstream, tag, sidecar) in FSX_CSI_IMAGES.items():
        image = {
            "repository": f"{registry or upstream}/{repository}",
            "tag": tag,
            "pullPolicy": "Always",
        }
        if sidecar:
            values["sidecars"][sidecar] = {"image": image}
        else:
            values["image"] = image
    return values


def _fsx_volume(
    name: str,
    fsx: FsxInputs,
    subdirectory: str,
    claim_namespace: str,
    claim_name: str,
) -> Manifest:
    mount_name: pulumi.Input[str] = (
        concat(fsx.mount_name, "/", subdirectory) if subdirectory else fsx.mount_name
    )
    handle_suffix = f":{subdirectory}" if subdirectory else ""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": metadata(name),
        "spec": {
            "capacity": {"storage": f"{fsx.capacity_gib}Gi"},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"],
            # Deleting the claim never touches the data on the file system.
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": ["flock"],
            # Pre-bound: only this namespace's claim of this name can take the volume.
            "claimRef": {"namespace": claim_namespace, "name": claim_name},
            "csi": {
                "driver": FSX_DRIVER,
                "volumeHandle": concat(fsx.file_system_id, handle_suffix),
                "volumeAttributes": {"dnsname": fsx.dns_name, "mountname": mount_name},
            },
        },
    }


def _static_claim(name: str, ns: str, volume_name: str, size_gib: int) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(name, ns),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": volume_name,
            "resources": {"requests": {"storage": f"{size_gib}Gi"}},
        },
    }


def fsx_team_volume(team: TeamSpec, fsx: FsxInputs) -> list[Manifest]:
    """The team's PV (its own directory of the file system) and the claim bound to it."""
    ns = team_namespace(team.name)
    pv_name = f"fsx-{ns}"
    return [
        _fsx_volume(pv_name, fsx, f"{TEAMS_DIRECTORY}/{team.name}", ns, CHECKPOINT_CLAIM_NAME),
        _static_claim(CHECKPOINT_CLAIM_NAME, ns, pv_name, fsx.capacity_gib),
    ]


def fsx_root_volume(fsx: FsxInputs) -> list[Manifest]:
    """The whole file system, claimable only in the platform's storage namespace."""
    return [
        _fsx_volume("fsx-root", fsx, "", STORAGE_NAMESPACE, FSX_ROOT_CLAIM),
        _static_claim(FSX_ROOT_CLAIM, STORAGE_NAMESPACE, "fsx-root", fsx.capacity_gib),
    ]


# `baseline`, not `restricted`: the directory Job runs as root with CAP_CHOWN to hand each
# team directory to the trainer UID. No team can run pods here.
STORAGE_NS = PlatformNamespace(
    STORAGE_NAMESPACE,
    "baseline",
    "the team-directory Job runs as root with CAP_CHOWN on the shared file system",
)


def storage_network_policies(network: netpol.ClusterNetwork) -> list[Manifest]:
    """The team-directory Job touches only the file system its node mounts (the CSI
    driver's mount is the node's traffic): its namespace allows nothing but DNS."""
    return netpol.baseline(STORAGE_NAMESPACE, network, api_server=False)


def team_directories_script(team_names: Sequence[str]) -> str:
    """Shell commands creating ``/fsx/teams/<team>`` for each team (idempotent)."""
    root = f"{FSX_MOUNT_PATH}/{TEAMS_DIRECTORY}"
    lines = ["set -eu", f"mkdir -p {root}", f"chmod 0755 {root}"]
    for name in sorted(team_names):
        path = shlex.quote(f"{root}/{name}")
        lines += [
            f"mkdir -p {path}",
            f"chmod 0770 {path}",
            f"chown {TRAINER_UID}:{TRAINER_GID} {path}",
        ]
    return "\n".join(lines)


def team_directories_job(team_names: Sequence[str], image: str) -> Manifest:
    """One-off Job creating the team directories. Its name carries a digest of the team
    list, so adding a team runs a new Job instead of editing an immutable one."""
    script = team_directories_script(team_names)
    digest = hashlib.sha256(script.encode()).hexdigest()[:8]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(
            f"fsx-team-directories-{digest}",
            STORAGE_NAMESPACE,
            annotations={
                RUN_AS_ROOT_EXCEPTION: RUN_AS_ROOT_REASON,
                # The same reason for checkov's checks of root, its capability and UID.
                **scanner_exceptions(
                    {c: RUN_AS_ROOT_REASON for c in ("CKV_K8S_23", "CKV_K8S_25", "CKV_K8S_40")}
                ),
            },
        ),
        "spec": {
            "backoffLimit": 6,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "fsx-team-directories"}},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "automountServiceAccountToken": False,
                    "nodeSelector": system_node_selector(),
                    "securityContext": {
                        "runAsUser": 0,
                        "runAsGroup": 0,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "create-team-directories",
                            "image": image,
                            "command": ["/bin/sh", "-c", script],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
                            },
                            "resources": {
                                "requests": {"cpu": "50m", "memory": "64Mi"},
                                "limits": {"cpu": "200m", "memory": "128Mi"},
                            },
                            "volumeMounts": [{"name": "fsx", "mountPath": FSX_MOUNT_PATH}],
                        }
                    ],
                    "volumes": [
                        {"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_ROOT_CLAIM}}
                    ],
                },
            },
        },
    }


def block_checkpoint_claim(
    team: TeamSpec, storage_class: str, access_mode: str = "ReadWriteOnce"
) -> Manifest:
    """A dynamically provisioned checkpoint volume of the team's size."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(CHECKPOINT_CLAIM_NAME, team_namespace(team.name)),
        "spec": {
            "accessModes": [access_mode],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": f"{team.checkpoint_storage_gib}Gi"}},
        },
    }


def checkpoint_volume_manifests(team: TeamSpec, args: StorageArgs) -> list[Manifest]:
    """The team's checkpoint claim (and, on FSx, the volume it binds to)."""
    if args.eks is not None:
        if args.eks.fsx is not None:
            return fsx_team_volume(team, args.eks.fsx)
        return [block_checkpoint_claim(team, RETAINED_STORAGE_CLASS)]
    onprem: OnPremSpec | None = args.onprem
    if onprem is None:
        raise ValueError("an on-premises platform needs its OnPremSpec")
    return [block_checkpoint_claim(team, onprem.checkpoint_class, onprem.checkpoint_access_mode)]


def platform_storage_class(args: StorageArgs) -> str:
    """The StorageClass of platform volumes (Prometheus, Alertmanager)."""
    if args.onprem is not None:
        return args.onprem.storage_class
    return DEFAULT_STORAGE_CLASS
