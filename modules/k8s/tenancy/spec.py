"""Teams: one namespace each, fenced in.

A team (one entry under ``uae-gpu-platform:teams``) gets the namespace ``team-<name>``
with Pod Security Admission labels, a ResourceQuota (the hard ceiling of what Kueue may
admit for it, plus quotas that keep it below its highest allowed priority), a
LimitRange (defaults for pods that set no requests), a default-deny NetworkPolicy with
the few allowances training needs, an edit RoleBinding for the team's group, the
``trainer`` ServiceAccount and a checkpoint volume claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import pulumi

from modules.k8s import rbac
from modules.k8s.common import Manifest, metadata, namespace
from modules.k8s.names import (
    KUBE_SYSTEM,
    METRICS_PORT_NAME,
    MONITORING_NAMESPACE,
    PRIORITY_CLASSES,
    TEAM_LABEL,
    TRAINER_SERVICE_ACCOUNT,
    team_group,
    team_namespace,
)
from modules.k8s.site.eks import EksInputs
from modules.k8s.site.oidc import OidcSpec
from modules.k8s.site.onprem import OnPremSpec
from modules.k8s.tenancy.quotas import GPU_RESOURCE, namespace_ceiling
from modules.pools import NodePoolProfile
from modules.validation import Checker, TextFormat, bounded

_TEAM_NAME = TextFormat(
    r"^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$",
    "use up to 30 lowercase letters, digits and dashes, starting with a letter",
)

#: Link-local address of the EKS Pod Identity agent (a node daemon): pods fetch their
#: team role's credentials from it over HTTP.
POD_IDENTITY_AGENT_CIDR = "169.254.170.23/32"
POD_IDENTITY_AGENT_PORT = 80

PriorityName = Literal["production", "research", "preemptible"]


@dataclass(frozen=True)
class TeamSpec:
    """A team of the platform (one entry of ``uae-gpu-platform:teams``).

    Args:
        name: team name, lowercase letters, digits and dashes (up to 30); the namespace
            is ``team-<name>`` and the Kubernetes group ``team:<name>``.
        gpu_quota: GPUs guaranteed to the team on each GPU pool (default 0), with the
            matching share of those nodes' vCPUs and memory.
        cpu_quota: vCPUs guaranteed on each CPU pool (preprocess, cpu-training; default 0).
        memory_quota_gib: memory in GiB guaranteed on each CPU pool (default 0).
        borrow_limit_percent: how much more than its quotas the team may borrow from
            other teams' idle quota, in percent of each quota (default 0: none; 100
            doubles it). Borrowed capacity is reclaimed by preemption when its owner
            needs it.
        fair_share_weight: the team's weight when idle capacity is shared (default 1).
        max_priority: the highest PriorityClass the team may use: ``production``,
            ``research`` (default) or ``preemptible``.
        checkpoint_storage_gib: size of the team's checkpoint volume (default 500).
        max_pods: most pods the namespace may hold at once (default 200).
        pod_security: Pod Security level enforced on the namespace: ``restricted``
            (default) or ``baseline``. Only on stacks with an EFA or InfiniBand pool, for
            images that need the container runtime's default capabilities, e.g. MPI
            launchers that start sshd as root to reach the other ranks over the fabric.
    """

    name: str
    gpu_quota: int = bounded(0, 100_000, default=0)
    cpu_quota: int = bounded(0, 100_000, default=0)
    memory_quota_gib: int = bounded(0, 100_000, default=0)
    borrow_limit_percent: int = 0
    fair_share_weight: int = 1
    max_priority: PriorityName = "research"
    checkpoint_storage_gib: int = 500
    max_pods: int = 200
    pod_security: Literal["restricted", "baseline"] = "restricted"

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("name", self.name, _TEAM_NAME)
        check.ranges(self)
        check.within(
            "borrow_limit_percent", self.borrow_limit_percent, 0, 1000, "percent of each quota"
        )
        check.within("fair_share_weight", self.fair_share_weight, 1, 1000)
        check.one_of("max_priority", self.max_priority, tuple(PRIORITY_CLASSES))
        check.within("checkpoint_storage_gib", self.checkpoint_storage_gib, 1, 1_000_000)
        check.within("max_pods", self.max_pods, 1, 10_000)
        check.one_of(
            "pod_security",
            self.pod_security,
            ("restricted", "baseline"),
            "privileged is never allowed for a team",
        )
        check.done()

    @property
    def allowed_priorities(self) -> tuple[str, ...]:
        """PriorityClasses the team may use, highest first."""
        names = list(PRIORITY_CLASSES)
        return tuple(names[names.index(self.max_priority) :])


def team_namespace_manifest(team: TeamSpec, kubernetes_version: str) -> Manifest:
    """The team namespace with its Pod Security level."""
    reason = ""
    if team.pod_security == "baseline":
        # Chosen per team in config (allowed only on fabric stacks): images such as MPI
        # launchers start sshd as root to reach the other ranks over EFA/InfiniBand, which
        # `restricted` (non-root, all capabilities dropped) refuses. Still no privileged
        # pods, host namespaces or hostPath volumes.
        reason = "team config: fabric images need root or default capabilities (e.g. MPI sshd)"
    return namespace(
        team_namespace(team.name),
        team.pod_security,
        kubernetes_version,
        reason=reason,
        labels={TEAM_LABEL: team.name},
    )


def resource_quotas(team: TeamSpec, pools: Sequence[NodePoolProfile]) -> list[Manifest]:
    """The namespace's hard ceiling, and quotas that forbid priorities above the team's."""
    ns = team_namespace(team.name)
    ceiling = namespace_ceiling(team, pools)
    quotas: list[Manifest] = [
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": metadata("team-quota", ns),
            "spec": {
                "hard": {
                    "requests.cpu": str(ceiling.cpu),
                    "requests.memory": f"{ceiling.memory_gib}Gi",
                    f"requests.{GPU_RESOURCE}": str(ceiling.gpus),
                    "pods": str(team.max_pods),
                    "persistentvolumeclaims": "10",
                }
            },
        }
    ]
    forbidden = [p for p in PRIORITY_CLASSES if p not in team.allowed_priorities]
    if forbidden:
        # A pod at a priority above the team's maximum matches this quota of zero pods
        # and is refused at admission.
        quotas.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": metadata("forbidden-priorities", ns),
                "spec": {
                    "hard": {"pods": "0"},
                    "scopeSelector": {
                        "matchExpressions": [
                            {"scopeName": "PriorityClass", "operator": "In", "values": forbidden}
                        ]
                    },
                },
            }
        )
    return quotas


def limit_range(team: TeamSpec) -> Manifest:
    """Defaults for containers that set no requests (the quota requires requests)."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": metadata("container-defaults", team_namespace(team.name)),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "defaultRequest": {"cpu": "250m", "memory": "512Mi"},
                    # No default CPU limit: CPU limits throttle data loaders for nothing.
                    "default": {"memory": "4Gi"},
                }
            ]
        },
    }


def _policy(ns: str, name: str, spec: Manifest) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name, ns),
        "spec": spec,
    }


def network_policies(
    team: TeamSpec,
    vpc_cidr: pulumi.Input[str] | None = None,
    extra_egress_cidrs: Sequence[str] = (),
) -> list[Manifest]:
    """Default deny, then: DNS, traffic between the namespace's own pods (the ranks of a
    job talk to each other on many ports), scraping of the ``metrics`` port from the
    monitoring namespace, and on EKS the Pod Identity agent and HTTPS to the VPC (its
    interface endpoints: S3, ECR, STS...). ``extra_egress_cidrs`` opens HTTPS to more
    destinations (on premises: the site's object store)."""
    ns = team_namespace(team.name)
    same_namespace: list[Manifest] = [{"podSelector": {}}]
    policies = [
        _policy(ns, "default-deny-all", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _policy(
            ns,
            "allow-dns",
            {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"kubernetes.io/metadata.name": KUBE_SYSTEM}
                                },
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                            }
                        ],
                        "ports": [
                            {"protocol": "UDP", "port": 53},
                            {"protocol": "TCP", "port": 53},
                        ],
                    }
                ],
            },
        ),
        _policy(
            ns,
            "allow-same-namespace",
            {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": same_namespace}],
                "egress": [{"to": same_namespace}],
            },
        ),
        _policy(
            ns,
            "allow-metrics-scrape",
            {
                "podSelector": {},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {
                                        "kubernetes.io/metadata.name": MONITORING_NAMESPACE
                                    }
                                }
                            }
                        ],
                        "ports": [{"protocol": "TCP", "port": METRICS_PORT_NAME}],
                    }
                ],
            },
        ),
    ]
    https_destinations: list[pulumi.Input[str]] = []
    if vpc_cidr is not None:
        https_destinations.append(vpc_cidr)
        policies.append(
            _policy(
                ns,
                "allow-pod-identity-agent",
                {
                    "podSelector": {},
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT_CIDR}}],
                            "ports": [{"protocol": "TCP", "port": POD_IDENTITY_AGENT_PORT}],
                        }
                    ],
                },
            )
        )
    https_destinations.extend(extra_egress_cidrs)
    if https_destinations:
        policies.append(
            _policy(
                ns,
                "allow-https-endpoints",
                {
                    "podSelector": {},
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [{"ipBlock": {"cidr": cidr}} for cidr in https_destinations],
                            "ports": [{"protocol": "TCP", "port": 443}],
                        }
                    ],
                },
            )
        )
    return policies


def team_rbac(team: TeamSpec, oidc: OidcSpec | None = None) -> list[Manifest]:
    """The team's group may edit its own namespace (the built-in ``edit`` role through a
    RoleBinding: no cluster-wide rights, no RBAC or quota changes) and read its queue.

    The group is ``team:<name>`` (on EKS an access entry maps the team's IAM role to
    it); on premises with OpenID Connect also the team's identity-provider group as the
    API server names it (``<groupsPrefix><group>``)."""
    ns = team_namespace(team.name)
    team_groups = [team_group(team.name)]
    if oidc is not None:
        team_groups.append(oidc.team_group(team.name))
    subjects = rbac.groups(team_groups)
    queue_reading = {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["localqueues", "workloads"],
        "verbs": ["get", "list", "watch"],
    }
    return [
        rbac.role_binding(metadata("team-edit", ns), "edit", subjects, role_kind="ClusterRole"),
        rbac.role(metadata("queue-viewer", ns), [queue_reading]),
        rbac.role_binding(metadata("team-queue-viewer", ns), "queue-viewer", subjects),
    ]


def trainer_service_account(team: TeamSpec) -> Manifest:
    """The ``trainer`` ServiceAccount. Training pods do not talk to the Kubernetes API,
    so no API token is mounted; EKS Pod Identity injects its own credentials token."""
    meta = metadata(TRAINER_SERVICE_ACCOUNT, team_namespace(team.name))
    return rbac.service_account(meta, mount_token=False)


class TenancyArgs(Protocol):
    """What `team_manifests` reads of the platform's arguments: the pools (quotas) and
    the networks a team may reach (`modules.k8s.platform.spec.KubernetesPlatformArgs`
    provides it; a Protocol, so this module does not import the aggregate that imports
    `TeamSpec` from here)."""

    @property
    def pools(self) -> tuple[NodePoolProfile, ...]: ...

    @property
    def eks(self) -> EksInputs | None: ...

    @property
    def onprem(self) -> OnPremSpec | None: ...


def team_manifests(team: TeamSpec, args: TenancyArgs) -> list[Manifest]:
    """Everything inside a team namespace except its queue and checkpoint volume."""
    vpc_cidr = args.eks.vpc_cidr if args.eks is not None else None
    extra = args.onprem.egress_cidrs if args.onprem is not None else ()
    oidc = args.onprem.oidc if args.onprem is not None else None
    return [
        *resource_quotas(team, args.pools),
        limit_range(team),
        *network_policies(team, vpc_cidr, extra),
        *team_rbac(team, oidc),
        trainer_service_account(team),
    ]
