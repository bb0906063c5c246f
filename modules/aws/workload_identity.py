"""IAM roles for Kubernetes service accounts through EKS Pod Identity."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from . import iam


def team_data_prefix(team: str) -> str:
    """The bucket prefix a team's training jobs may read and write."""
    return f"teams/{team}/"


@dataclass(frozen=True)
class PodIdentityRoleArgs:
    """Args of `PodIdentityRole`.

    Args:
        cluster_name: the EKS cluster.
        namespace: the service account's namespace.
        service_account: the service account's name.
        description: what the role is for (shown in IAM).
        policy: the role's only permissions (a JSON policy document).
    """

    cluster_name: pulumi.Input[str]
    namespace: str
    service_account: str
    description: str
    policy: pulumi.Input[str]


class PodIdentityRole(pulumi.ComponentResource):
    """A role only EKS Pod Identity can assume, bound to one service account."""

    role: aws.iam.Role

    def __init__(
        self, name: str, args: PodIdentityRoleArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("gpuplatform:aws:PodIdentityRole", name, None, opts)
        self.role = iam.role(
            name,
            json.dumps(iam.pod_identity_trust()),
            self,
            description=args.description,
            inline_policies={"access": args.policy},
        )
        aws.eks.PodIdentityAssociation(
            name,
            cluster_name=args.cluster_name,
            namespace=args.namespace,
            service_account=args.service_account,
            role_arn=self.role.arn,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"role_arn": self.role.arn})
