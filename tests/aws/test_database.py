"""The tracking database on RDS as the shipped AWS stacks declare it: private, reachable
from the cluster only, under the stack's keys, recoverable, and protected."""

from __future__ import annotations

import json

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from modules.aws.database import (
    CA_CERT_IDENTIFIER,
    ca_bundle,
    master_password,
    parameter_family,
    tls_only_parameters,
)
from modules.residency import UAE_AWS_REGIONS
from stacks.offline_runtime import Registration
from tests.conftest import shipped_plan

AWS_STACKS = ("uae-prod", "uae-dev", "smb-cpu")


def by_type(stack: str, type_token: str) -> list[Registration]:
    registrations, _ = shipped_plan(stack)
    return [r for r in registrations.values() if r.type == type_token]


def key_urn(stack: str, purpose: str) -> str:
    (key,) = [k for k in by_type(stack, "aws:kms/key:Key") if k.name == f"keys-{purpose}"]
    return key.urn


def test_pure_parts() -> None:
    assert parameter_family("17") == "postgres17"
    assert tls_only_parameters()["rds.force_ssl"] == "1"
    assert master_password(json.dumps({"username": "mlflow", "password": "s3cret"})) == "s3cret"


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_database_is_under_the_stacks_keys(stack: str) -> None:
    (database,) = by_type(stack, "aws:rds/instance:Instance")
    deps = database.property_dependencies
    storage, secrets = key_urn(stack, "storage"), key_urn(stack, "secrets")
    assert deps["kmsKeyId"] == [storage]
    assert deps["performanceInsightsKmsKeyId"] == [storage]
    assert deps["masterUserSecretKmsKeyId"] == [secrets]
    inputs = database.inputs
    assert inputs["storageEncrypted"] is True and inputs["performanceInsightsEnabled"] is True
    assert inputs["iamDatabaseAuthenticationEnabled"] is True


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_database_is_private_and_admits_only_the_cluster(stack: str) -> None:
    (database,) = by_type(stack, "aws:rds/instance:Instance")
    assert database.inputs["publiclyAccessible"] is False
    (group,) = by_type(stack, "aws:rds/subnetGroup:SubnetGroup")
    subnets = {r.urn: r for r in by_type(stack, "aws:ec2/subnet:Subnet")}
    used = group.property_dependencies["subnetIds"]
    assert used and all(subnets[u].inputs.get("mapPublicIpOnLaunch") is not True for u in used)
    assert all("private" in subnets[u].name for u in used)
    rules = [
        r
        for r in by_type(stack, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
        if r.name.startswith("tracking-db")
    ]
    assert len(rules) == 1
    (rule,) = rules
    assert (rule.inputs["fromPort"], rule.inputs["toPort"]) == (5432, 5432)
    assert "cidrIpv4" not in rule.inputs and "cidrIpv6" not in rule.inputs
    # The cluster security group EKS creates (an output of the cluster).
    (cluster,) = by_type(stack, "aws:eks/cluster:Cluster")
    assert rule.property_dependencies["referencedSecurityGroupId"] == [cluster.urn]


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_database_is_recoverable_and_protected(stack: str) -> None:
    (database,) = by_type(stack, "aws:rds/instance:Instance")
    inputs = database.inputs
    assert database.protect
    assert inputs["deletionProtection"] is True and inputs["skipFinalSnapshot"] is False
    assert inputs["finalSnapshotIdentifier"].endswith("-final")
    assert inputs["backupRetentionPeriod"] >= 7


#: The root of each certificate authority RDS offers (``ca_cert_identifier``), by the
#: common name AWS gives it in a region.
ROOT_NAMES = {
    "rds-ca-rsa2048-g1": "Amazon RDS {region} Root CA RSA2048 G1",
    "rds-ca-rsa4096-g1": "Amazon RDS {region} Root CA RSA4096 G1",
    "rds-ca-ecc384-g1": "Amazon RDS {region} Root CA ECC384 G1",
}


@pytest.mark.parametrize("region", UAE_AWS_REGIONS)
def test_the_regions_rds_ca_bundle_holds_the_instances_root(region: str) -> None:
    """What clients verify the database with (Kubeflow Pipelines' PgBouncer): the
    region's three RDS roots, each self-signed, a CA, valid for decades yet; the
    instance's own (`CA_CERT_IDENTIFIER`) among them."""
    certificates = x509.load_pem_x509_certificates(ca_bundle(region).encode())
    names = [c.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value for c in certificates]
    assert names == [ROOT_NAMES[identifier].format(region=region) for identifier in ROOT_NAMES]
    assert ROOT_NAMES[CA_CERT_IDENTIFIER].format(region=region) in names
    for certificate in certificates:
        assert certificate.issuer == certificate.subject
        assert certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        assert certificate.not_valid_after_utc.year >= 2060


def test_a_region_without_a_bundle_is_refused() -> None:
    with pytest.raises(ValueError, match="no RDS CA bundle for eu-west-1"):
        ca_bundle("eu-west-1")
