"""IAM roles for Kubernetes service accounts through EKS Pod Identity."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from modules.component_base import AwsComponent, Outputs

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


class PodIdentityRole(AwsComponent[PodIdentityRoleArgs]):
    """A role only EKS Pod Identity can assume, bound to one service account."""

    role: aws.iam.Role

    def declare(self, name: str, args: PodIdentityRoleArgs) -> Outputs:
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
        return {"role_arn": self.role.arn}
