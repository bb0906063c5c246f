"""`python -m policies.audit` against a local moto server with resources planted in
several regions: every foreign one is found, nothing in the allowed region is, and
listings longer than one page are read in full."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.server import ThreadedMotoServer

from policies.audit.__main__ import split_list
from policies.audit.scan import run_audit

ALLOWED = "me-central-1"
FOREIGN = "eu-west-1"
ACCOUNT = "123456789012"
EKS_CLUSTERS_ABROAD = 7  # more than one page of 5
PAGE_SIZE = 5


def credentials_env(endpoint: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
    )
    if endpoint:
        env["AWS_ENDPOINT_URL"] = endpoint
    return env


def plant(endpoint: str) -> set[tuple[str, str, str, str]]:
    """Create resources in three regions; return the findings the audit must report."""
    kw: dict[str, Any] = {
        "endpoint_url": endpoint,
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }
    expected: set[tuple[str, str, str, str]] = set()

    s3 = boto3.client("s3", region_name=ALLOWED, **kw)
    s3.create_bucket(Bucket="uae-data", CreateBucketConfiguration={"LocationConstraint": ALLOWED})
    s3.create_bucket(Bucket="uae-copy", CreateBucketConfiguration={"LocationConstraint": ALLOWED})
    boto3.client("s3", region_name=FOREIGN, **kw).create_bucket(
        Bucket="eu-replica", CreateBucketConfiguration={"LocationConstraint": FOREIGN}
    )
    boto3.client("s3", region_name="us-east-1", **kw).create_bucket(Bucket="us-trail-logs")
    expected |= {
        (FOREIGN, "s3", "bucket", "eu-replica"),
        ("us-east-1", "s3", "bucket", "us-trail-logs"),
    }
    for bucket in ("uae-data", "uae-copy", "eu-replica"):
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})

    def replicate(source: str, target: str) -> None:
        rule = {
            "ID": "all",
            "Status": "Enabled",
            "Priority": 1,
            "Filter": {},
            "DeleteMarkerReplication": {"Status": "Disabled"},
            "Destination": {"Bucket": f"arn:aws:s3:::{target}"},
        }
        s3.put_bucket_replication(
            Bucket=source,
            ReplicationConfiguration={
                "Role": f"arn:aws:iam::{ACCOUNT}:role/replication",
                "Rules": [rule],
            },
        )

    replicate("uae-data", "eu-replica")
    replicate("uae-copy", "uae-data")  # same-region replication is fine
    expected.add((FOREIGN, "s3", "replication-rule", "uae-data -> eu-replica"))

    kms_home = boto3.client("kms", region_name=ALLOWED, **kw)
    kms_home.create_key(Description="single-region, allowed")
    multi = kms_home.create_key(Description="multi-region", MultiRegion=True)["KeyMetadata"]["Arn"]
    foreign_key = boto3.client("kms", region_name=FOREIGN, **kw).create_key()["KeyMetadata"]["Arn"]
    expected |= {(ALLOWED, "kms", "key", multi), (FOREIGN, "kms", "key", foreign_key)}

    ec2_home = boto3.client("ec2", region_name=ALLOWED, **kw)
    home_volume = ec2_home.create_volume(AvailabilityZone=f"{ALLOWED}a", Size=10)["VolumeId"]
    ec2_home.create_snapshot(VolumeId=home_volume)
    ec2 = boto3.client("ec2", region_name=FOREIGN, **kw)
    volume = ec2.create_volume(AvailabilityZone=f"{FOREIGN}a", Size=10)["VolumeId"]
    snapshot = ec2.create_snapshot(VolumeId=volume)["SnapshotId"]
    image = ec2.register_image(
        Name="golden-image",
        RootDeviceName="/dev/xvda",
        BlockDeviceMappings=[{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 8}}],
    )["ImageId"]
    # Registering the AMI created its backing snapshot, which is foreign data too.
    backing = [
        m["Ebs"]["SnapshotId"]
        for m in ec2.describe_images(ImageIds=[image])["Images"][0]["BlockDeviceMappings"]
        if "SnapshotId" in m.get("Ebs", {})
    ]
    expected |= {(FOREIGN, "ec2", "snapshot", backing_id) for backing_id in backing}
    expected |= {
        (FOREIGN, "ec2", "volume", volume),
        (FOREIGN, "ec2", "snapshot", snapshot),
        (FOREIGN, "ec2", "image", image),
    }

    vpc = {"subnetIds": []}
    role = f"arn:aws:iam::{ACCOUNT}:role/eks"
    boto3.client("eks", region_name=ALLOWED, **kw).create_cluster(
        name="uae-gpu", roleArn=role, resourcesVpcConfig=vpc
    )
    eks = boto3.client("eks", region_name=FOREIGN, **kw)
    for index in range(EKS_CLUSTERS_ABROAD):
        eks.create_cluster(name=f"shadow-{index}", roleArn=role, resourcesVpcConfig=vpc)
        expected.add((FOREIGN, "eks", "cluster", f"shadow-{index}"))

    ecr_home = boto3.client("ecr", region_name=ALLOWED, **kw)
    ecr_home.create_repository(repositoryName="trainer")
    ecr_home.put_replication_configuration(
        replicationConfiguration={
            "rules": [{"destinations": [{"region": FOREIGN, "registryId": ACCOUNT}]}]
        }
    )
    expected.add((FOREIGN, "ecr", "replication-rule", f"registry in {ALLOWED} -> {FOREIGN}"))
    repo = boto3.client("ecr", region_name=FOREIGN, **kw).create_repository(repositoryName="copy")
    expected.add((FOREIGN, "ecr", "repository", repo["repository"]["repositoryArn"]))

    trail = boto3.client("cloudtrail", region_name=ALLOWED, **kw).create_trail(
        Name="org-trail", S3BucketName="us-trail-logs"
    )
    expected.add(("us-east-1", "cloudtrail", "trail", trail["TrailARN"]))
    return expected


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[tuple[str, set[tuple[str, str, str, str]]]]:
    # No catalog of public AMIs per region: the audit reads only the account's own
    # images, and loading the catalog makes scanning every region take minutes.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        try:
            yield endpoint, plant(endpoint)
        finally:
            server.stop()


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "policies.audit", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )


def test_the_audit_finds_every_foreign_resource_and_nothing_else(
    moto_endpoint: tuple[str, set[tuple[str, str, str, str]]], tmp_path: Path
) -> None:
    endpoint, expected = moto_endpoint
    out = tmp_path / "findings.json"
    result = run(
        [
            "--regions",
            f"{ALLOWED},{FOREIGN}",
            "us-east-1",
            "--allowed-regions",
            ALLOWED,
            "--out",
            str(out),
            "--page-size",
            str(PAGE_SIZE),
            "--no-bootstrap-checks",
        ],
        credentials_env(endpoint),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(out.read_text())
    found = {
        (f["region"], f["service"], f["resource_type"], f["resource"]) for f in report["findings"]
    }
    assert found == expected
    assert report["errors"] == []
    assert report["scannedRegions"] == [ALLOWED, FOREIGN, "us-east-1"]
    # The table names each finding.
    assert "shadow-6" in result.stdout and "replicates objects to eu-west-1" in result.stdout


def test_without_regions_every_enabled_region_is_scanned(
    moto_endpoint: tuple[str, set[tuple[str, str, str, str]]], tmp_path: Path
) -> None:
    endpoint = moto_endpoint[0]
    out = tmp_path / "findings.json"
    result = run(
        ["--allowed-regions", ALLOWED, "--out", str(out), "--no-bootstrap-checks"],
        credentials_env(endpoint),
    )
    report = json.loads(out.read_text())
    assert len(report["scannedRegions"]) > 10
    found = {
        (f["region"], f["service"], f["resource_type"], f["resource"]) for f in report["findings"]
    }
    assert found == moto_endpoint[1]
    assert result.returncode == 1


def test_missing_credentials_give_a_clear_message(tmp_path: Path) -> None:
    env = credentials_env(None)
    del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    result = run(["--regions", ALLOWED, "--out", str(tmp_path / "f.json")], env)
    assert result.returncode == 2
    assert "no AWS credentials found" in result.stderr
    assert "Traceback" not in result.stderr


def test_region_lists_accept_spaces_and_commas() -> None:
    assert split_list(["me-central-1,eu-west-1", "us-east-1 ap-south-1"]) == [
        "me-central-1",
        "eu-west-1",
        "us-east-1",
        "ap-south-1",
    ]


def test_an_allowed_only_account_is_clean() -> None:
    with mock_aws():
        session = boto3.session.Session(region_name=ALLOWED)
        boto3.client("s3", region_name=ALLOWED).create_bucket(
            Bucket="uae-only", CreateBucketConfiguration={"LocationConstraint": ALLOWED}
        )
        boto3.client("ec2", region_name=ALLOWED).create_volume(
            AvailabilityZone=f"{ALLOWED}a", Size=1
        )
        audit = run_audit(session, [ALLOWED, FOREIGN], [ALLOWED])
        assert audit.findings == []
        assert audit.errors == []


def test_an_unknown_profile_gives_a_clear_message(tmp_path: Path) -> None:
    env = credentials_env(None)
    env["AWS_PROFILE"] = "nope"
    result = run(["--regions", ALLOWED, "--out", str(tmp_path / "f.json")], env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "nope" in result.stderr and "AWS_PROFILE" in result.stderr


def test_an_unwritable_findings_file_gives_a_clear_message(
    moto_endpoint: tuple[str, set[tuple[str, str, str, str]]], tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "findings.json"
    result = run(["--regions", ALLOWED, "--out", str(out)], credentials_env(moto_endpoint[0]))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"cannot write findings to {out}" in result.stderr
    assert "Traceback" not in result.stderr
