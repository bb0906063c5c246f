"""Key custody as the stack file declares it (the typed args of `KeyCustody`).

``custody: standard`` keeps the keys in AWS KMS's own HSMs. ``custody: hsm`` creates
every customer key of the stack in a KMS custom key store: one backed by an AWS CloudHSM
cluster in the stack's region (created by the stack, or an existing one), or an external
key store (XKS) whose proxy runs at a site in the UAE, reached through a VPC endpoint
service in the stack's region. docs/compliance.md ("Key custody") explains the
trade-offs and the steps between the stages.

What KMS requires of such keys (AWS KMS Developer Guide, "Custom key stores"): they are
symmetric encryption keys (``SYMMETRIC_DEFAULT``, ``ENCRYPT_DECRYPT``), they cannot be
multi-Region, and KMS does not rotate them automatically, so ``enable_key_rotation`` is
off for them. An external key store's KMS key is bound to one key of the external key
manager (its ``xks_key_id``).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Literal

from modules.residency import UAE_COUNTRIES
from modules.validation import Checker, TextFormat

#: The stack's key purposes (`modules.aws.kms.KEY_PURPOSES`), repeated so this module
#: stays free of Pulumi imports.
PURPOSES = ("secrets", "storage", "logs")
#: Stages of a stack whose key store is made by the stack itself (docs/compliance.md).
Stage = Literal["cluster", "key-store", "keys"]

_STORE_ID = TextFormat(
    r"^cks-[0-9a-f]{17}$", "expected a custom key store id like cks-5ebd4ef395a96288e"
)
_CLUSTER_ID = TextFormat(
    r"^cluster-[2-7a-zA-Z]{11,16}$",
    "expected a CloudHSM cluster id like cluster-jxhlf7644ne",
)
_ENDPOINT = re.compile(r"^https://[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?(:\d{1,5})?$")
# AWS KMS: the proxy URI path ends in /kms/xks/v1, after an optional prefix.
_XKS_PATH = re.compile(r"^(/[a-zA-Z0-9_.~-]+)*/kms/xks/v1$")
_ENDPOINT_SERVICE = re.compile(r"^com\.amazonaws\.vpce\.([a-z0-9-]+)\.vpce-svc-[0-9a-f]{8,17}$")
_NAME = TextFormat(r"^[a-zA-Z0-9:/_-]{1,256}$", "use letters, digits, : / _ -")
# An external key manager's key ids (KMS XksKeyId: 1-128 of a-z A-Z 0-9 - _ .).
_XKS_KEY_ID = TextFormat(r"^[a-zA-Z0-9_.-]{1,128}$", "1 to 128 letters, digits or _ . -")
_PEM = re.compile(r"^-----BEGIN CERTIFICATE-----\s.+\s-----END CERTIFICATE-----\s*$", re.S)


def endpoint_service_region(service_name: str) -> str | None:
    """The region named in a VPC endpoint service name, or None."""
    match = _ENDPOINT_SERVICE.match(service_name)
    return match.group(1) if match else None


def _is_private_cidr(value: str) -> bool:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError:
        return False
    return network.is_private


@dataclass(frozen=True)
class KeyStoreSpec:
    """The custom key store every key of the stack is created in.

    Args:
        type: ``cloudhsm`` (an AWS CloudHSM cluster) or ``external`` (an XKS proxy).
        id: an existing, connected key store (``cks-`` and 17 hex digits), e.g. the one
            the bootstrap's keys use; the stack then creates no key store of its own.
        name: the key store's name when the stack creates it (default ``gpu-<stack>``).
        cluster_id: (cloudhsm) an existing cluster in the stack's region, initialized
            and activated, with a ``kmsuser`` crypto user.
        create_cluster: (cloudhsm) the stack creates the cluster and its HSMs in its
            private subnets, one HSM per zone.
        hsm_type: (cloudhsm, created) ``hsm2m.medium`` (default) or ``hsm1.medium``.
        hsm_count: (cloudhsm, created) HSMs, one per zone: at least 2 (KMS needs two
            active HSMs in different zones), at most the VPC's zones.
        trust_anchor_certificate: (cloudhsm) the PEM certificate that signed the
            cluster's certificate (``customerCA.crt``); needed to create the key store.
        proxy_uri_endpoint: (external) ``https://<host>[:port]``, the proxy's endpoint:
            the private DNS name of the VPC endpoint service.
        proxy_uri_path: (external) the proxy's path, ending in ``/kms/xks/v1``.
        proxy_vpc_endpoint_service_name: (external) the VPC endpoint service in the
            stack's region in front of the proxy (``com.amazonaws.vpce.<region>.vpce-svc-...``);
            a public proxy endpoint is not offered.
        proxy_site: (external) the site the proxy and its key manager run at.
        proxy_country: (external) that site's country (``AE``).
        proxy_addresses: (external) the private CIDRs the endpoint resolves to at that
            site (the endpoint service's targets).
        external_key_ids: (external) the external key manager's key id (``XksKeyId``)
            for each purpose: ``secrets``, ``storage`` and ``logs``.
    """

    type: Literal["cloudhsm", "external"]
    id: str | None = None
    name: str | None = None
    cluster_id: str | None = None
    create_cluster: bool = False
    hsm_type: Literal["hsm2m.medium", "hsm1.medium"] = "hsm2m.medium"
    hsm_count: int = 2
    trust_anchor_certificate: str | None = None
    proxy_uri_endpoint: str | None = None
    proxy_uri_path: str | None = None
    proxy_vpc_endpoint_service_name: str | None = None
    proxy_site: str | None = None
    proxy_country: str | None = None
    proxy_addresses: tuple[str, ...] = ()
    external_key_ids: dict[str, str] = field(default_factory=dict)

    @property
    def created_by_stack(self) -> bool:
        """The stack creates the key store (it was not given an existing one)."""
        return self.id is None

    def __post_init__(self) -> None:
        check = Checker()
        if self.id is not None:
            check.matches("id", self.id, _STORE_ID)
        if self.name is not None:
            check.matches("name", self.name, _NAME)
        if self.type == "cloudhsm":
            self._check_cloudhsm(check)
        else:
            self._check_external(check)
        check.done()

    def _check_cloudhsm(self, check: Checker) -> None:
        sources = [
            s
            for s, given in (
                ("id", self.id is not None),
                ("clusterId", self.cluster_id is not None),
                ("createCluster", self.create_cluster),
            )
            if given
        ]
        check.require(
            len(sources) == 1,
            "cluster_id",
            self.cluster_id,
            "give exactly one of id (an existing key store), clusterId (an existing "
            "cluster) or createCluster: true" + (f"; got {', '.join(sources)}" if sources else ""),
        )
        if self.cluster_id is not None:
            check.matches("cluster_id", self.cluster_id, _CLUSTER_ID)
        check.require(
            self.hsm_count >= 2,
            "hsm_count",
            self.hsm_count,
            "use 2 or more: KMS needs two active HSMs in different zones",
        )
        if self.trust_anchor_certificate is not None:
            check.require(
                bool(_PEM.match(self.trust_anchor_certificate)),
                "trust_anchor_certificate",
                self.trust_anchor_certificate[:30],
                "expected a PEM certificate (-----BEGIN CERTIFICATE----- ...)",
            )
        for key in (
            "proxy_uri_endpoint",
            "proxy_uri_path",
            "proxy_vpc_endpoint_service_name",
            "proxy_site",
            "proxy_country",
        ):
            check.require(
                getattr(self, key) is None, key, getattr(self, key), "only for type external"
            )
        check.require(
            not self.proxy_addresses and not self.external_key_ids,
            "external_key_ids" if self.external_key_ids else "proxy_addresses",
            self.external_key_ids or self.proxy_addresses,
            "only for type external",
        )

    def _check_external(self, check: Checker) -> None:
        check.require(
            self.cluster_id is None and not self.create_cluster,
            "cluster_id" if self.cluster_id is not None else "create_cluster",
            self.cluster_id or self.create_cluster,
            "only for type cloudhsm",
        )
        check.require(
            self.trust_anchor_certificate is None,
            "trust_anchor_certificate",
            "(given)",
            "only for type cloudhsm",
        )
        if self.created_by_stack:
            check.require(
                bool(self.proxy_uri_endpoint and _ENDPOINT.match(self.proxy_uri_endpoint)),
                "proxy_uri_endpoint",
                self.proxy_uri_endpoint,
                "expected https://<host>[:port] with no path (the endpoint service's "
                "private DNS name)",
            )
            check.require(
                bool(self.proxy_uri_path and _XKS_PATH.match(self.proxy_uri_path)),
                "proxy_uri_path",
                self.proxy_uri_path,
                "expected a path ending in /kms/xks/v1, e.g. /example/kms/xks/v1",
            )
            check.require(
                endpoint_service_region(self.proxy_vpc_endpoint_service_name or "") is not None,
                "proxy_vpc_endpoint_service_name",
                self.proxy_vpc_endpoint_service_name,
                "expected com.amazonaws.vpce.<region>.vpce-svc-<id>: KMS reaches the proxy "
                "through a VPC endpoint service (a public endpoint is not offered)",
            )
            check.require(
                bool(self.proxy_site), "proxy_site", self.proxy_site, "name the proxy's site"
            )
            check.require(
                self.proxy_country in UAE_COUNTRIES,
                "proxy_country",
                self.proxy_country,
                f"the proxy and its key manager must run in {', '.join(UAE_COUNTRIES)}",
            )
            check.require(
                bool(self.proxy_addresses),
                "proxy_addresses",
                list(self.proxy_addresses),
                "declare the private CIDRs the proxy endpoint resolves to at its site",
            )
            for i, cidr in enumerate(self.proxy_addresses):
                check.require(
                    _is_private_cidr(cidr),
                    f"proxy_addresses[{i}]",
                    cidr,
                    "expected a private CIDR such as 10.60.0.0/24",
                )
        check.require(
            set(self.external_key_ids) == set(PURPOSES),
            "external_key_ids",
            sorted(self.external_key_ids),
            f"give the external key id of each purpose: {', '.join(PURPOSES)}",
        )
        for purpose, key_id in sorted(self.external_key_ids.items()):
            check.matches(f"external_key_ids.{purpose}", key_id, _XKS_KEY_ID)


@dataclass(frozen=True)
class KeyCustodySpec:
    """Where the stack's keys are held.

    Args:
        custody: ``standard`` (default: AWS KMS's own HSMs) or ``hsm`` (a custom key
            store, `KeyStoreSpec`).
        stage: with ``hsm`` and a key store the stack creates, how far the stack goes:
            ``cluster`` (the VPC and the CloudHSM cluster with its HSMs only, to be
            initialized and activated), ``key-store`` (the key store too, to be
            connected) or ``keys`` (default: every key in the connected store, and the
            whole platform).
        key_store: the custom key store (required with ``hsm``).
    """

    custody: Literal["standard", "hsm"] = "standard"
    stage: Stage = "keys"
    key_store: KeyStoreSpec | None = None

    @property
    def in_key_store(self) -> bool:
        return self.custody == "hsm"

    @property
    def complete(self) -> bool:
        """Keys can be created: the platform is built in full."""
        return self.stage == "keys"

    def __post_init__(self) -> None:
        check = Checker()
        store = self.key_store
        if self.custody == "standard":
            check.require(store is None, "key_store", "(given)", "only with custody hsm; remove it")
            check.require(self.stage == "keys", "stage", self.stage, "only with custody hsm")
            check.done()
            return
        check.require(
            store is not None,
            "key_store",
            None,
            "custody hsm needs keyStore: type cloudhsm or external (docs/compliance.md)",
        )
        if store is None:
            check.done()
            return
        if not store.created_by_stack:
            check.require(
                self.stage == "keys",
                "stage",
                self.stage,
                "an existing key store (keyStore.id) is already connected: use stage keys",
            )
        check.require(
            self.stage != "cluster" or store.create_cluster,
            "stage",
            self.stage,
            "stage cluster is for a cluster the stack creates (keyStore.createCluster: true)",
        )
        if store.type == "cloudhsm" and store.created_by_stack and self.stage != "cluster":
            check.require(
                store.trust_anchor_certificate is not None,
                "key_store.trust_anchor_certificate",
                None,
                "creating a CloudHSM key store needs the certificate that signed the "
                "cluster's certificate (customerCA.crt, PEM)",
            )
        check.done()
