"""Each team's EKS access entry and its namespace-scoped access policy
(`modules.aws.identity_spec` says who and why)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from modules.component_base import AwsComponent, Outputs

from .identity_spec import GROUP_TAG, TEAM_TAG, IdentitySpec


@dataclass(frozen=True)
class TeamAccessArgs:
    """Args of `TeamAccess`.

    Args:
        cluster_name: the EKS cluster.
        spec: the validated identity section (`IdentitySpec`).
    """

    cluster_name: pulumi.Input[str]
    spec: IdentitySpec


class TeamAccess(AwsComponent[TeamAccessArgs]):
    """Per team: an access entry (type STANDARD, Kubernetes group ``team:<name>``) for
    the role its Identity Center group signs in as, and one access policy association
    scoped to the team's namespace. Nothing cluster-wide: that is for admins."""

    entries: dict[str, aws.eks.AccessEntry]
    associations: dict[str, aws.eks.AccessPolicyAssociation]

    def declare(self, name: str, args: TeamAccessArgs) -> Outputs:
        self.entries, self.associations = {}, {}
        for access in args.spec.teams:
            entry = aws.eks.AccessEntry(
                f"{name}-{access.team}",
                cluster_name=args.cluster_name,
                principal_arn=access.role_arn,
                type="STANDARD",
                # The RBAC group the tenancy layer binds (edit, queue viewer) in the
                # team's namespace only.
                kubernetes_groups=[access.kubernetes_group],
                tags={TEAM_TAG: access.team, GROUP_TAG: access.group},
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.entries[access.team] = entry
            self.associations[access.team] = aws.eks.AccessPolicyAssociation(
                f"{name}-{access.team}",
                cluster_name=args.cluster_name,
                principal_arn=entry.principal_arn,
                policy_arn=access.policy_arn,
                access_scope={"type": "namespace", "namespaces": [access.namespace]},
                opts=pulumi.ResourceOptions(parent=self),
            )
        return {"teams": {t.team: t.role_arn for t in args.spec.teams}}
