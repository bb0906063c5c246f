"""What the Kubernetes layer gets from the AWS foundation on an EKS cluster.

The AWS side (`stacks.aws_foundation`) creates the cluster, its key, its network and its
file system; the composition passes their outputs here as `EksInputs`. On premises the
counterpart is `modules.k8s.site.onprem.OnPremSpec`, read from config.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi


@dataclass(frozen=True)
class FsxInputs:
    """The stack's FSx for Lustre file system (outputs of the AWS foundation).

    Args:
        file_system_id: the file system id (``fs-...``).
        dns_name: its DNS name.
        mount_name: its Lustre mount name.
        capacity_gib: its storage capacity in GiB (the volumes' nominal size).
        init_image: an image with a POSIX shell from the in-region registry (e.g. the
            training image) for the one-off Job that creates the team directories.
    """

    file_system_id: pulumi.Input[str]
    dns_name: pulumi.Input[str]
    mount_name: pulumi.Input[str]
    capacity_gib: int
    init_image: str


@dataclass(frozen=True)
class EksInputs:
    """What the Kubernetes layer needs from the AWS foundation.

    Args:
        cluster_name: the EKS cluster name (Cluster Autoscaler discovery tags).
        region: the AWS region (autoscaler, in-region add-on images).
        storage_kms_key_arn: ARN of the customer-managed key encrypting EBS volumes.
        vpc_cidr: the VPC's CIDR: team pods may reach its interface endpoints on 443.
        fsx: the FSx for Lustre file system, where the stack has one.
        registry: the stack's own ECR (``<ecr>/gpu-<stack>``) holding mirrors of the
            cluster add-ons' images under their upstream repository paths (the Cluster
            Autoscaler's, the FSx CSI driver's, the GPU Operator's, Kueue's, the
            monitoring stack's, OpenCost's; the stack creates the repositories); None:
            their upstream registries.
    """

    cluster_name: pulumi.Input[str]
    region: pulumi.Input[str]
    storage_kms_key_arn: pulumi.Input[str]
    vpc_cidr: pulumi.Input[str]
    fsx: FsxInputs | None = None
    registry: str | None = None
