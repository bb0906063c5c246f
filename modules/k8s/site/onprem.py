"""Settings only an existing on-premises cluster needs (config key
``uae-gpu-platform:onprem``). Nothing here creates an AWS resource."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from modules.k8s.site.oidc import OidcSpec
from modules.validation import Checker

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def is_dns_subdomain(value: str) -> bool:
    return bool(_DNS_SUBDOMAIN.match(value))


@dataclass(frozen=True)
class OnPremSpec:
    """An existing on-premises cluster.

    Args:
        storage_class: the cluster's StorageClass for platform volumes (Prometheus and
            Alertmanager data). Required; it should encrypt at rest, which this layer
            cannot check on premises.
        checkpoint_storage_class: StorageClass of the team checkpoint volumes (default:
            ``storage_class``). Multi-node jobs need a shared file system class.
        checkpoint_access_mode: ``ReadWriteMany`` (default; every rank of a multi-node job
            writes its shard) or ``ReadWriteOnce`` (single-node jobs only).
        install_gpu_driver: let the GPU Operator install the NVIDIA driver as a container
            (default true); false where the nodes have a host driver.
        install_container_toolkit: let the GPU Operator configure the NVIDIA Container
            Toolkit in containerd (default true).
        egress_cidrs: extra destinations (IPv4 CIDRs) team pods may reach on port 443, such
            as the site's object store (default none).
        api_server_cidrs: the API server's addresses (IPv4 CIDRs, e.g. the control-plane
            nodes or their load balancer). Required: every namespace of the platform
            denies egress by default, and its operators reach the API server only
            there; the API server's calls to admission webhooks come from there too.
        node_cidrs: the nodes' addresses, control-plane nodes included (IPv4 CIDRs).
            Required: Prometheus scrapes the kubelets, node exporters and the control
            plane's components there.
        oidc: the API server's OpenID Connect settings (`OidcSpec`): how people sign in,
            and which identity-provider group each team is; ``null`` for none.
        registry: a registry in the country holding mirrors of the cluster add-ons'
            images under their upstream repository paths (the GPU and Network
            Operators', Kueue's, the monitoring stack's, OpenCost's; docs/kubernetes.md);
            ``host[:port][/path]``. Default empty: their upstream registries, which the
            review's advisory image rule lists.
    """

    storage_class: str
    checkpoint_storage_class: str = ""
    checkpoint_access_mode: Literal["ReadWriteOnce", "ReadWriteMany"] = "ReadWriteMany"
    install_gpu_driver: bool = True
    install_container_toolkit: bool = True
    egress_cidrs: tuple[str, ...] = ()
    api_server_cidrs: tuple[str, ...] = ()
    node_cidrs: tuple[str, ...] = ()
    oidc: OidcSpec | None = None
    registry: str = ""

    def __post_init__(self) -> None:
        check = Checker()
        check.registry("registry", self.registry or None)
        check.require(
            is_dns_subdomain(self.storage_class),
            "storage_class",
            self.storage_class,
            "name an existing StorageClass (lowercase DNS name)",
        )
        check.require(
            self.checkpoint_storage_class == "" or is_dns_subdomain(self.checkpoint_storage_class),
            "checkpoint_storage_class",
            self.checkpoint_storage_class,
            "name an existing StorageClass (lowercase DNS name), or leave empty",
        )
        check.one_of(
            "checkpoint_access_mode",
            self.checkpoint_access_mode,
            ("ReadWriteOnce", "ReadWriteMany"),
        )
        for name in ("egress_cidrs", "api_server_cidrs", "node_cidrs"):
            for key, cidr, network in check.ipv4_networks(name, getattr(self, name)):
                check.require(network.prefixlen > 0, key, cidr, "0.0.0.0/0 is not allowed")
        check.require(
            bool(self.api_server_cidrs),
            "api_server_cidrs",
            [],
            "list the API server's addresses (e.g. 10.20.0.10/32): every platform namespace "
            "denies egress by default and reaches the API server only there",
        )
        check.require(
            bool(self.node_cidrs),
            "node_cidrs",
            [],
            "list the nodes' addresses (e.g. 10.20.0.0/22): Prometheus scrapes the kubelets "
            "and node exporters there",
        )
        check.done()

    @property
    def checkpoint_class(self) -> str:
        """The StorageClass of checkpoint volumes."""
        return self.checkpoint_storage_class or self.storage_class
