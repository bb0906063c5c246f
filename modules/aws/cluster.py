"""The EKS control plane: private endpoint, envelope-encrypted secrets, every
control-plane log type to an encrypted log group, access entries, managed add-ons."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from modules.component_base import AwsComponent, Outputs

from . import iam
from .logs import encrypted_log_group

CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")


@dataclass(frozen=True)
class AddonRole:
    """The IAM role of a managed add-on's ServiceAccount, through EKS Pod Identity.

    Args:
        service_account: the add-on's ServiceAccount (in ``kube-system``).
        description: what the role is for (shown in IAM).
        managed_policies: names of AWS-managed policies to attach.
        inline_policies: inline policy name -> document (JSON).
    """

    service_account: str
    description: str
    managed_policies: Sequence[str]
    inline_policies: Mapping[str, pulumi.Input[str]] | None = None


def managed_addon(
    name: str,
    cluster_name: pulumi.Input[str],
    addon_name: str,
    parent: pulumi.Resource,
    *,
    role: AddonRole | None = None,
    configuration: Mapping[str, str] | None = None,
    depends_on: Sequence[pulumi.Resource] = (),
) -> aws.eks.Addon:
    """The EKS managed add-on ``addon_name``, which takes over from the self-managed
    default (``OVERWRITE`` on create), with its ``configuration``; with ``role``, its
    ServiceAccount gets a role of its own (named ``name`` too) through EKS Pod Identity."""
    associations: list[aws.eks.AddonPodIdentityAssociationArgsDict] | None = None
    if role is not None:
        created = iam.role(
            name,
            json.dumps(iam.pod_identity_trust()),
            parent,
            description=role.description,
            managed_policies=role.managed_policies,
            inline_policies=role.inline_policies,
        )
        associations = [{"role_arn": created.arn, "service_account": role.service_account}]
    return aws.eks.Addon(
        name,
        cluster_name=cluster_name,
        addon_name=addon_name,
        configuration_values=json.dumps(configuration) if configuration is not None else None,
        pod_identity_associations=associations,
        resolve_conflicts_on_create="OVERWRITE",
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )


def kubeconfig(cluster_name: str, endpoint: str, certificate_authority: str, region: str) -> str:
    """A kubeconfig that authenticates with ``aws eks get-token`` (no static credentials).

    Args:
        cluster_name: the EKS cluster.
        endpoint: its API server URL.
        certificate_authority: its base64 CA bundle.
        region: the cluster's region (the token is requested there).
    """
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": [
                "eks",
                "get-token",
                "--cluster-name",
                cluster_name,
                "--region",
                region,
                "--output",
                "json",
            ],
        }
    }
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": cluster_name,
                    "cluster": {
                        "server": endpoint,
                        "certificate-authority-data": certificate_authority,
                    },
                }
            ],
            "contexts": [
                {"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}
            ],
            "current-context": cluster_name,
            "users": [{"name": cluster_name, "user": user}],
        },
        sort_keys=True,
    )


def vpc_config(
    subnet_ids: list[pulumi.Input[str]], public_access_cidrs: tuple[str, ...], private_access: bool
) -> aws.eks.ClusterVpcConfigArgs:
    """The API endpoint settings: private, and public only for listed CIDRs."""
    return aws.eks.ClusterVpcConfigArgs(
        subnet_ids=subnet_ids,
        endpoint_private_access=private_access,
        endpoint_public_access=bool(public_access_cidrs),
        public_access_cidrs=list(public_access_cidrs) if public_access_cidrs else None,
    )


@dataclass(frozen=True)
class EksClusterArgs:
    """Args of `EksCluster`.

    Args:
        cluster_name: the EKS cluster name.
        kubernetes_version: minor version, e.g. ``"1.33"``.
        region: the stack's region.
        account_id: the account.
        subnet_ids: private subnets for the control-plane interfaces.
        secrets_key_arn: CMK for envelope encryption of Kubernetes secrets.
        logs_key_arn: CMK for the control-plane log group.
        log_retention_days: control-plane log retention.
        public_access_cidrs: CIDRs for a public endpoint; empty keeps it private.
        endpoint_private_access: keep the private endpoint on.
        admin_role_arns: IAM roles given cluster-admin through access entries.
        creator_admin_access: give the creating identity an admin access entry.
    """

    cluster_name: str
    kubernetes_version: str
    region: str
    account_id: str
    subnet_ids: list[pulumi.Input[str]]
    secrets_key_arn: pulumi.Input[str]
    logs_key_arn: pulumi.Input[str]
    log_retention_days: int
    public_access_cidrs: tuple[str, ...]
    endpoint_private_access: bool
    admin_role_arns: tuple[str, ...]
    creator_admin_access: bool = True


class EksCluster(AwsComponent[EksClusterArgs]):
    """The control plane, its IAM role and log group, admin access entries, the node
    role, and the add-ons nodes need before they can join (VPC CNI, kube-proxy, Pod
    Identity agent)."""

    cluster: aws.eks.Cluster
    node_role: aws.iam.Role
    kubeconfig: pulumi.Output[str]

    def declare(self, name: str, args: EksClusterArgs) -> Outputs:
        child = pulumi.ResourceOptions(parent=self)
        # EKS writes to exactly this name; creating it first lets us set key and retention.
        log_group = encrypted_log_group(
            f"{name}-control-plane",
            f"/aws/eks/{args.cluster_name}/cluster",
            args.logs_key_arn,
            args.log_retention_days,
            self,
        )
        cluster_role = iam.role(
            f"{name}-cluster",
            json.dumps(iam.service_trust("eks.amazonaws.com", args.account_id)),
            self,
            description=f"EKS control plane of {args.cluster_name}",
            managed_policies=["AmazonEKSClusterPolicy"],
            inline_policies={
                "secrets-key": iam.json_document(iam.key_grant_access, args.secrets_key_arn)
            },
        )
        self.cluster = aws.eks.Cluster(
            name,
            name=args.cluster_name,
            version=args.kubernetes_version,
            role_arn=cluster_role.arn,
            vpc_config=vpc_config(
                args.subnet_ids, args.public_access_cidrs, args.endpoint_private_access
            ),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=args.secrets_key_arn),
                resources=["secrets"],
            ),
            enabled_cluster_log_types=list(CONTROL_PLANE_LOG_TYPES),
            access_config=aws.eks.ClusterAccessConfigArgs(
                # Access entries only: no aws-auth ConfigMap. The identity running
                # `pulumi up` may get an (auditable, revocable) admin entry so it can
                # install the platform layer in the same run.
                authentication_mode="API",
                bootstrap_cluster_creator_admin_permissions=args.creator_admin_access,
            ),
            # Managed add-ons below replace the self-managed defaults.
            bootstrap_self_managed_addons=False,
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type="STANDARD"),
            deletion_protection=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[log_group]),
        )
        for index, arn in enumerate(args.admin_role_arns):
            entry = aws.eks.AccessEntry(
                f"{name}-admin-{index}",
                cluster_name=self.cluster.name,
                principal_arn=arn,
                type="STANDARD",
                opts=child,
            )
            aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{index}",
                cluster_name=self.cluster.name,
                principal_arn=entry.principal_arn,
                policy_arn="arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
                access_scope={"type": "cluster"},
                opts=child,
            )
        self.node_role = iam.role(
            f"{name}-node",
            json.dumps(iam.service_trust("ec2.amazonaws.com")),
            self,
            description=f"Nodes of {args.cluster_name}: join the cluster and pull images only",
            # The CNI's permissions go to its own Pod Identity role, not to every node.
            managed_policies=["AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly"],
        )
        aws.eks.AccessEntry(
            f"{name}-nodes",
            cluster_name=self.cluster.name,
            principal_arn=self.node_role.arn,
            type="EC2_LINUX",
            opts=child,
        )
        cluster_name = self.cluster.name
        agent = managed_addon(
            f"{name}-pod-identity-agent", cluster_name, "eks-pod-identity-agent", self
        )
        managed_addon(
            f"{name}-vpc-cni",
            cluster_name,
            "vpc-cni",
            self,
            role=AddonRole(
                "aws-node", "VPC CNI (aws-node) through EKS Pod Identity", ["AmazonEKS_CNI_Policy"]
            ),
            # Network policies are enforced by the CNI itself (team default-deny).
            configuration={"enableNetworkPolicy": "true"},
            depends_on=[agent],
        )
        managed_addon(f"{name}-kube-proxy", cluster_name, "kube-proxy", self)
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(
                self.cluster.name, self.cluster.endpoint, self.cluster.certificate_authority.data
            ).apply(lambda v: kubeconfig(v[0], v[1], v[2], args.region))
        )
        return {"cluster_name": self.cluster.name, "endpoint": self.cluster.endpoint}


@dataclass(frozen=True)
class ClusterAddonsArgs:
    """Args of `ClusterAddons`.

    Args:
        cluster_name: the EKS cluster.
        storage_key_arn: CMK the EBS CSI driver encrypts volumes with.
    """

    cluster_name: pulumi.Input[str]
    storage_key_arn: pulumi.Input[str]


class ClusterAddons(AwsComponent[ClusterAddonsArgs]):
    """Add-ons that need running nodes: CoreDNS and the EBS CSI driver (with its own
    Pod Identity role, allowed to use the storage key for the volumes it creates)."""

    def declare(self, name: str, args: ClusterAddonsArgs) -> Outputs:
        managed_addon(f"{name}-coredns", args.cluster_name, "coredns", self)
        storage_key = iam.json_document(iam.key_grant_access, args.storage_key_arn)
        managed_addon(
            f"{name}-ebs-csi",
            args.cluster_name,
            "aws-ebs-csi-driver",
            self,
            role=AddonRole(
                "ebs-csi-controller-sa",
                "EBS CSI controller through EKS Pod Identity",
                ["service-role/AmazonEBSCSIDriverPolicy"],
                {"storage-key": storage_key},
            ),
        )
        return {}
