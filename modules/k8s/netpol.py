"""NetworkPolicies every namespace of the platform is built from.

Every namespace the platform creates denies all ingress and egress by default
(`default_deny`, the object the policy rule ``k8s-namespace-default-deny`` looks for),
then allows exactly what its pods need: DNS to kube-dns, the API server (operators,
controllers and sidecars that watch objects), Prometheus' scrape from the
``monitoring`` namespace, the API server's calls to admission webhooks and aggregated
APIs, and the ports a service's own pods use between themselves. The services build
their allowances from these pieces in their own pure modules.

Where the API server and the nodes are is the cluster's (`ClusterNetwork`): on EKS the
VPC (the private endpoint's network interfaces and the nodes are in it), on premises
the addresses the site declares (``onprem.apiServerCidrs``, ``onprem.nodeCidrs``).
Traffic between a pod and the kubelet of its own node (probes, ``kubectl
port-forward``) is always allowed by Kubernetes, whatever the policies say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pulumi

from modules.k8s.common import Manifest, metadata
from modules.k8s.names import KUBE_SYSTEM, MONITORING_NAMESPACE

#: The name every namespace's default-deny policy has (the policy rule accepts any
#: name; tests and reviewers find it by this one).
DEFAULT_DENY = "default-deny-all"
ALLOW_DNS = "allow-dns"
ALLOW_API_SERVER = "allow-api-server"
#: The API server's ports: 443 (EKS, most distributions' load balancers) and 6443
#: (kubeadm's default on the control-plane nodes).
API_SERVER_PORTS = (443, 6443)
#: The kubelet's port (Prometheus scrapes cAdvisor and the kubelet's metrics there) and
#: the node exporter's (host network, so its address is the node's).
KUBELET_PORT = 10250
NODE_EXPORTER_PORT = 9100
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
KUBE_DNS_LABELS = {"k8s-app": "kube-dns"}


@dataclass(frozen=True)
class ClusterNetwork:
    """Where a cluster's control plane and nodes are, for policies that must name them
    by address (NetworkPolicies select pods, not the API server or the nodes).

    Args:
        api_server_cidrs: the API server's addresses (egress from operators; source
            of admission-webhook and aggregated-API calls).
        node_cidrs: the nodes' addresses (Prometheus scrapes kubelets and node
            exporters there).
    """

    api_server_cidrs: tuple[pulumi.Input[str], ...]
    node_cidrs: tuple[pulumi.Input[str], ...]


def policy(
    namespace: str, name: str, spec: Manifest, labels: Mapping[str, str] | None = None
) -> Manifest:
    """A NetworkPolicy ``name`` in ``namespace`` (with ``labels`` besides the platform's)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name, namespace, labels),
        "spec": spec,
    }


def tcp(*ports: int | str) -> list[Manifest]:
    """TCP ports (numbers or container port names)."""
    return [{"protocol": "TCP", "port": port} for port in ports]


def pods(labels: Mapping[str, str] | None = None) -> Manifest:
    """A pod selector: the pods with ``labels`` (every pod of the namespace if none)."""
    return {"matchLabels": dict(labels)} if labels else {}


def namespace_peer(name: str, pod_labels: Mapping[str, str] | None = None) -> Manifest:
    """A peer: the pods (with ``pod_labels``, else all) of namespace ``name``."""
    peer: Manifest = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}}
    if pod_labels:
        peer["podSelector"] = {"matchLabels": dict(pod_labels)}
    return peer


def namespaces_peer(names: Sequence[str]) -> Manifest:
    """A peer: every pod of the namespaces ``names`` (one selector for all of them)."""
    return {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": list(names)}
            ]
        }
    }


def same_namespace_peer(pod_labels: Mapping[str, str] | None = None) -> Manifest:
    """A peer in the policy's own namespace (its pods with ``pod_labels``, else all)."""
    return {"podSelector": pods(pod_labels)}


def cidr_peers(cidrs: Sequence[pulumi.Input[str]]) -> list[Manifest]:
    return [{"ipBlock": {"cidr": cidr}} for cidr in cidrs]


def dns_egress() -> Manifest:
    """An egress rule to kube-dns (UDP and TCP 53)."""
    return {
        "to": [namespace_peer(KUBE_SYSTEM, KUBE_DNS_LABELS)],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }


def default_deny(namespace: str) -> Manifest:
    """Deny every ingress and egress of every pod in ``namespace`` (no rules)."""
    return policy(
        namespace, DEFAULT_DENY, {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    )


def allow_dns(namespace: str) -> Manifest:
    return policy(
        namespace,
        ALLOW_DNS,
        {"podSelector": {}, "policyTypes": ["Egress"], "egress": [dns_egress()]},
    )


def allow_api_server(
    namespace: str,
    network: ClusterNetwork,
    pod_labels: Mapping[str, str] | None = None,
    name: str = ALLOW_API_SERVER,
) -> Manifest:
    """Egress to the API server from the pods with ``pod_labels`` (all if none)."""
    return allow_egress(
        namespace, name, cidr_peers(network.api_server_cidrs), tcp(*API_SERVER_PORTS), pod_labels
    )


#: A rule of a one-way policy: its peers and the ports they may use.
PeersOnPorts = tuple[Sequence[Manifest], Sequence[Manifest]]


def _one_way(
    direction: Literal["Ingress", "Egress"],
    namespace: str,
    name: str,
    rules: Sequence[PeersOnPorts],
    *,
    pod_labels: Mapping[str, str] | None,
    labels: Mapping[str, str] | None,
) -> Manifest:
    """A policy of one direction for the pods with ``pod_labels`` (all if none): each
    rule's peers (sources of ingress, destinations of egress) on its ports."""
    peer_key = "from" if direction == "Ingress" else "to"
    return policy(
        namespace,
        name,
        {
            "podSelector": pods(pod_labels),
            "policyTypes": [direction],
            direction.lower(): [
                {peer_key: list(peers), "ports": list(ports)} for peers, ports in rules
            ],
        },
        labels,
    )


def allow_ingress(
    namespace: str,
    name: str,
    peers: Sequence[Manifest],
    ports: Sequence[Manifest],
    pod_labels: Mapping[str, str] | None = None,
) -> Manifest:
    """Ingress from ``peers`` on ``ports`` to the pods with ``pod_labels`` (all if none)."""
    return _one_way(
        "Ingress", namespace, name, [(peers, ports)], pod_labels=pod_labels, labels=None
    )


def allow_egress(
    namespace: str,
    name: str,
    peers: Sequence[Manifest],
    ports: Sequence[Manifest],
    pod_labels: Mapping[str, str] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
) -> Manifest:
    """Egress to ``peers`` on ``ports`` from the pods with ``pod_labels`` (all if none)."""
    return _one_way(
        "Egress", namespace, name, [(peers, ports)], pod_labels=pod_labels, labels=labels
    )


def allow_ingress_rules(
    namespace: str,
    name: str,
    rules: Sequence[PeersOnPorts],
    pod_labels: Mapping[str, str] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
) -> Manifest:
    """Ingress to the pods with ``pod_labels`` (all if none): each rule's peers on its
    ports (``[(peers, ports), ...]``)."""
    return _one_way("Ingress", namespace, name, rules, pod_labels=pod_labels, labels=labels)


def allow_scrape(
    namespace: str,
    ports: Sequence[Manifest],
    pod_labels: Mapping[str, str] | None = None,
    name: str = "allow-metrics-scrape",
) -> Manifest:
    """Prometheus (the ``monitoring`` namespace) scrapes ``ports``."""
    return allow_ingress(namespace, name, [namespace_peer(MONITORING_NAMESPACE)], ports, pod_labels)


def allow_from_api_server(
    namespace: str,
    network: ClusterNetwork,
    ports: Sequence[Manifest],
    pod_labels: Mapping[str, str] | None = None,
    name: str = "allow-webhooks",
) -> Manifest:
    """The API server calls ``ports`` (admission webhooks, aggregated APIs)."""
    return allow_ingress(namespace, name, cidr_peers(network.api_server_cidrs), ports, pod_labels)


def allow_within(
    namespace: str,
    ports: Sequence[Manifest],
    pod_labels: Mapping[str, str] | None = None,
    name: str = "allow-own-ports",
) -> Manifest:
    """The namespace's pods reach each other's ``ports`` (ingress and egress)."""
    peer = same_namespace_peer(pod_labels)
    return policy(
        namespace,
        name,
        {
            "podSelector": pods(pod_labels),
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [peer], "ports": list(ports)}],
            "egress": [{"to": [peer], "ports": list(ports)}],
        },
    )


def baseline(namespace: str, network: ClusterNetwork, *, api_server: bool = True) -> list[Manifest]:
    """Default deny, DNS, and (unless ``api_server`` is false: pods that never call the
    API) egress to the API server from every pod of the namespace."""
    policies = [default_deny(namespace), allow_dns(namespace)]
    if api_server:
        policies.append(allow_api_server(namespace, network))
    return policies


def is_default_deny(manifest: Mapping[str, object]) -> bool:
    """Whether a NetworkPolicy manifest denies all ingress and egress of its namespace."""
    spec = manifest.get("spec")
    if manifest.get("kind") != "NetworkPolicy" or not isinstance(spec, Mapping):
        return False
    return (
        spec.get("podSelector") == {}
        and sorted(spec.get("policyTypes") or []) == ["Egress", "Ingress"]
        and not spec.get("ingress")
        and not spec.get("egress")
    )
