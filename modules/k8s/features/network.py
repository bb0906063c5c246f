"""The feature store's NetworkPolicies (pure): default deny in ``feast``, then exactly the
paths its pods need, and the allowances it adds to the ``mlflow`` and ``cnpg-system``
namespaces. Kept apart from `spec` (which the features environment's tests import, and
which therefore imports no Pulumi).
"""

from __future__ import annotations

import pulumi

from modules.aws.online_store.spec import REDIS_PORT
from modules.k8s import netpol
from modules.k8s.features.spec import (
    MATERIALIZE_NAME,
    NAMESPACE,
    ONLINE_RELEASE,
    PROXY_NAME,
    PROXY_PORT,
    REGISTRY_CLUSTER,
    REGISTRY_INIT_NAME,
    REGISTRY_PORT,
    SERVER_CONTAINER_PORT,
    SERVER_NAME,
    TRACKING_NAMESPACE,
    FeaturesSpec,
    Manifest,
)
from modules.k8s.tenancy.spec import POD_IDENTITY_AGENT_CIDR, POD_IDENTITY_AGENT_PORT
from modules.k8s.tracking.manifests import (
    CNPG_CLUSTER_LABEL,
    CNPG_NAMESPACE,
    CNPG_OPERATOR_LABELS,
    CNPG_STATUS_PORT,
)

#: The pods of the registry's CloudNativePG cluster and of the Valkey release (the
#: operator's and the chart's labels).
REGISTRY_POD_LABELS = {CNPG_CLUSTER_LABEL: REGISTRY_CLUSTER}
ONLINE_POD_LABELS = {"app.kubernetes.io/instance": ONLINE_RELEASE}


def _named(*names: str) -> Manifest:
    """A pod selector: pods whose ``app.kubernetes.io/name`` is one of ``names``."""
    return {
        "matchExpressions": [
            {"key": "app.kubernetes.io/name", "operator": "In", "values": list(names)}
        ]
    }


def network_policies(
    spec: FeaturesSpec,
    network: netpol.ClusterNetwork,
    vpc_cidr: pulumi.Input[str] | None = None,
) -> list[Manifest]:
    """Default deny (ingress and egress) in ``feast``, then exactly the paths that are
    needed: clients -> proxy (TLS) -> feature server; the proxy -> the API server (token
    and access reviews); the feature server and the materialisation -> the registry
    database and the online store. On AWS (``vpc_cidr`` given) both stores are in the
    VPC (RDS, ElastiCache) and the materialisation also reaches the S3 and STS endpoints
    in it over HTTPS and the Pod Identity agent; on premises the stores are the
    namespace's own CloudNativePG and Valkey pods, which accept only those clients (and
    CloudNativePG's operator), and the database's instances reach each other and the
    API server."""
    ns = NAMESPACE
    proxy = {"app.kubernetes.io/name": PROXY_NAME}
    server = {"app.kubernetes.io/name": SERVER_NAME}
    store_clients = _named(SERVER_NAME, MATERIALIZE_NAME)
    if vpc_cidr is not None:
        stores = netpol.cidr_peers([vpc_cidr])
        store_egress = [{"to": stores, "ports": netpol.tcp(REGISTRY_PORT, REDIS_PORT)}]
    else:
        store_egress = [
            {
                "to": [netpol.same_namespace_peer(REGISTRY_POD_LABELS)],
                "ports": netpol.tcp(REGISTRY_PORT),
            },
            {
                "to": [netpol.same_namespace_peer(ONLINE_POD_LABELS)],
                "ports": netpol.tcp(REDIS_PORT),
            },
        ]
    policies: list[Manifest] = [
        *netpol.baseline(ns, network, api_server=False),
        netpol.policy(
            ns,
            "feast-endpoint",
            {
                "podSelector": netpol.pods(proxy),
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [
                    {
                        "from": [netpol.namespace_peer(n) for n in spec.client_namespaces],
                        "ports": netpol.tcp(PROXY_PORT),
                    }
                ]
                if spec.client_namespaces
                else [],
                "egress": [
                    {
                        "to": [netpol.same_namespace_peer(server)],
                        "ports": netpol.tcp(SERVER_CONTAINER_PORT),
                    },
                    {
                        "to": netpol.cidr_peers(network.api_server_cidrs),
                        "ports": netpol.tcp(*netpol.API_SERVER_PORTS),
                    },
                ],
            },
        ),
        netpol.allow_ingress(
            ns,
            "feast-feature-server",
            [netpol.same_namespace_peer(proxy)],
            netpol.tcp(SERVER_CONTAINER_PORT),
            pod_labels=server,
        ),
        netpol.policy(
            ns,
            "feast-stores",
            {
                "podSelector": store_clients,
                "policyTypes": ["Egress"],
                "egress": store_egress,
            },
        ),
    ]
    if vpc_cidr is not None:
        policies.append(
            netpol.policy(
                ns,
                "feast-materialize-aws",
                {
                    "podSelector": netpol.pods({"app.kubernetes.io/name": MATERIALIZE_NAME}),
                    "policyTypes": ["Egress"],
                    "egress": [
                        {"to": netpol.cidr_peers([vpc_cidr]), "ports": netpol.tcp(443)},
                        {
                            "to": netpol.cidr_peers([POD_IDENTITY_AGENT_CIDR]),
                            "ports": netpol.tcp(POD_IDENTITY_AGENT_PORT),
                        },
                    ],
                },
            )
        )
        return policies
    clients = {"podSelector": store_clients}
    policies += [
        netpol.allow_ingress(
            ns,
            "feast-online-store",
            [clients],
            netpol.tcp(REDIS_PORT),
            pod_labels=ONLINE_POD_LABELS,
        ),
        netpol.policy(
            ns,
            "feast-registry-database",
            {
                "podSelector": netpol.pods(REGISTRY_POD_LABELS),
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [
                    {
                        "from": [clients, netpol.same_namespace_peer(REGISTRY_POD_LABELS)],
                        "ports": netpol.tcp(REGISTRY_PORT),
                    },
                    # CloudNativePG's operator talks to each instance's manager and to
                    # PostgreSQL.
                    {
                        "from": [netpol.namespace_peer(CNPG_NAMESPACE)],
                        "ports": netpol.tcp(CNPG_STATUS_PORT, REGISTRY_PORT),
                    },
                ],
                # Replication between the instances; their managers watch the API.
                "egress": [
                    {
                        "to": [netpol.same_namespace_peer(REGISTRY_POD_LABELS)],
                        "ports": netpol.tcp(REGISTRY_PORT, CNPG_STATUS_PORT),
                    }
                ],
            },
        ),
        netpol.allow_api_server(
            ns, network, pod_labels=REGISTRY_POD_LABELS, name="feast-registry-api-server"
        ),
    ]
    return policies


def operator_egress_policy() -> Manifest:
    """On premises, in CloudNativePG's namespace (default deny): its operator reaches the
    registry's instances (their manager and PostgreSQL), as it reaches the tracking
    database's."""
    return netpol.allow_egress(
        CNPG_NAMESPACE,
        "allow-feast-registry",
        [netpol.namespace_peer(NAMESPACE, REGISTRY_POD_LABELS)],
        netpol.tcp(CNPG_STATUS_PORT, REGISTRY_PORT),
        pod_labels=CNPG_OPERATOR_LABELS,
    )


def registry_init_policy(vpc_cidr: pulumi.Input[str]) -> Manifest:
    """On AWS, in the ``mlflow`` namespace (default deny): the registry's init Job reaches
    the tracking RDS instance in the VPC, and nothing else."""
    return netpol.allow_egress(
        TRACKING_NAMESPACE,
        REGISTRY_INIT_NAME,
        netpol.cidr_peers([vpc_cidr]),
        netpol.tcp(REGISTRY_PORT),
        pod_labels={"app.kubernetes.io/name": REGISTRY_INIT_NAME},
    )
