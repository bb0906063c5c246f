"""The KMS custom key store every key of an ``hsm`` stack is created in, and, when the
stack makes its own, the AWS CloudHSM cluster behind it (see `key_custody_spec`).

KMS can only create a CloudHSM key store for a cluster that is initialized and
activated, with two active HSMs in different zones and a ``kmsuser`` crypto user, and
keys only in a store that is connected: the steps between the stages are manual
(docs/compliance.md, "Key custody"), so the component creates what the stage allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from modules.component_base import AwsComponent, Outputs

from .key_custody_spec import KeyStoreSpec, Stage


def hsm_zones(zones: tuple[str, ...], count: int) -> tuple[str, ...]:
    """The zones of a created cluster's HSMs: one HSM per zone, in the VPC's zone order
    (KMS requires active HSMs in at least two zones)."""
    if count > len(zones):
        raise ValueError(f"{count} HSMs need {count} zones; the VPC has {len(zones)}")
    return zones[:count]


@dataclass(frozen=True)
class KeyCustodyArgs:
    """Args of `KeyCustody`.

    Args:
        spec: the key store (`KeyStoreSpec`).
        stage: how far to go (``cluster``, ``key-store``, ``keys``).
        store_name: the key store's name when the stack creates it.
        subnet_ids_by_zone: the stack's private subnets, for a cluster it creates.
        key_store_password: (cloudhsm) the ``kmsuser`` password, a secret.
        xks_access_key_id: (external) the proxy credential's access key id, a secret.
        xks_secret_access_key: (external) the proxy credential's secret, a secret.
    """

    spec: KeyStoreSpec
    stage: Stage
    store_name: str
    subnet_ids_by_zone: Mapping[str, pulumi.Input[str]] | None = None
    key_store_password: pulumi.Input[str] | None = None
    xks_access_key_id: pulumi.Input[str] | None = None
    xks_secret_access_key: pulumi.Input[str] | None = None


class KeyCustody(AwsComponent[KeyCustodyArgs]):
    """The custom key store (and the CloudHSM cluster and HSMs the stack creates)."""

    cluster: aws.cloudhsmv2.Cluster | None
    key_store: aws.kms.CustomKeyStore | None
    #: The store the keys go in: the given id, or the one created here (None before
    #: stage ``key-store``).
    key_store_id: pulumi.Input[str] | None

    def declare(self, name: str, args: KeyCustodyArgs) -> Outputs:
        spec = args.spec
        self.cluster, self.key_store = None, None
        self.key_store_id = spec.id
        hsms: list[aws.cloudhsmv2.Hsm] = []
        if spec.create_cluster:
            subnets = dict(args.subnet_ids_by_zone or {})
            zones = hsm_zones(tuple(subnets), spec.hsm_count)
            # The cluster and its HSMs hold the key material: protected.
            protected = pulumi.ResourceOptions(parent=self, protect=True)
            self.cluster = aws.cloudhsmv2.Cluster(
                name,
                hsm_type=spec.hsm_type,
                subnet_ids=[subnets[z] for z in zones],
                opts=protected,
            )
            hsms = [
                aws.cloudhsmv2.Hsm(
                    f"{name}-{zone}",
                    cluster_id=self.cluster.cluster_id,
                    subnet_id=subnets[zone],
                    opts=protected,
                )
                for zone in zones
            ]
        if spec.created_by_stack and args.stage != "cluster":
            self.key_store = self._key_store(name, args, hsms)
            self.key_store_id = self.key_store.id
        return {
            "cluster_id": self.cluster.cluster_id if self.cluster else spec.cluster_id,
            "key_store_id": self.key_store_id,
        }

    def _key_store(
        self, name: str, args: KeyCustodyArgs, hsms: list[aws.cloudhsmv2.Hsm]
    ) -> aws.kms.CustomKeyStore:
        spec = args.spec
        opts = pulumi.ResourceOptions(parent=self, protect=True, depends_on=list(hsms))
        if spec.type == "cloudhsm":
            cluster_id: pulumi.Input[str] = (
                self.cluster.cluster_id if self.cluster is not None else str(spec.cluster_id)
            )
            return aws.kms.CustomKeyStore(
                name,
                custom_key_store_name=args.store_name,
                custom_key_store_type="AWS_CLOUDHSM",
                cloud_hsm_cluster_id=cluster_id,
                key_store_password=args.key_store_password,
                trust_anchor_certificate=spec.trust_anchor_certificate,
                opts=opts,
            )
        # External key store: KMS reaches the proxy only through the VPC endpoint
        # service in the stack's region (never a public endpoint).
        return aws.kms.CustomKeyStore(
            name,
            custom_key_store_name=args.store_name,
            custom_key_store_type="EXTERNAL_KEY_STORE",
            xks_proxy_connectivity="VPC_ENDPOINT_SERVICE",
            xks_proxy_uri_endpoint=spec.proxy_uri_endpoint,
            xks_proxy_uri_path=spec.proxy_uri_path,
            xks_proxy_vpc_endpoint_service_name=spec.proxy_vpc_endpoint_service_name,
            xks_proxy_authentication_credential={
                "access_key_id": args.xks_access_key_id or "",
                "raw_secret_access_key": args.xks_secret_access_key or "",
            },
            opts=opts,
        )
