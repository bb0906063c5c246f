"""AWS Backup in the shipped AWS plans (vault, compliance-mode lock, daily plan,
selections, backup and restore roles), FSx's backup setting, the backup config's
checks, and the vault, lock and plan created in moto with the plan's values, with the
runbook's read commands (docs/recovery.md) run against them."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import boto3
import botocore
import pytest
from moto import mock_aws

from modules.aws.backup import (
    BACKUP_MANAGED_POLICIES,
    PVC_NAME_TAG,
    PVC_NAMESPACE_TAG,
    RESTORE_MANAGED_POLICIES,
)
from modules.aws.backup_spec import lustre_backups_supported
from stacks.config import parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.offline_plan import load_stack_file, plan_registrations
from stacks.offline_runtime import Registration
from tests.conftest import shipped_plan
from tests.support.moto_env import fake_aws_credentials

AWS_STACKS = ("uae-prod", "uae-dev", "smb-cpu")
REGION = "me-central-1"
ACCOUNT = "123456789012"
NS = "uae-gpu-platform:"
VAULT = "aws:backup/vault:Vault"
LOCK = "aws:backup/vaultLockConfiguration:VaultLockConfiguration"
PLAN = "aws:backup/plan:Plan"
SELECTION = "aws:backup/selection:Selection"
RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "recovery.md"
#: Each stack's teams (their EBS checkpoint volumes are selected where there is no FSx).
EBS_TEAMS = {"uae-prod": (), "uae-dev": ("sandbox",), "smb-cpu": ("analytics",)}


def of_type(stack: str, type_token: str) -> list[Registration]:
    registrations, _ = shipped_plan(stack)
    return sorted((r for r in registrations.values() if r.type == type_token), key=lambda r: r.urn)


def one(stack: str, type_token: str, name: str | None = None) -> Registration:
    (found,) = [r for r in of_type(stack, type_token) if name is None or r.name == name]
    return found


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_one_locked_vault_under_the_storage_key(stack: str) -> None:
    vault = one(stack, VAULT)
    storage_key = one(stack, "aws:kms/key:Key", "keys-storage")
    assert vault.inputs["name"] == f"gpu-{stack}"
    assert vault.inputs["kmsKeyArn"].startswith(f"arn:aws:kms:{REGION}:")
    assert vault.property_dependencies["kmsKeyArn"] == [storage_key.urn]
    assert vault.protect and vault.inputs["forceDestroy"] is False
    lock = one(stack, LOCK)
    assert lock.property_dependencies["backupVaultName"] == [vault.urn]
    # Compliance mode: ChangeableForDays set (3 or more); the defaults of `backup`.
    assert (
        lock.inputs["changeableForDays"],
        lock.inputs["minRetentionDays"],
        lock.inputs["maxRetentionDays"],
    ) == (3, 7, 365)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_daily_plan_keeps_copies_in_the_vault(stack: str) -> None:
    vault, plan = one(stack, VAULT), one(stack, PLAN)
    (rule,) = plan.inputs["rules"]
    assert rule["targetVaultName"] == vault.inputs["name"]
    assert vault.urn in plan.property_dependencies["rules"]
    assert rule["schedule"] == "cron(0 1 * * ? *)"
    assert rule["lifecycle"] == {"deleteAfter": 35}
    assert (rule["startWindow"], rule["completionWindow"]) == (60, 720)
    assert "copyActions" not in rule and "targetLogicallyAirGappedBackupVaultArn" not in rule


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_selections_cover_the_database_the_bucket_and_ebs_checkpoints(stack: str) -> None:
    plan = one(stack, PLAN)
    selections = {s.inputs["name"]: s for s in of_type(stack, SELECTION)}
    expected = {"data-bucket", "tracking-db", *(f"checkpoints-team-{t}" for t in EBS_TEAMS[stack])}
    assert set(selections) == expected
    roles = {r.urn: r for r in of_type(stack, "aws:iam/role:Role")}
    (backup_role,) = [r for r in roles.values() if r.name == "backup-backup"]
    bucket = one(stack, "aws:s3/bucket:Bucket", "data")
    database = one(stack, "aws:rds/instance:Instance")
    for name, selection in selections.items():
        assert selection.property_dependencies["planId"] == [plan.urn], name
        assert selection.property_dependencies["iamRoleArn"] == [backup_role.urn], name
    assert selections["data-bucket"].inputs["resources"] == [f"arn:aws:s3:::{bucket.id}"]
    assert selections["data-bucket"].property_dependencies["resources"] == [bucket.urn]
    assert selections["tracking-db"].property_dependencies["resources"] == [database.urn]
    assert selections["tracking-db"].inputs["resources"] == [
        f"arn:aws:rds:{REGION}:{ACCOUNT}:db:{database.inputs['identifier']}"
    ]
    # AWS Backup needs S3 versioning on the bucket it backs up.
    (versioning,) = [
        v
        for v in of_type(stack, "aws:s3/bucketVersioning:BucketVersioning")
        if v.inputs["bucket"] == bucket.id
    ]
    assert versioning.inputs["versioningConfiguration"] == {"status": "Enabled"}
    for team in EBS_TEAMS[stack]:
        selection = selections[f"checkpoints-team-{team}"]
        assert selection.inputs["resources"] == [f"arn:aws:ec2:{REGION}:{ACCOUNT}:volume/*"]
        (condition,) = selection.inputs["conditions"]
        assert condition["stringEquals"] == [
            {"key": f"aws:ResourceTag/{PVC_NAME_TAG}", "value": "checkpoints"},
            {"key": f"aws:ResourceTag/{PVC_NAMESPACE_TAG}", "value": f"team-{team}"},
        ]
    # The claims those tags name exist in the plan, on the retained gp3 class.
    claims = {
        (c.inputs["metadata"]["namespace"], c.inputs["metadata"]["name"]): c.inputs["spec"]
        for c in of_type(stack, "kubernetes:core/v1:PersistentVolumeClaim")
    }
    for team in EBS_TEAMS[stack]:
        assert claims[(f"team-{team}", "checkpoints")]["storageClassName"] == (
            "gp3-encrypted-retain"
        )


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_backup_and_restore_roles_are_separate_and_key_scoped(stack: str) -> None:
    roles = {r.name: r for r in of_type(stack, "aws:iam/role:Role")}
    attachments = of_type(stack, "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    inline = {p.name: p for p in of_type(stack, "aws:iam/rolePolicy:RolePolicy")}
    storage_key = one(stack, "aws:kms/key:Key", "keys-storage")
    for role_name, managed in (
        ("backup-backup", BACKUP_MANAGED_POLICIES),
        ("backup-restore", RESTORE_MANAGED_POLICIES),
    ):
        role = roles[role_name]
        (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
        assert statement["Principal"] == {"Service": "backup.amazonaws.com"}
        assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT}}
        attached = {a.inputs["policyArn"] for a in attachments if a.inputs["role"] == role.id}
        assert attached == {f"arn:aws:iam::aws:policy/{p}" for p in managed}
        document = json.loads(inline[f"{role_name}-vault-key"].inputs["policy"])
        assert {s["Resource"] for s in document["Statement"]} == {
            f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{storage_key.id}"
        }
        grant = next(s for s in document["Statement"] if s["Sid"] == "GrantVaultKeyToAwsResources")
        assert grant["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}


def test_fsx_linked_to_the_bucket_has_no_backups_it_cannot_take() -> None:
    """FSx backs up only persistent file systems not linked to S3 (docs/recovery.md):
    uae-prod's is linked, so its automatic backups are off and no selection names it."""
    (fs,) = of_type("uae-prod", "aws:fsx/lustreFileSystem:LustreFileSystem")
    (link,) = of_type("uae-prod", "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert link.inputs["fileSystemId"] == fs.id
    assert fs.inputs["deploymentType"] == "PERSISTENT_2"
    assert fs.inputs["automaticBackupRetentionDays"] == 0
    assert fs.inputs["copyTagsToBackups"] is False
    selected = [r for s in of_type("uae-prod", SELECTION) for r in s.inputs["resources"]]
    assert not any(":fsx:" in arn for arn in selected)
    assert not lustre_backups_supported("PERSISTENT_2", linked_to_s3=True)
    assert not lustre_backups_supported("SCRATCH_2", linked_to_s3=False)
    assert lustre_backups_supported("PERSISTENT_2", linked_to_s3=False)


def test_the_stack_exports_what_the_runbook_reads() -> None:
    """`pulumi stack output backup` (docs/recovery.md): the vault, plan and both roles."""
    from stacks.offline_plan import offline_program  # noqa: PLC0415
    from stacks.offline_runtime import run_program  # noqa: PLC0415

    config, secret_keys = load_stack_file("smb-cpu")
    registrations, mocks = run_program(
        offline_program("smb-cpu"),
        project="uae-gpu-platform",
        stack="smb-cpu",
        config=config,
        secret_keys=secret_keys,
    )
    assert mocks.stack_exports.get("backup") is False  # exported, not secret
    (component,) = [r for r in registrations.values() if r.type == "gpuplatform:aws:StackBackups"]
    outputs = component.component_outputs
    assert set(outputs) == {"vault", "plan_id", "backup_role_arn", "restore_role_arn"}
    assert outputs["vault"] == "gpu-smb-cpu"
    assert outputs["restore_role_arn"].startswith(f"arn:aws:iam::{ACCOUNT}:role/backup-restore-")


def test_backups_can_be_turned_off() -> None:
    config, secret_keys = load_stack_file("smb-cpu")
    config[NS + "backup"] = json.dumps({"enabled": False})
    registrations = plan_registrations("smb-cpu", config, secret_keys)
    assert not any(r.type.startswith("aws:backup/") for r in registrations.values())


def test_backup_config_problems_are_reported_together() -> None:
    config, _ = load_stack_file("uae-dev")
    config[NS + "backup"] = json.dumps(
        {
            "retentionDays": 400,
            "schedule": "daily",
            "startWindowMinutes": 30,
            "vaultLock": {"minRetentionDays": 7, "maxRetentionDays": 365, "changeableForDays": 1},
        }
    )
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    text = "\n".join(caught.value.problems)
    assert (
        f"{NS}backup.vaultLock.changeableForDays: got 1; use 3 or more: fewer is not a "
        "compliance-mode lock"
    ) in text
    config[NS + "backup"] = json.dumps(
        {"retentionDays": 400, "schedule": "daily", "startWindowMinutes": 30}
    )
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    assert caught.value.problems == [
        f"{NS}backup.retentionDays: got 400; must lie within the vault lock's "
        "minRetentionDays (7) and maxRetentionDays (365): the locked vault refuses other "
        "retentions",
        f"{NS}backup.schedule: got 'daily'; use an AWS Backup cron expression such as "
        "cron(0 1 * * ? *) (six fields, UTC)",
        f"{NS}backup.startWindowMinutes: got 30; use 60 or more (AWS Backup needs at least "
        "an hour)",
    ]


# -- the vault, lock and plan in moto; the runbook's read commands against them ---------


def _pascal(value: Any) -> Any:
    """Pulumi's camelCase inputs as the AWS API's PascalCase members."""
    renames = {"deleteAfter": "DeleteAfterDays", "startWindow": "StartWindowMinutes",
               "completionWindow": "CompletionWindowMinutes", "schedule": "ScheduleExpression",
               "targetVaultName": "TargetBackupVaultName"}  # fmt: skip
    if isinstance(value, dict):
        return {renames.get(k, k[:1].upper() + k[1:]): _pascal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_pascal(v) for v in value]
    return value


def runbook_commands(service: str) -> list[str]:
    """The runbook's ``aws <service> ...`` commands, one per line (continuations joined)."""
    text = RUNBOOK.read_text().replace("\\\n", " ")
    return [m.strip() for m in re.findall(rf"^\s*(aws {service} [^\n]+)$", text, re.M)]


def call(client: Any, command: str, values: dict[str, str]) -> Any:
    """Run one CLI command line through botocore: ``aws backup get-backup-plan
    --backup-plan-id X`` becomes ``get_backup_plan(BackupPlanId=X)``, each option
    matched to the operation's input member; ``<placeholders>`` from ``values``."""
    words = shlex.split(command)
    operation = client.meta.service_model.operation_model(
        "".join(w.title() for w in words[2].split("-"))
    )
    members = {botocore.xform_name(m, "-"): m for m in operation.input_shape.members}
    params: dict[str, Any] = {}
    options = iter(words[3:])
    for option in options:
        value = next(options)
        if option == "--region":
            assert value == REGION
            continue
        params[members[option.removeprefix("--")]] = values.get(value, value)
    return getattr(client, botocore.xform_name(operation.name))(**params)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Any:
    fake_aws_credentials(monkeypatch)
    with mock_aws():
        yield


def test_the_vault_lock_and_plan_as_planned_in_moto_and_the_runbook_reads_them(aws: None) -> None:
    stack = "uae-prod"
    vault, lock, plan = one(stack, VAULT), one(stack, LOCK), one(stack, PLAN)
    backup = boto3.client("backup", region_name=REGION)
    key = boto3.client("kms", region_name=REGION).create_key()["KeyMetadata"]["Arn"]
    backup.create_backup_vault(BackupVaultName=vault.inputs["name"], EncryptionKeyArn=key)
    backup.put_backup_vault_lock_configuration(
        BackupVaultName=lock.inputs["backupVaultName"],
        MinRetentionDays=lock.inputs["minRetentionDays"],
        MaxRetentionDays=lock.inputs["maxRetentionDays"],
        ChangeableForDays=lock.inputs["changeableForDays"],
    )
    created = backup.create_backup_plan(
        BackupPlan={"BackupPlanName": plan.inputs["name"], "Rules": _pascal(plan.inputs["rules"])}
    )
    values = {"<plan-id>": created["BackupPlanId"]}

    commands = runbook_commands("backup")
    supported = [c for c in commands if c.split()[2] in {
        "describe-backup-vault", "list-backup-plans", "get-backup-plan"}]  # fmt: skip
    assert len(supported) == 3, commands
    answers = {c.split()[2]: call(backup, c, values) for c in supported}
    described = answers["describe-backup-vault"]
    assert described["BackupVaultName"] == "gpu-uae-prod"
    assert described["Locked"] is True
    assert (described["MinRetentionDays"], described["MaxRetentionDays"]) == (7, 365)
    assert described["EncryptionKeyArn"] == key
    listed = answers["list-backup-plans"]["BackupPlansList"]
    assert [p["BackupPlanName"] for p in listed] == ["gpu-uae-prod-daily"]
    (rule,) = answers["get-backup-plan"]["BackupPlan"]["Rules"]
    assert rule["TargetBackupVaultName"] == "gpu-uae-prod"
    assert rule["Lifecycle"] == {"DeleteAfterDays": 35}
    assert rule["ScheduleExpression"] == "cron(0 1 * * ? *)"


def test_moto_refuses_a_lock_shorter_than_compliance_mode_and_changes_after_the_lock_date(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What compliance mode means, as moto implements it: ChangeableForDays under 3 is
    refused; after the lock date the lock can be neither changed nor removed."""
    backup = boto3.client("backup", region_name=REGION)
    backup.create_backup_vault(BackupVaultName="v")
    with pytest.raises(botocore.exceptions.ClientError, match="at least 3 days"):
        backup.put_backup_vault_lock_configuration(BackupVaultName="v", ChangeableForDays=2)
    backup.put_backup_vault_lock_configuration(
        BackupVaultName="v", MinRetentionDays=7, MaxRetentionDays=365, ChangeableForDays=3
    )
    from moto.backup import models  # noqa: PLC0415

    later = models.unix_time() + 4 * 24 * 3600
    monkeypatch.setattr(models, "unix_time", lambda: later)
    with pytest.raises(botocore.exceptions.ClientError, match="immutable"):
        backup.delete_backup_vault_lock_configuration(BackupVaultName="v")
    with pytest.raises(botocore.exceptions.ClientError, match="immutable"):
        backup.put_backup_vault_lock_configuration(BackupVaultName="v", MinRetentionDays=1)


def test_checkpoint_selections_are_one_per_namespace_with_valid_names() -> None:
    from modules.aws.backup import checkpoint_volume_targets  # noqa: PLC0415

    long_team = "team-" + "x" * 60
    targets = checkpoint_volume_targets(["team-a", long_team], "checkpoints", REGION, ACCOUNT)
    assert [t.name for t in targets] == ["checkpoints-team-a", f"checkpoints-{long_team}"[:50]]
    assert all(re.fullmatch(r"[a-zA-Z0-9\-_.]{1,50}", t.name) for t in targets)
    assert targets[1].tags_equal == {PVC_NAMESPACE_TAG: long_team, PVC_NAME_TAG: "checkpoints"}
