"""Identity: least privilege in IAM policies and trust policies; scoped training roles;
scoped EKS access; and a way into the cluster for every team."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

import yaml

from modules.k8s.names import team_group, team_namespace
from policies import stackconfig
from policies.catalogue import resource_rule, stack_rule
from policies.documents import (
    InvalidDocumentError,
    Statement,
    allows,
    any_principal,
    names_everything,
    statements,
)
from policies.model import ResourceView, StackFindings, StackView
from policies.settings import Settings
from policies.values import Deferred, as_list, dig, is_unknown, known

ADMIN_POLICY_ARNS = (
    "arn:aws:iam::aws:policy/AdministratorAccess",
    "arn:aws:iam::aws:policy/PowerUserAccess",
    "arn:aws:iam::aws:policy/IAMFullAccess",
)


def policy_documents(resource: ResourceView) -> Iterator[tuple[str, Any]]:
    """(path, document) of every permission policy a resource carries."""
    props = resource.props
    if resource.type == "aws:iam/role:Role":
        for i, inline in enumerate(as_list(props.get("inlinePolicies"))):
            yield f"inlinePolicies[{i}].policy", dig(inline, "policy")
    elif "policy" in props:
        yield "policy", props.get("policy")


@resource_rule("aws-iam-no-admin-wildcard")
def no_admin_wildcard(resource: ResourceView, settings: Settings) -> Iterator[str]:
    if resource.type.endswith("PolicyAttachment"):
        arn = known(resource.props.get("policyArn"), "policyArn")
        if arn in ADMIN_POLICY_ARNS:
            yield f"attaches {arn}"
        return
    if resource.type == "aws:iam/role:Role":
        for arn in as_list(known(resource.props.get("managedPolicyArns"), "managedPolicyArns")):
            if arn in ADMIN_POLICY_ARNS:
                yield f"attaches {arn}"
    for path, document in policy_documents(resource):
        yield from allows(document, path, _everything_on_everything, partial(_admin, path))


def _everything_on_everything(statement: Statement) -> bool:
    return names_everything(statement.get("Action")) and names_everything(statement.get("Resource"))


def _admin(path: str, index: int, statement: Statement) -> str:
    return f"`{path}` statement {statement.get('Sid') or index} allows `*` on `*`"


@resource_rule("aws-iam-trust-no-wildcard-principal")
def trust_no_wildcard(resource: ResourceView, settings: Settings) -> Iterator[str]:
    document = resource.props.get("assumeRolePolicy")
    return allows(document, "assumeRolePolicy", any_principal, _assumed_by_anyone)


def _assumed_by_anyone(index: int, statement: Statement) -> str:
    return f"trust statement {statement.get('Sid') or index} lets any principal assume the role"


S3_OBJECT_ACTION_PREFIXES = (
    "s3:*",
    "s3:get",
    "s3:put",
    "s3:delete",
    "s3:abortmultipart",
    "s3:restore",
)


def _object_actions(actions: Any) -> list[str]:
    return [
        str(a)
        for a in as_list(actions)
        if a in ("*", "*:*") or str(a).lower().startswith(S3_OBJECT_ACTION_PREFIXES)
    ]


def _scoped_object_arn(arn: str) -> bool:
    """``arn:aws:s3:::bucket/prefix/...``: a bucket and a non-wildcard key prefix."""
    if not arn.startswith("arn:aws:s3:::"):
        return False
    bucket, _, key = arn[len("arn:aws:s3:::") :].partition("/")
    return bool(bucket) and "*" not in bucket and bool(key) and not key.startswith("*")


def _role_name_matches(role: ResourceView, pattern: str) -> bool:
    name = role.props.get("name")
    names = [role.name] + ([name] if isinstance(name, str) and not is_unknown(name) else [])
    return any(pattern.lower() in n.lower() for n in names)


def _attached_documents(stack: StackView, role: ResourceView) -> Iterator[tuple[str, str, Any]]:
    """(resource urn, path, document) of every policy attached to ``role`` in the stack."""
    for path, document in policy_documents(role):
        yield role.urn, path, document
    role_name = role.props.get("name")
    index = stack.by_urn()
    # Looked up by what their `role` names, not by scanning the stack for every role.
    names = [n for n in (role_name, role.name) if isinstance(n, str) and not is_unknown(n)]
    for resource in stack.referrers(
        ("aws:iam/rolePolicy:RolePolicy", "aws:iam/rolePolicyAttachment:RolePolicyAttachment"),
        "role",
    ).naming(role.urn, names):
        if resource.type == "aws:iam/rolePolicy:RolePolicy":
            yield resource.urn, "policy", resource.props.get("policy")
            continue
        policies = [
            index[u] for u in resource.property_dependencies.get("policyArn", ()) if u in index
        ]
        for policy in policies:
            if policy.type == "aws:iam/policy:Policy":
                yield policy.urn, "policy", policy.props.get("policy")
        arn = resource.props.get("policyArn")
        if not policies and isinstance(arn, str) and arn.startswith("arn:aws:iam::aws:policy/"):
            yield resource.urn, f"managed policy {arn}", arn


@stack_rule("aws-iam-training-role-scoped")
def training_role_scoped(stack: StackView, settings: Settings) -> StackFindings:
    deferred = Deferred()
    for role in stack.of_type("aws:iam/role:Role"):
        if not _role_name_matches(role, settings.training_role_pattern):
            continue
        for urn, path, document in _attached_documents(stack, role):
            with deferred.each():
                if path.startswith("managed policy"):
                    yield role.urn, f"training role {role.name} has the AWS {path} attached"
                    continue
                where = f"{urn.rsplit('::', 1)[-1]}.{path}"
                try:
                    found = statements(document, where)
                except InvalidDocumentError as invalid:
                    yield role.urn, f"training role {role.name}: {invalid}"
                    continue
                for statement in found:
                    if statement.get("Effect") != "Allow":
                        continue
                    if _object_actions(statement.get("Action")):
                        for arn in as_list(statement.get("Resource")):
                            if not _scoped_object_arn(str(arn)):
                                yield (
                                    role.urn,
                                    (
                                        f"training role {role.name} may act on objects of {arn} "
                                        f"(from {urn.rsplit('::', 1)[-1]}), not a bucket prefix"
                                    ),
                                )
                    lists = [
                        a
                        for a in as_list(statement.get("Action"))
                        if str(a).lower() == "s3:listbucket"
                    ]
                    if (
                        lists
                        and not dig(statement, "Condition", "StringLike", "s3:prefix")
                        and not dig(statement, "Condition", "StringEquals", "s3:prefix")
                    ):
                        yield (
                            role.urn,
                            (
                                f"training role {role.name} may list whole buckets "
                                "(ListBucket without "
                                "an s3:prefix condition)"
                            ),
                        )
    deferred.finish()


ACCESS_ASSOCIATION_TYPE = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
ACCESS_ENTRY_TYPE = "aws:eks/accessEntry:AccessEntry"
EKS_ACCESS_POLICY_PREFIX = "arn:aws:eks::aws:cluster-access-policy/"
#: Access policies with rights over RBAC or the whole cluster: administrators only.
EKS_ADMIN_POLICIES = (
    f"{EKS_ACCESS_POLICY_PREFIX}AmazonEKSClusterAdminPolicy",
    f"{EKS_ACCESS_POLICY_PREFIX}AmazonEKSAdminPolicy",
)


def _admin_role_arns() -> set[str]:
    """The stack's administrators: ``uae-gpu-platform:cluster.adminRoleArns``."""
    cluster = stackconfig.get("cluster")
    arns = cluster.get("adminRoleArns") if isinstance(cluster, Mapping) else None
    return {str(a) for a in as_list(arns)} if arns else set()


def _association_principal(stack: StackView, association: ResourceView) -> str:
    """The principal an association is for: its own ``principalArn``, or (during a real
    preview, where it is the access entry's output) the access entry's input."""
    value = association.props.get("principalArn")
    if isinstance(value, str) and not is_unknown(value):
        return value
    index = stack.by_urn()
    for urn in association.property_dependencies.get("principalArn", ()):
        entry = index.get(urn)
        if entry is None or entry.type != ACCESS_ENTRY_TYPE:
            continue
        arn = entry.props.get("principalArn")
        if isinstance(arn, str) and not is_unknown(arn):
            return arn
    return str(known(value, f"{association.name}.principalArn"))


@stack_rule("aws-eks-access-scope")
def eks_access_scope(stack: StackView, settings: Settings) -> StackFindings:
    deferred = Deferred()
    admins = _admin_role_arns()
    for association in stack.of_type(ACCESS_ASSOCIATION_TYPE):
        with deferred.each():
            scope = known(association.props.get("accessScope"), f"{association.name}.accessScope")
            kind = known(dig(scope, "type"), f"{association.name}.accessScope.type")
            policy = str(known(association.props.get("policyArn"), f"{association.name}.policyArn"))
            if kind not in ("cluster", "namespace"):
                yield (
                    association.urn,
                    f"access policy association {association.name} declares no access scope "
                    "(accessScope.type cluster or namespace)",
                )
                continue
            namespaces = as_list(known(dig(scope, "namespaces"), f"{association.name}.namespaces"))
            if kind == "namespace" and not namespaces:
                yield (
                    association.urn,
                    f"access policy association {association.name} is namespace-scoped but "
                    "names no namespace",
                )
            if kind != "cluster" and policy not in EKS_ADMIN_POLICIES:
                continue
            principal = _association_principal(stack, association)
            if principal in admins:
                continue
            if kind == "cluster":
                yield (
                    association.urn,
                    f"access policy association {association.name} gives {principal} "
                    f"cluster-wide access ({policy.removeprefix(EKS_ACCESS_POLICY_PREFIX)}), "
                    "but it is not one of cluster.adminRoleArns",
                )
            else:
                yield (
                    association.urn,
                    f"access policy association {association.name} grants "
                    f"{policy.removeprefix(EKS_ACCESS_POLICY_PREFIX)} to {principal}, which "
                    "is not one of cluster.adminRoleArns (admin policies can change RBAC)",
                )
    deferred.finish()


ROLE_BINDING_TYPE = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
CONFIGMAP_TYPE = "kubernetes:core/v1:ConfigMap"
#: A team's namespace is ``team-<name>`` (`modules.k8s.names.team_namespace`).
TEAM_NAMESPACE_PREFIX = team_namespace("")
AUTHENTICATION_CONFIGURATION = "AuthenticationConfiguration"
#: Kubernetes' user-facing ClusterRoles: bound in a team's namespace, the team's grant.
NAMESPACE_ROLES = ("admin", "edit", "view")


def _team_grants(stack: StackView) -> Iterator[tuple[ResourceView, str, list[str]]]:
    """Each RoleBinding that grants a team its namespace: one of Kubernetes'
    `NAMESPACE_ROLES`, in ``team-<name>``, to the team's group ``team:<name>`` among
    others; (binding, team, its groups)."""
    for binding in stack.of_type(ROLE_BINDING_TYPE):
        namespace = str(dig(binding.props, "metadata", "namespace") or "")
        if not namespace.startswith(TEAM_NAMESPACE_PREFIX):
            continue
        team = namespace.removeprefix(TEAM_NAMESPACE_PREFIX)
        groups = [
            str(s.get("name"))
            for s in as_list(binding.props.get("subjects"))
            if isinstance(s, Mapping) and s.get("kind") == "Group"
        ]
        role = binding.props.get("roleRef")
        granted = dig(role, "kind") == "ClusterRole" and dig(role, "name") in NAMESPACE_ROLES
        if granted and team_group(team) in groups:
            yield binding, team, groups


def _mapped_groups(stack: StackView) -> tuple[set[str], list[tuple[Any, str]]]:
    """The Kubernetes groups EKS access entries give their IAM principals, and the
    entries whose groups are not known yet (value, path)."""
    groups: set[str] = set()
    unknown: list[tuple[Any, str]] = []
    for entry in stack.of_type(ACCESS_ENTRY_TYPE):
        value = entry.props.get("kubernetesGroups")
        if is_unknown(value):
            unknown.append((value, f"{entry.name}.kubernetesGroups"))
        else:
            groups.update(str(g) for g in as_list(value))
    return groups, unknown


def _oidc_group_prefixes(stack: StackView) -> set[str]:
    """The group prefixes of the API server's OpenID Connect issuers: the
    ``AuthenticationConfiguration`` of a ConfigMap the control plane's file is copied
    from (`modules.k8s.site.oidc`)."""
    prefixes: set[str] = set()
    for config in stack.of_type(CONFIGMAP_TYPE):
        data = config.props.get("data")
        for text in data.values() if isinstance(data, Mapping) else ():
            if not isinstance(text, str) or AUTHENTICATION_CONFIGURATION not in text:
                continue
            try:
                document = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            if not isinstance(document, Mapping):
                continue
            if document.get("kind") != AUTHENTICATION_CONFIGURATION:
                continue
            for issuer in as_list(document.get("jwt")):
                prefix = dig(issuer, "claimMappings", "groups", "prefix")
                if isinstance(prefix, str) and prefix:
                    prefixes.add(prefix)
    return prefixes


@stack_rule("k8s-team-has-a-way-in")
def team_has_a_way_in(stack: StackView, settings: Settings) -> StackFindings:
    deferred = Deferred()
    mapped, unknown = _mapped_groups(stack)
    prefixes = _oidc_group_prefixes(stack)
    for binding, team, groups in _team_grants(stack):
        if any(g in mapped or any(g.startswith(p) for p in prefixes) for g in groups):
            continue
        with deferred.each():
            for value, path in unknown:
                known(value, path)  # an entry whose groups are not known may be the way in
            yield (
                binding.urn,
                f"team {team}: no one can sign in to its namespace {team_namespace(team)}: "
                f"none of its groups ({', '.join(groups)}) "
                "is given by an EKS access entry or by the API server's OpenID Connect "
                "issuer",
            )
    deferred.finish()
