"""`python -m stacks.bootstrap` against moto: exactly the resources and settings of issue
10 §1, in the UAE region only; a second run and a dry run change nothing; collisions,
missing permissions, a region abroad and missing credentials are one clear message."""

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
from botocore.exceptions import EndpointConnectionError, NoRegionError, ProfileNotFound
from moto import mock_aws
from moto.core import set_initial_no_auth_action_count
from moto.server import ThreadedMotoServer

from stacks.bootstrap.__main__ import main
from stacks.bootstrap.documents import region_guardrail
from stacks.bootstrap.names import Names
from tests.support.iam_eval import FULL_AWS_ACCESS, decide
from tests.support.moto_env import fake_aws_credentials

REGION = "me-central-1"
ACCOUNT = "123456789012"
NAMES = Names(ACCOUNT, REGION)
CI_ROLE = f"arn:aws:iam::{ACCOUNT}:role/ci"
ADMIN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/platform-admin"
ARGS = ["--ci-role-arn", CI_ROLE, "--admin-role-arn", ADMIN_ROLE, "--trail-retention-days", "400"]
OTHER_REGIONS = ("eu-west-1", "us-east-1", "me-south-1")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fake_aws_credentials(monkeypatch)
    with mock_aws():
        yield


def snapshot() -> dict[str, Any]:
    """Everything the bootstrap may create, in every region looked at."""
    state: dict[str, Any] = {"keys": {}, "trails": {}, "groups": {}}
    for region in (REGION, *OTHER_REGIONS):
        kms = boto3.client("kms", region_name=region)
        state["keys"][region] = sorted(
            (
                k["KeyId"],
                json.dumps(kms.get_key_policy(KeyId=k["KeyId"], PolicyName="default")["Policy"]),
            )
            for k in kms.list_keys()["Keys"]
        )
        trails = boto3.client("cloudtrail", region_name=region).describe_trails()["trailList"]
        state["trails"][region] = sorted(json.dumps(t, sort_keys=True) for t in trails)
        groups = boto3.client("logs", region_name=region).describe_log_groups()["logGroups"]
        state["groups"][region] = sorted(json.dumps(g, sort_keys=True, default=str) for g in groups)
    s3 = boto3.client("s3", region_name=REGION)
    state["buckets"] = {}
    for bucket in s3.list_buckets()["Buckets"]:
        name = bucket["Name"]
        state["buckets"][name] = {
            "location": s3.get_bucket_location(Bucket=name)["LocationConstraint"],
            "policy": s3.get_bucket_policy(Bucket=name)["Policy"],
            "versioning": s3.get_bucket_versioning(Bucket=name).get("Status"),
        }
    state["roles"] = sorted(r["RoleName"] for r in boto3.client("iam").list_roles()["Roles"])
    return state


def test_first_run_creates_exactly_the_resources_in_the_uae(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    assert f"pulumi login 's3://{NAMES.state_bucket}?region={REGION}'" in out
    assert (
        "pulumi stack init uae-prod --secrets-provider "
        f"'awskms://alias/uae-gpu-platform-secrets?region={REGION}'" in out
    )

    kms = boto3.client("kms", region_name=REGION)
    aliases = {a["AliasName"]: a["TargetKeyId"] for a in kms.list_aliases()["Aliases"]}
    ours = {NAMES.state_key_alias, NAMES.secrets_key_alias, NAMES.trail_key_alias}
    assert ours <= set(aliases)
    for alias in ours:
        key = aliases[alias]
        meta = kms.describe_key(KeyId=key)["KeyMetadata"]
        assert meta["KeyManager"] == "CUSTOMER" and not meta["MultiRegion"]
        assert kms.get_key_rotation_status(KeyId=key)["KeyRotationEnabled"]
    secrets_policy = json.loads(
        kms.get_key_policy(KeyId=aliases[NAMES.secrets_key_alias], PolicyName="default")["Policy"]
    )
    principals = {
        p
        for s in secrets_policy["Statement"]
        for p in (
            [s["Principal"]["AWS"]]
            if isinstance(s["Principal"]["AWS"], str)
            else s["Principal"]["AWS"]
        )
    }
    assert principals == {f"arn:aws:iam::{ACCOUNT}:root", CI_ROLE, ADMIN_ROLE}
    state_key_arn = kms.describe_key(KeyId=aliases[NAMES.state_key_alias])["KeyMetadata"]["Arn"]
    trail_key_arn = kms.describe_key(KeyId=aliases[NAMES.trail_key_alias])["KeyMetadata"]["Arn"]

    s3 = boto3.client("s3", region_name=REGION)
    assert sorted(b["Name"] for b in s3.list_buckets()["Buckets"]) == sorted(
        [NAMES.state_bucket, NAMES.trail_bucket]
    )
    state = NAMES.state_bucket
    assert s3.get_bucket_location(Bucket=state)["LocationConstraint"] == REGION
    assert s3.get_bucket_versioning(Bucket=state)["Status"] == "Enabled"
    (rule,) = s3.get_bucket_encryption(Bucket=state)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rule["ApplyServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "aws:kms",
        "KMSMasterKeyID": state_key_arn,
    }
    block = s3.get_public_access_block(Bucket=state)["PublicAccessBlockConfiguration"]
    assert all(block.values()) and len(block) == 4
    assert s3.get_bucket_ownership_controls(Bucket=state)["OwnershipControls"]["Rules"] == [
        {"ObjectOwnership": "BucketOwnerEnforced"}
    ]
    assert (
        s3.get_bucket_logging(Bucket=state)["LoggingEnabled"]["TargetBucket"] == NAMES.trail_bucket
    )
    (lifecycle,) = s3.get_bucket_lifecycle_configuration(Bucket=state)["Rules"]
    assert lifecycle["NoncurrentVersionExpiration"] == {"NoncurrentDays": 90}
    policy = json.loads(s3.get_bucket_policy(Bucket=state)["Policy"])
    # TLS only and SSE-KMS uploads only, evaluated, not compared as text.
    arn = f"arn:aws:s3:::{state}/tfstate"
    assert decide([policy], "s3:GetObject", {"aws:SecureTransport": "false"}, arn) == "Deny"
    assert decide([policy], "s3:GetObject", {"aws:SecureTransport": "true"}, arn) != "Deny"
    put = {"aws:SecureTransport": "true", "s3:x-amz-server-side-encryption": "AES256"}
    assert decide([policy], "s3:PutObject", put, arn) == "Deny"
    put["s3:x-amz-server-side-encryption"] = "aws:kms"
    assert decide([policy], "s3:PutObject", put, arn) != "Deny"

    trail_bucket = NAMES.trail_bucket
    assert s3.get_bucket_location(Bucket=trail_bucket)["LocationConstraint"] == REGION
    lock = s3.get_object_lock_configuration(Bucket=trail_bucket)["ObjectLockConfiguration"]
    assert lock["ObjectLockEnabled"] == "Enabled"
    assert lock["Rule"]["DefaultRetention"]["Mode"] == "COMPLIANCE"
    assert lock["Rule"]["DefaultRetention"]["Days"] == 400

    cloudtrail = boto3.client("cloudtrail", region_name=REGION)
    (trail,) = cloudtrail.describe_trails(includeShadowTrails=False)["trailList"]
    assert trail["HomeRegion"] == REGION and trail["S3BucketName"] == trail_bucket
    assert trail["LogFileValidationEnabled"] and trail["KmsKeyId"] == trail_key_arn
    assert trail["IsMultiRegionTrail"]
    assert trail["CloudWatchLogsLogGroupArn"].startswith(f"arn:aws:logs:{REGION}:")
    assert cloudtrail.get_trail_status(Name=trail["Name"])["IsLogging"]
    (selector,) = cloudtrail.get_event_selectors(TrailName=trail["Name"])["EventSelectors"]
    assert selector["IncludeManagementEvents"] and selector["ReadWriteType"] == "All"
    assert selector["DataResources"][0]["Values"] == [f"arn:aws:s3:::{state}/"]
    (group,) = boto3.client("logs", region_name=REGION).describe_log_groups()["logGroups"]
    assert group["retentionInDays"] == 365 and group["kmsKeyId"] == trail_key_arn

    for region in OTHER_REGIONS:  # nothing regional anywhere else
        assert boto3.client("kms", region_name=region).list_keys()["Keys"] == []
        assert (
            boto3.client("cloudtrail", region_name=region).describe_trails(
                includeShadowTrails=False
            )["trailList"]
            == []
        )
        assert boto3.client("logs", region_name=region).describe_log_groups()["logGroups"] == []


def test_second_run_changes_nothing_and_says_so(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(ARGS) == 0
    before = snapshot()
    capsys.readouterr()
    assert main(ARGS) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    table = [line for line in lines if not line.startswith("  pulumi")]
    assert len(table) == 8
    assert all(line.split()[0] == "unchanged" for line in table), table
    assert snapshot() == before


def test_dry_run_changes_nothing(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot()
    assert main(["--dry-run", *ARGS]) == 0
    out = capsys.readouterr().out
    assert out.count("would create") == 8 and "nothing was changed" in out
    assert snapshot() == before


def test_dry_run_after_a_change_by_hand_names_the_setting(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(ARGS) == 0
    s3 = boto3.client("s3", region_name=REGION)
    s3.put_bucket_versioning(
        Bucket=NAMES.state_bucket, VersioningConfiguration={"Status": "Suspended"}
    )
    capsys.readouterr()
    assert main(["--dry-run", *ARGS]) == 0
    assert "would update" in capsys.readouterr().out
    assert s3.get_bucket_versioning(Bucket=NAMES.state_bucket)["Status"] == "Suspended"
    assert main(ARGS) == 0  # a run repairs it
    assert s3.get_bucket_versioning(Bucket=NAMES.state_bucket)["Status"] == "Enabled"


def test_guardrail_is_attached_and_denies_outside_the_uae(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    org = boto3.client("organizations", region_name="us-east-1")
    org.create_organization(FeatureSet="ALL")
    root = org.list_roots()["Roots"][0]["Id"]
    ou = org.create_organizational_unit(ParentId=root, Name="ml")["OrganizationalUnit"]["Id"]
    assert main(["--org-guardrail", "--target", ou]) == 0
    assert main(["--org-guardrail", "--target", ou]) == 0
    policies = org.list_policies_for_target(TargetId=ou, Filter="SERVICE_CONTROL_POLICY")[
        "Policies"
    ]
    (policy,) = [p for p in policies if p["Name"] == NAMES.guardrail_policy]
    scp = json.loads(org.describe_policy(PolicyId=policy["Id"])["Policy"]["Content"])
    assert scp == region_guardrail()

    def outcome(action: str, region: str) -> str:
        return decide([FULL_AWS_ACCESS, scp], action, {"aws:RequestedRegion": region})

    assert outcome("ec2:RunInstances", "eu-west-1") == "Deny"
    assert outcome("ec2:RunInstances", "me-south-1") == "Deny"  # Bahrain is not the UAE
    assert outcome("ec2:RunInstances", "me-central-1") == "Allow"
    assert outcome("s3:CreateBucket", "us-east-1") == "Deny"
    assert outcome("kms:CreateKey", "eu-west-1") == "Deny"
    assert outcome("iam:CreateRole", "us-east-1") == "Allow"  # global service exemption
    assert outcome("sts:AssumeRole", "us-east-1") == "Allow"
    assert outcome("ec2:DescribeRegions", "eu-west-1") == "Allow"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--region", "eu-west-1"], "--region eu-west-1 is outside the UAE"),
        (["--region", "me-south-1"], "--region me-south-1 is outside the UAE"),
        (["--org-guardrail"], "--org-guardrail needs --target"),
        (["--ci-role-arn", "ci"], "--ci-role-arn 'ci' is not an IAM role ARN"),
        (["--log-retention-days", "42"], "--log-retention-days 42 is not one"),
    ],
)
def test_unusable_arguments_are_one_message(
    aws: None, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(args) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert boto3.client("s3", region_name=REGION).list_buckets()["Buckets"] == []


def test_bucket_name_taken_by_another_account(
    aws: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "210987654321")
    boto3.client("s3", region_name=REGION).create_bucket(
        Bucket=NAMES.trail_bucket, CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    monkeypatch.delenv("MOTO_ACCOUNT_ID")
    assert main(ARGS) == 2
    err = capsys.readouterr().err
    assert f"the bucket name {NAMES.trail_bucket} is taken by another account" in err
    assert "--name-suffix" in err and "Traceback" not in err
    assert main([*ARGS, "--name-suffix=-b"]) == 0


@set_initial_no_auth_action_count(4)
def test_missing_permission_is_one_message(
    aws: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # moto enforces IAM from the fifth request on: a user who may only read is denied
    # the first write (kms:CreateKey), as AWS would deny it.
    iam = boto3.client("iam")
    iam.create_user(UserName="reader")
    iam.put_user_policy(
        UserName="reader",
        PolicyName="read",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": ["sts:GetCallerIdentity", "kms:List*"],
                        "Resource": "*",
                    }
                ],
            }
        ),
    )
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    assert main(ARGS) == 2
    err = capsys.readouterr().err
    assert "missing permission: CreateKey was denied" in err and "Traceback" not in err


def _env_without_credentials() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def test_without_credentials_dry_run_explains_and_a_run_refuses() -> None:
    env = _env_without_credentials()
    dry = subprocess.run(
        [sys.executable, "-m", "stacks.bootstrap", "--dry-run"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "dry run without AWS credentials" in dry.stdout
    assert "uae-gpu-platform-state-<account-id>-me-central-1" in dry.stdout
    real = subprocess.run(
        [sys.executable, "-m", "stacks.bootstrap"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert real.returncode == 2
    assert "no AWS credentials found" in real.stderr and "Traceback" not in real.stderr


def test_against_a_moto_server_through_aws_endpoint_url() -> None:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        env = {
            **_env_without_credentials(),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        }
        runs = [
            subprocess.run(
                [sys.executable, "-m", "stacks.bootstrap"],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
            for _ in range(2)
        ]
        assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
        assert runs[0].stdout.count("created") == 8
        assert runs[1].stdout.count("unchanged") == 8 and "created" not in runs[1].stdout
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (ProfileNotFound(profile="nope"), "set AWS_PROFILE to a configured profile or unset it"),
        (
            EndpointConnectionError(endpoint_url="https://sts.me-central-1.amazonaws.com"),
            "error: cannot reach AWS: Could not connect to the endpoint URL",
        ),
        (NoRegionError(), "error: the AWS configuration cannot be used: You must specify"),
    ],
)
def test_an_unusable_aws_configuration_is_one_message(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
    message: str,
) -> None:
    def session() -> None:
        raise error

    monkeypatch.setattr(boto3.session, "Session", session)
    assert main(ARGS) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
