"""Who gets into an EKS cluster, and with what: typed, pure, validated.

People sign in through IAM Identity Center: each team's Identity Center *group* is
assigned a permission set on the stack's account (in the organisation's Identity
Center, not by this stack), and the assignment creates an IAM role
(``AWSReservedSSO_<permission set>_<suffix>``) that the group's members assume. That
role is the team's principal here: it gets an EKS access entry of type ``STANDARD``
whose access policy is scoped to the team's namespace, and whose Kubernetes group is
the team's RBAC group ``team:<name>`` (the RoleBindings the tenancy layer creates in the
team's namespace, among them read access to its Kueue queues: custom resources are
granted through RBAC, not through the access policy).
Administrators stay separate: ``cluster.adminRoleArns`` gets cluster-wide admin entries
(`modules.aws.cluster`); no team role may be one of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from modules.k8s.names import team_group, team_namespace
from modules.validation import Checker, TextFormat

#: EKS access policies (arn:aws:eks::aws:cluster-access-policy/...).
ACCESS_POLICY_PREFIX = "arn:aws:eks::aws:cluster-access-policy/"
EDIT_POLICY_ARN = f"{ACCESS_POLICY_PREFIX}AmazonEKSEditPolicy"
VIEW_POLICY_ARN = f"{ACCESS_POLICY_PREFIX}AmazonEKSViewPolicy"
CLUSTER_ADMIN_POLICY_ARN = f"{ACCESS_POLICY_PREFIX}AmazonEKSClusterAdminPolicy"
#: Policies that give rights over RBAC or the whole cluster: administrators only.
ADMIN_POLICY_ARNS = (CLUSTER_ADMIN_POLICY_ARN, f"{ACCESS_POLICY_PREFIX}AmazonEKSAdminPolicy")
POLICY_FOR_ACCESS = {"edit": EDIT_POLICY_ARN, "view": VIEW_POLICY_ARN}

#: An Identity Center (identity store) group id, as botocore's identitystore model
#: defines ``GroupId`` (checked against the model in tests/aws/test_identity.py).
GROUP_ID = re.compile(
    r"^([0-9a-f]{10}-|)[A-Fa-f0-9]{8}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{12}$"
)
#: An IAM role ARN; Identity Center's roles carry the path aws-reserved/sso.amazonaws.com/.
ROLE_ARN = re.compile(r"^arn:aws:iam::\d{12}:role/[\w+=,.@/-]+$")
_GROUP = TextFormat(
    GROUP_ID.pattern,
    "an IAM Identity Center group id (the identity store's GroupId), e.g. "
    "9067c2b4d1-1f2e3d4c-5b6a-4789-8a9b-0c1d2e3f4a5b",
)
_ROLE = TextFormat(
    ROLE_ARN.pattern,
    "an IAM role ARN, e.g. arn:aws:iam::123456789012:role/aws-reserved/"
    "sso.amazonaws.com/me-central-1/AWSReservedSSO_gpu-nlp_0123456789abcdef",
)

#: Tags on each team's access entry: which team and which group it serves (audit).
TEAM_TAG = "gpuplatform/team"
GROUP_TAG = "gpuplatform/identity-center-group"


@dataclass(frozen=True)
class TeamAccessSpec:
    """One team's way into the cluster (an entry of ``identity.teams``).

    Args:
        team: the team (one of ``teams``).
        group: its IAM Identity Center group id (the identity store's ``GroupId``).
        role_arn: the IAM role the group's members assume in this account: the role
            Identity Center created for the permission set assigned to the group.
        access: ``edit`` (default: create and change workloads in the namespace) or
            ``view`` (read only).
    """

    team: str
    group: str
    role_arn: str
    access: Literal["edit", "view"] = "edit"

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("group", self.group, _GROUP)
        check.matches("role_arn", self.role_arn, _ROLE)
        check.one_of(
            "access",
            self.access,
            tuple(POLICY_FOR_ACCESS),
            "admin rights are for cluster.adminRoleArns only",
        )
        check.done()

    @property
    def namespace(self) -> str:
        return team_namespace(self.team)

    @property
    def kubernetes_group(self) -> str:
        return team_group(self.team)

    @property
    def policy_arn(self) -> str:
        return POLICY_FOR_ACCESS[self.access]


@dataclass(frozen=True)
class IdentitySpec:
    """How people get into the cluster (config key ``identity``, AWS stacks).

    Args:
        provider: where people sign in; ``iam-identity-center`` (the only one on AWS:
            EKS access entries take IAM principals).
        teams: each team's group and the role it signs in as (`TeamAccessSpec`).
    """

    provider: Literal["iam-identity-center"] = "iam-identity-center"
    teams: tuple[TeamAccessSpec, ...] = ()

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            self.provider == "iam-identity-center",
            "provider",
            self.provider,
            "'iam-identity-center' (EKS access entries take IAM principals)",
        )
        check.done()


def identity_problems(
    spec: IdentitySpec, teams: tuple[str, ...], admin_role_arns: tuple[str, ...]
) -> list[tuple[str, object, str]]:
    """What the identity section gets wrong, in itself and against the rest of the stack:
    (field, value, expected) per problem, all of them (checked here rather than in
    `IdentitySpec` so that they come with the stack's other problems). One entry per
    team, one role per team, team roles never administrators."""
    problems: list[tuple[str, object, str]] = []
    names = [t.team for t in spec.teams]
    roles = [t.role_arn for t in spec.teams]
    for i, access in enumerate(spec.teams):
        if names.count(access.team) > 1:
            problems.append((f"identity.teams[{i}].team", access.team, "one entry per team"))
        if roles.count(access.role_arn) > 1:
            problems.append(
                (
                    f"identity.teams[{i}].role_arn",
                    access.role_arn,
                    "each team signs in as its own role (a shared role would open every "
                    "namespace it maps to to all of their members)",
                )
            )
        if access.team not in teams:
            problems.append(
                (
                    f"identity.teams[{i}].team",
                    access.team,
                    f"must be one of the teams: {', '.join(teams) or 'none declared'}",
                )
            )
        if access.role_arn in admin_role_arns:
            problems.append(
                (
                    f"identity.teams[{i}].role_arn",
                    access.role_arn,
                    "is also in cluster.adminRoleArns: administrators stay separate from "
                    "team roles (give the team its own permission set)",
                )
            )
    return problems
