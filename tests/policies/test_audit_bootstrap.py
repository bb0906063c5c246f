"""`make audit` verifies what `make bootstrap` set up: a freshly bootstrapped account is
clean; a missing trail, a trail homed abroad, a state bucket without versioning or
without its CMK, and a missing guardrail are each found. `--allowed-regions` takes UAE
regions only and an unknown `--regions` entry is one line, exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from policies.audit.__main__ import main as audit_main
from stacks.bootstrap.__main__ import main as bootstrap_main
from stacks.bootstrap.names import Names
from tests.support.moto_env import fake_aws_credentials

REGION = "me-central-1"
NAMES = Names("123456789012", REGION)


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A bootstrapped account (moto, in process)."""
    fake_aws_credentials(monkeypatch)
    with mock_aws():
        assert bootstrap_main([]) == 0
        yield


def audit(
    tmp_path: Path, *extra: str, regions: tuple[str, ...] = (REGION,)
) -> tuple[int, list[dict[str, Any]]]:
    """The audit's exit code and findings (only the UAE region is scanned unless asked:
    moto's EC2 image catalog makes every foreign region slow to scan)."""
    out = tmp_path / "findings.json"
    code = audit_main(["--regions", *regions, "--out", str(out), *extra])
    return code, json.loads(out.read_text())["findings"]


def problems(findings: list[dict[str, Any]], kind: str) -> list[str]:
    return [f"{f['region']}: {f['problem']}" for f in findings if f["resource_type"] == kind]


def test_a_bootstrapped_account_is_clean(account: None, tmp_path: Path) -> None:
    code, findings = audit(tmp_path)
    assert findings == [] and code == 0


def test_missing_trail_is_found(account: None, tmp_path: Path) -> None:
    boto3.client("cloudtrail", region_name=REGION).delete_trail(Name=NAMES.trail)
    code, findings = audit(tmp_path)
    assert code == 1
    assert problems(findings, "account-trail") == [
        f"{REGION}: the account trail does not exist; run `make bootstrap` (it corrects what "
        "differs) and audit again"
    ]


def test_trail_in_the_wrong_region_is_found(account: None, tmp_path: Path) -> None:
    boto3.client("cloudtrail", region_name=REGION).delete_trail(Name=NAMES.trail)
    s3 = boto3.client("s3", region_name="eu-west-1")
    s3.create_bucket(
        Bucket="trail-abroad", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    boto3.client("cloudtrail", region_name="eu-west-1").create_trail(
        Name=NAMES.trail, S3BucketName="trail-abroad"
    )
    code, findings = audit(tmp_path, regions=(REGION, "eu-west-1"))
    assert code == 1
    found = problems(findings, "account-trail")
    assert any(
        "eu-west-1: the account trail is homed in eu-west-1, outside the allowed regions" in p
        for p in found
    ), found
    assert any("delivers to bucket trail-abroad in eu-west-1" in p for p in found), found
    assert any("log-file validation is off" in p for p in found), found


def test_state_bucket_without_versioning_is_found(account: None, tmp_path: Path) -> None:
    boto3.client("s3", region_name=REGION).put_bucket_versioning(
        Bucket=NAMES.state_bucket, VersioningConfiguration={"Status": "Suspended"}
    )
    code, findings = audit(tmp_path)
    assert code == 1
    assert [p.split(";")[0] for p in problems(findings, "state-bucket")] == [
        f"{REGION}: versioning is not enabled"
    ]


def test_state_bucket_without_cmk_is_found(account: None, tmp_path: Path) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    s3.put_bucket_encryption(
        Bucket=NAMES.state_bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    code, findings = audit(tmp_path)
    assert code == 1
    assert [p.split(";")[0] for p in problems(findings, "state-bucket")] == [
        f"{REGION}: not encrypted with a customer-managed KMS key (SSE-KMS with a CMK)"
    ]


def test_missing_state_bucket_is_found(account: None, tmp_path: Path) -> None:
    code, findings = audit(tmp_path, "--state-bucket", "not-bootstrapped")
    assert code == 1
    assert [p.split(";")[0] for p in problems(findings, "state-bucket")] == [
        f"{REGION}: the state bucket does not exist in this account"
    ]


def test_guardrail_is_verified_where_asked(account: None, tmp_path: Path) -> None:
    org = boto3.client("organizations", region_name="us-east-1")
    org.create_organization(FeatureSet="ALL")
    root = org.list_roots()["Roots"][0]["Id"]
    ou = org.create_organizational_unit(ParentId=root, Name="ml")["OrganizationalUnit"]["Id"]
    code, findings = audit(tmp_path, "--expect-guardrail", ou)
    assert code == 1
    assert [f["resource"] for f in findings if f["resource_type"] == "guardrail"] == [ou]
    assert bootstrap_main(["--org-guardrail", "--target", ou]) == 0
    code, findings = audit(tmp_path, "--expect-guardrail", ou)
    assert (code, findings) == (0, [])


@pytest.mark.parametrize("allowed", ["eu-west-1", "me-central-1,me-south-1"])
def test_allowed_regions_outside_the_uae_are_refused(
    allowed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert audit_main(["--allowed-regions", allowed, "--out", str(tmp_path / "f.json")]) == 2
    err = capsys.readouterr().err
    assert "not a UAE region" in err and "never widened" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "f.json").exists()


def test_an_unknown_region_is_one_line(
    account: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = audit_main(["--regions", "me-central-1", "mars-north-1", "--out", str(tmp_path / "f")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "error: --regions mars-north-1: not an AWS region this botocore knows "
        "(see `aws ec2 describe-regions`); e.g. me-central-1"
    ]
