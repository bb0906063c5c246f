"""The on-premises API server's audit-log policy: typed, pure, validated.

An EKS control plane sends its audit log to CloudWatch (`modules.aws.cluster`); an
on-premises site's kube-apiserver writes its own, under the policy its operator gives
it. The site's stack file declares that policy (config key ``apiAudit``); the platform
validates it, renders it as an ``audit.k8s.io/v1`` Policy and ships it, with the
kube-apiserver flags that use it, to the site's cluster (a ConfigMap in
``kube-system``, `modules.k8s.site_audit.component`): the control-plane nodes' copy is
made from there (docs/fleet.md, "The site's API audit log").

Validation is in two parts:

* the upstream API server's own checks of a Policy, ported from Kubernetes'
  ``staging/src/k8s.io/apiserver/pkg/apis/audit/validation/validation.go`` (commit
  15816b382ef2b81bd376fc2492062a8216e0a490): valid levels and stages, non-resource URLs
  that begin with ``/`` and end any ``*``, valid API group names, ``resourceNames``
  only with ``resources``, never non-resource URLs together with resources or
  namespaces (`policy_errors`);
* the platform's: every request is logged (the last rule is a catch-all at
  ``Metadata`` or above), and no rule records request or response bodies of objects
  that carry credentials (secrets, configmaps, service-account tokens, token reviews):
  a rule at ``Request`` or ``RequestResponse`` lists its resources, without wildcards
  and without those.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from modules.validation import Checker, bounded

LEVELS = ("None", "Metadata", "Request", "RequestResponse")
STAGES = ("RequestReceived", "ResponseStarted", "ResponseComplete", "Panic")
#: Objects whose bodies hold credentials: logged at Metadata at most.
CREDENTIAL_RESOURCES = {
    "": ("secrets", "configmaps", "serviceaccounts/token"),
    "authentication.k8s.io": ("tokenreviews",),
}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def policy_errors(document: Mapping[str, Any]) -> list[str]:
    """The upstream API server's validation of an audit Policy (see the module doc),
    one message per problem, each naming its field path (``rules[2].level``)."""
    errors = []
    if document.get("apiVersion") != "audit.k8s.io/v1" or document.get("kind") != "Policy":
        errors.append("apiVersion/kind: expected audit.k8s.io/v1 Policy")
    for name in document.get("omitStages") or ():
        if name not in STAGES:
            errors.append(f"omitStages: {name!r}; allowed stages are {','.join(STAGES)}")
    for i, rule in enumerate(document.get("rules") or ()):
        path = f"rules[{i}]"
        level = rule.get("level", "")
        if level == "":
            errors.append(f"{path}.level: Required value")
        elif level not in LEVELS:
            errors.append(f"{path}.level: Unsupported value {level!r}: {', '.join(LEVELS)}")
        for j, url in enumerate(rule.get("nonResourceURLs") or ()):
            if url == "*":
                continue
            if not url.startswith("/"):
                errors.append(
                    f"{path}.nonResourceURLs[{j}]: {url!r}; non-resource URL rules must "
                    "begin with a '/' character"
                )
            if url and "*" in url[:-1]:
                errors.append(
                    f"{path}.nonResourceURLs[{j}]: {url!r}; non-resource URL wildcards '*' "
                    "must be the final character of the rule"
                )
        for group in rule.get("resources") or ():
            name = group.get("group", "")
            if name and (len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
                errors.append(f"{path}.resources.group: {name!r}; not a DNS-1123 subdomain")
            if group.get("resourceNames") and not group.get("resources"):
                errors.append(
                    f"{path}.resources.resourceNames: using resourceNames requires at "
                    "least one resource"
                )
        for j, stage in enumerate(rule.get("omitStages") or ()):
            if stage not in STAGES:
                errors.append(
                    f"{path}.omitStages[{j}]: {stage!r}; allowed stages are {','.join(STAGES)}"
                )
        if rule.get("nonResourceURLs") and (rule.get("resources") or rule.get("namespaces")):
            errors.append(
                f"{path}.nonResourceURLs: rules cannot apply to both regular resources and "
                "non-resource URLs"
            )
    return errors


@dataclass(frozen=True)
class GroupResourcesSpec:
    """Resources of one API group a rule matches (an audit ``GroupResources``).

    Args:
        group: the API group (empty: the core group).
        resources: resources and subresources (``pods``, ``pods/log``); empty: all.
        resource_names: names of instances; needs ``resources``.
    """

    group: str = ""
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        out: dict[str, Any] = {"group": self.group}
        if self.resources:
            out["resources"] = list(self.resources)
        if self.resource_names:
            out["resourceNames"] = list(self.resource_names)
        return out


@dataclass(frozen=True)
class AuditRuleSpec:
    """One rule of the policy (an audit ``PolicyRule``; the first rule a request matches
    decides its level).

    Args:
        level: ``None``, ``Metadata``, ``Request`` or ``RequestResponse``.
        users: user names it applies to (empty: everyone).
        user_groups: groups it applies to (empty: every group).
        verbs: verbs it applies to (empty: every verb).
        resources: API resources it applies to (`GroupResourcesSpec`; empty: all).
        namespaces: namespaces it applies to (``""``: cluster-scoped objects).
        non_resource_urls: URL paths (``/healthz*``); never with resources or namespaces.
        omit_stages: stages for which no event is written.
    """

    level: str
    users: tuple[str, ...] = ()
    user_groups: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resources: tuple[GroupResourcesSpec, ...] = ()
    namespaces: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()
    omit_stages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check = Checker()
        policy = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [self.document()]}
        for message in policy_errors(policy):
            where, _, problem = message.partition(": ")
            name = where.removeprefix("rules[0].").split(".")[0].split("[")[0]
            attribute = _ATTRIBUTES.get(name, name)
            check.require(False, attribute, getattr(self, attribute, None), problem)
        check.done()

    @property
    def catch_all(self) -> bool:
        """Matches every request (no user, group, verb, resource, namespace or URL)."""
        return not (
            self.users
            or self.user_groups
            or self.verbs
            or self.resources
            or self.namespaces
            or self.non_resource_urls
        )

    def document(self) -> dict[str, Any]:
        out: dict[str, Any] = {"level": self.level}
        for key, value in (
            ("users", self.users),
            ("userGroups", self.user_groups),
            ("verbs", self.verbs),
            ("namespaces", self.namespaces),
            ("nonResourceURLs", self.non_resource_urls),
            ("omitStages", self.omit_stages),
        ):
            if value:
                out[key] = list(value)
        if self.resources:
            out["resources"] = [r.document() for r in self.resources]
        return out


#: The Policy's spelling of a field -> the dataclass attribute.
_ATTRIBUTES = {"nonResourceURLs": "non_resource_urls", "omitStages": "omit_stages"}

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")

#: The platform's policy: no noise from health checks and kube-proxy's watches;
#: credentials' metadata only; bodies of RBAC changes and of what teams create; the
#: metadata of everything else.
DEFAULT_RULES = (
    AuditRuleSpec(
        level="None",
        users=("system:kube-proxy",),
        verbs=("watch",),
        resources=(GroupResourcesSpec("", ("endpoints", "services", "services/status")),),
    ),
    AuditRuleSpec(level="None", non_resource_urls=("/healthz*", "/livez*", "/readyz*", "/version")),
    AuditRuleSpec(level="None", resources=(GroupResourcesSpec("", ("events",)),)),
    AuditRuleSpec(
        level="Metadata",
        resources=(
            GroupResourcesSpec("", CREDENTIAL_RESOURCES[""]),
            GroupResourcesSpec(
                "authentication.k8s.io", CREDENTIAL_RESOURCES["authentication.k8s.io"]
            ),
        ),
    ),
    AuditRuleSpec(
        level="RequestResponse",
        verbs=WRITE_VERBS,
        resources=(
            GroupResourcesSpec(
                "rbac.authorization.k8s.io",
                ("roles", "rolebindings", "clusterroles", "clusterrolebindings"),
            ),
        ),
    ),
    AuditRuleSpec(
        level="Request",
        verbs=WRITE_VERBS,
        resources=(
            GroupResourcesSpec("", ("pods", "services", "namespaces", "persistentvolumeclaims")),
            GroupResourcesSpec("batch", ("jobs",)),
            GroupResourcesSpec("kueue.x-k8s.io", ("workloads", "localqueues", "clusterqueues")),
        ),
    ),
    AuditRuleSpec(level="Metadata"),
)


def _credential_bodies(rule: AuditRuleSpec) -> list[str]:
    """Why ``rule`` could record a credential's body, or nothing."""
    if LEVELS.index(rule.level) < LEVELS.index("Request") or rule.non_resource_urls:
        return []
    if not rule.resources:
        return ["it lists no resources, so it matches secrets"]
    problems = []
    for group in rule.resources:
        if not group.resources or any("*" in r for r in group.resources):
            problems.append(f"group {group.group or 'core'!r} with all or wildcard resources")
        for name in CREDENTIAL_RESOURCES.get(group.group, ()):
            if name in group.resources:
                problems.append(f"{name} in group {group.group or 'core'!r}")
    return problems


@dataclass(frozen=True)
class ApiAuditSpec:
    """The site's API audit log (config key ``apiAudit``, on-premises stacks).

    Args:
        rules: the policy's rules, in order (`AuditRuleSpec`; default: the platform's
            `DEFAULT_RULES`).
        omit_stages: stages no event is written for (default ``RequestReceived``: each
            request is logged once it completes).
        omit_managed_fields: leave managed fields out of logged bodies (default true).
        policy_path: where the control-plane nodes keep the policy file (the
            ``--audit-policy-file`` flag; default ``/etc/kubernetes/audit/policy.yaml``).
        log_path: the audit log on the control-plane nodes (``--audit-log-path``).
        max_age_days: days rotated logs are kept on the node (default 30).
        max_backups: rotated files kept (default 10).
        max_size_mib: size at which the log rotates, MiB (default 100).
    """

    rules: tuple[AuditRuleSpec, ...] = DEFAULT_RULES
    omit_stages: tuple[str, ...] = ("RequestReceived",)
    omit_managed_fields: bool = True
    policy_path: str = "/etc/kubernetes/audit/policy.yaml"
    log_path: str = "/var/log/kubernetes/audit/audit.log"
    max_age_days: int = bounded(1, 3650, default=30)
    max_backups: int = bounded(1, 1000, default=10)
    max_size_mib: int = bounded(1, 10_000, default=100)

    def __post_init__(self) -> None:
        check = Checker()
        for i, stage in enumerate(self.omit_stages):
            check.require(
                stage in STAGES, f"omit_stages[{i}]", stage, f"one of {', '.join(STAGES)}"
            )
        check.require(bool(self.rules), "rules", [], "list the policy's rules")
        if self.rules:
            last = self.rules[-1]
            check.require(
                last.catch_all and last.level != "None",
                f"rules[{len(self.rules) - 1}]",
                last.document(),
                "the last rule must match every request at Metadata or above, so that "
                "every request is logged",
            )
        for i, rule in enumerate(self.rules):
            for why in _credential_bodies(rule):
                check.require(
                    False,
                    f"rules[{i}].level",
                    rule.level,
                    f"would record credential bodies ({why}): log secrets, configmaps, "
                    "service-account tokens and token reviews at Metadata, and list the "
                    "resources of Request/RequestResponse rules",
                )
        for name in ("policy_path", "log_path"):
            value = getattr(self, name)
            check.require(
                value.startswith("/") and " " not in value,
                name,
                value,
                "an absolute path on the control-plane nodes",
            )
        check.ranges(self)
        check.done()

    def document(self) -> dict[str, Any]:
        """The ``audit.k8s.io/v1`` Policy."""
        policy: dict[str, Any] = {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "rules": [rule.document() for rule in self.rules],
        }
        if self.omit_stages:
            policy["omitStages"] = list(self.omit_stages)
        if self.omit_managed_fields:
            policy["omitManagedFields"] = True
        return policy

    def apiserver_flags(self) -> tuple[str, ...]:
        """The kube-apiserver flags that apply the policy and keep its log."""
        return (
            f"--audit-policy-file={self.policy_path}",
            f"--audit-log-path={self.log_path}",
            "--audit-log-format=json",
            f"--audit-log-maxage={self.max_age_days}",
            f"--audit-log-maxbackup={self.max_backups}",
            f"--audit-log-maxsize={self.max_size_mib}",
        )


def flag_values(flags: Sequence[str]) -> dict[str, str]:
    """``--name=value`` flags as a mapping (for checks and the docs)."""
    return dict(f.removeprefix("--").split("=", 1) for f in flags)
