"""Key custody and backup rules: a compliant plan with a locked backup vault and a plan,
and one whose keys are in a custom key store (``keys.custody: hsm``), each broken one
property at a time (failing and missing-property twins), beside the variants that must
pass; and S3 replication's passing and missing-property twins."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.policies.builder import ACCOUNT, REGION, UNKNOWN, PlanBuilder, compliant_plan, find_step
from tests.policies.conftest import failing_rules, messages, review
from tests.policies.twins import twin_tests

Plan = dict[str, Any]
KEY = "aws:kms/key:Key"
VAULT = "aws:backup/vault:Vault"
PLAN = "aws:backup/plan:Plan"
STORE = "aws:kms/customKeyStore:CustomKeyStore"
REPLICATION = "aws:s3/bucketReplicationConfig:BucketReplicationConfig"
CMK_RULE = "aws-encryption-customer-managed-key"
COPY_RULE = "uae-backup-copies-in-region"
CUSTODY_RULE = "aws-kms-key-custody"
ROTATION_RULE = "aws-kms-key-rotation"


def vault_arn(name: str, region: str = REGION, account: str = ACCOUNT) -> str:
    return f"arn:aws:backup:{region}:{account}:backup-vault:{name}"


def _provider(plan: Plan) -> str:
    urn = next(
        s["newState"]["urn"]
        for s in plan["steps"]
        if s["newState"]["type"] == "pulumi:providers:aws"
    )
    return f"{urn}::id"


def _extend(plan: Plan, add: Callable[[PlanBuilder, str], None]) -> None:
    builder = PlanBuilder()
    add(builder, _provider(plan))
    plan["steps"].extend(builder.steps)


def plan_with_backup() -> Plan:
    """The pack's compliant plan plus AWS Backup as `modules.aws.backup` declares it."""
    plan = compliant_plan()
    key = find_step(plan, KEY, "storage-key")["urn"]
    key_arn = find_step(plan, KEY, "storage-key")["outputs"]["arn"]

    def add(b: PlanBuilder, provider: str) -> None:
        vault = b.add(
            VAULT,
            "backup",
            {"name": "gpu-test", "kmsKeyArn": key_arn, "forceDestroy": False},
            provider=provider,
            deps={"kmsKeyArn": [key]},
            outputs={"arn": vault_arn("gpu-test")},
        )
        b.add(
            "aws:backup/vaultLockConfiguration:VaultLockConfiguration",
            "backup",
            {
                "backupVaultName": "gpu-test",
                "changeableForDays": 3,
                "minRetentionDays": 7,
                "maxRetentionDays": 365,
            },
            provider=provider,
            deps={"backupVaultName": [vault]},
        )
        b.add(
            PLAN,
            "backup",
            {
                "name": "gpu-test-daily",
                "rules": [
                    {
                        "ruleName": "daily",
                        "targetVaultName": "gpu-test",
                        "schedule": "cron(0 1 * * ? *)",
                        "lifecycle": {"deleteAfter": 35},
                    }
                ],
            },
            provider=provider,
            deps={"rules": [vault]},
        )

    _extend(plan, add)
    return plan


def plan_rule(plan: Plan) -> dict[str, Any]:
    return find_step(plan, PLAN, "backup")["inputs"]["rules"][0]  # type: ignore[no-any-return]


def _copy_to(destination: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        action: dict[str, Any] = {"lifecycle": {"deleteAfter": 35}}
        if destination is not None:
            action["destinationVaultArn"] = destination
        plan_rule(plan)["copyActions"] = [action]

    return mutate


def _vault(**changes: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        inputs = find_step(plan, VAULT, "backup")["inputs"]
        for key, value in changes.items():
            if value is None:
                del inputs[key]
            else:
                inputs[key] = value

    return mutate


def _air_gapped(plan: Plan) -> None:
    plan_rule(plan)["targetLogicallyAirGappedBackupVaultArn"] = (
        f"arn:aws:backup:eu-west-1:{ACCOUNT}:backup-vault:air-gapped"
    )


BACKUP_CASES: list[tuple[str, Callable[[Plan], None], str, str]] = [
    ("vault-no-key", _vault(kmsKeyArn=None), CMK_RULE, "`kmsKeyArn` is not set"),
    (
        "vault-aws-managed-key",
        _vault(kmsKeyArn=f"arn:aws:kms:{REGION}:{ACCOUNT}:alias/aws/backup"),
        CMK_RULE,
        "AWS-managed key",
    ),
    (
        "copy-abroad",
        _copy_to(vault_arn("dr", "eu-central-1")),
        COPY_RULE,
        "copies to arn:aws:backup:eu-central-1",
    ),
    ("copy-without-destination", _copy_to(None), COPY_RULE, "names no destination vault"),
    ("copy-to-a-name", _copy_to("dr-vault"), COPY_RULE, "not the ARN of a backup vault"),
    (
        "copy-to-another-service",
        _copy_to("arn:aws:s3:::dr-bucket"),
        COPY_RULE,
        "not the ARN of a backup vault",
    ),
    ("air-gapped-abroad", _air_gapped, COPY_RULE, "eu-west-1"),
]


test_the_plan_with_backups_passes_every_rule, test_the_broken_backup_fails_exactly_the_rule = (
    twin_tests(plan_with_backup, BACKUP_CASES)
)


@pytest.mark.parametrize(
    "destination",
    [vault_arn("dr", REGION, "210987654321"), vault_arn("gpu-test")],
    ids=["another-uae-account", "the-stacks-own-vault"],
)
def test_copies_to_a_vault_in_the_uae_pass(destination: str) -> None:
    plan = plan_with_backup()
    _copy_to(destination)(plan)
    assert failing_rules(plan) == set()


def test_a_copy_to_a_vault_of_the_stack_is_judged_by_that_vaults_region() -> None:
    plan = plan_with_backup()

    def abroad(b: PlanBuilder, provider: str) -> None:
        b.add(
            VAULT,
            "dr",
            {"name": "dr", "kmsKeyArn": "unused", "region": "eu-west-1"},
            provider=provider,
            outputs={"arn": "dr-vault-of-this-stack"},
        )

    _extend(plan, abroad)
    _copy_to("dr-vault-of-this-stack")(plan)
    found = messages(plan, COPY_RULE)
    assert found == [
        "`rules[0].copyActions[0].destinationVaultArn` copies to vault dr in eu-west-1"
    ]


def test_an_unknown_destination_is_judged_by_the_vaults_the_plan_depends_on() -> None:
    plan = plan_with_backup()
    _copy_to(UNKNOWN)(plan)
    assert failing_rules(plan) == set()  # the plan depends on the in-region vault only
    find_step(plan, PLAN, "backup")["propertyDependencies"] = {}
    result = review(plan)
    assert result.violations == []
    assert {f.rule_id for f in result.findings if f.unknown} == {COPY_RULE}


# -- key custody -----------------------------------------------------------------------


def plan_in_key_store(store_type: str = "AWS_CLOUDHSM") -> Plan:
    """The compliant plan with ``keys.custody: hsm``: its key is created in a custom key
    store of the stack (rotation off: KMS cannot rotate such keys)."""
    plan = compliant_plan()
    plan["config"]["uae-gpu-platform:keys"] = {
        "custody": "hsm",
        "keyStore": {"type": "cloudhsm" if store_type == "AWS_CLOUDHSM" else "external"},
    }

    def add(b: PlanBuilder, provider: str) -> None:
        inputs = {"customKeyStoreName": "gpu-test", "customKeyStoreType": store_type}
        b.add(
            STORE, "key-custody", inputs, provider=provider, outputs={"id": "cks-0123456789abcdef0"}
        )

    _extend(plan, add)
    store = find_step(plan, STORE, "key-custody")["urn"]
    key = find_step(plan, KEY, "storage-key")
    key["inputs"].update(
        customKeyStoreId=UNKNOWN,
        enableKeyRotation=False,
        customerMasterKeySpec="SYMMETRIC_DEFAULT",
        keyUsage="ENCRYPT_DECRYPT",
    )
    if store_type == "EXTERNAL_KEY_STORE":
        key["inputs"]["xksKeyId"] = "uae-hsm-storage-1"
    key["propertyDependencies"]["customKeyStoreId"] = [store]
    key["dependencies"] = sorted({*key["dependencies"], store})
    return plan


def _key(**changes: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        state = find_step(plan, KEY, "storage-key")
        for name, value in changes.items():
            if value is None:
                state["inputs"].pop(name, None)
                state["propertyDependencies"].pop(name, None)
            else:
                state["inputs"][name] = value

    return mutate


def _imported_key(plan: Plan) -> None:
    def add(b: PlanBuilder, provider: str) -> None:
        b.add(
            "aws:kms/externalKey:ExternalKey",
            "imported",
            {"deletionWindowInDays": 30, "multiRegion": False},
            provider=provider,
        )

    _extend(plan, add)


CUSTODY_CASES: list[tuple[str, Callable[[Plan], None], str, str]] = [
    (
        "key-outside-the-store",
        _key(customKeyStoreId=None, enableKeyRotation=True),
        CUSTODY_RULE,
        "sets no `customKeyStoreId`",
    ),
    (
        "key-store-id-empty",
        _key(customKeyStoreId="", enableKeyRotation=True),
        CUSTODY_RULE,
        "sets no `customKeyStoreId`",
    ),
    ("imported-key-material", _imported_key, CUSTODY_RULE, "imported key material"),
]


@pytest.mark.parametrize("store_type", ["AWS_CLOUDHSM", "EXTERNAL_KEY_STORE"])
def test_keys_in_the_stacks_key_store_pass_every_rule(store_type: str) -> None:
    result = review(plan_in_key_store(store_type))
    assert result.violations == []
    assert [f for f in result.findings if f.unknown] == []


def test_a_key_in_an_existing_store_named_by_id_passes() -> None:
    plan = plan_in_key_store()
    _key(customKeyStoreId=None)(plan)
    _key(customKeyStoreId="cks-5ebd4ef395a96288e")(plan)
    assert failing_rules(plan) == set()


_, test_a_key_outside_the_store_fails_exactly_the_rule = twin_tests(
    plan_in_key_store, CUSTODY_CASES
)


def test_an_external_store_key_without_its_external_key_fails() -> None:
    plan = plan_in_key_store("EXTERNAL_KEY_STORE")
    _key(xksKeyId=None)(plan)
    assert failing_rules(plan) == {CUSTODY_RULE}
    assert any("`xksKeyId`" in m for m in messages(plan, CUSTODY_RULE))


def test_standard_custody_asks_nothing_of_the_keys() -> None:
    plan = compliant_plan()  # no keys section: custody standard
    assert "uae-gpu-platform:keys" not in plan["config"]
    assert failing_rules(plan) == set()
    plan["config"]["uae-gpu-platform:keys"] = {"custody": "standard"}
    _imported_key(plan)
    assert CUSTODY_RULE not in failing_rules(plan)


def test_rotation_is_only_waived_for_keys_in_a_store() -> None:
    plan = plan_in_key_store()
    assert ROTATION_RULE not in failing_rules(plan)  # in the store, rotation off: passes
    _key(customKeyStoreId=None)(plan)  # out of the store, rotation still off
    assert {ROTATION_RULE, CUSTODY_RULE} <= failing_rules(plan)


def test_an_unknown_store_id_without_a_store_cannot_be_checked_during_preview() -> None:
    plan = plan_in_key_store()
    find_step(plan, KEY, "storage-key")["propertyDependencies"].pop("customKeyStoreId")
    result = review(plan)
    assert result.violations == []
    assert {f.rule_id for f in result.findings if f.unknown} == {CUSTODY_RULE}


# -- S3 replication: the passing and missing-property twins of its failing case ----------


def _replicate(rule: dict[str, Any], deps: list[str] | None = None) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        def add(b: PlanBuilder, provider: str) -> None:
            b.add(
                REPLICATION,
                "replication",
                {
                    "bucket": "uae-data",
                    "role": f"arn:aws:iam::{ACCOUNT}:role/r",
                    "rules": [{"status": "Enabled", **rule}],
                },
                provider=provider,
                deps={"rules": deps} if deps else None,
            )

        _extend(plan, add)

    return mutate


def test_replication_to_a_bucket_of_the_stack_in_the_uae_passes() -> None:
    plan = compliant_plan()
    _replicate({"destination": {"bucket": "arn:aws:s3:::uae-data"}})(plan)
    assert failing_rules(plan) == set()


def test_replication_without_a_destination_fails() -> None:
    plan = compliant_plan()
    _replicate({"filter": {"prefix": "teams/"}})(plan)
    assert failing_rules(plan) == {"uae-s3-replication-in-region"}
    assert any("does not create" in m for m in messages(plan, "uae-s3-replication-in-region"))


def test_shipped_plan_shape_is_what_the_cases_use() -> None:
    """The cases' vault, lock and plan have the keys `modules.aws.backup` registers."""
    from tests.conftest import shipped_plan  # noqa: PLC0415

    registrations, _ = shipped_plan("uae-dev")
    shipped = {r.type: r.inputs for r in registrations.values() if r.type.startswith("aws:backup")}
    built = {s["newState"]["type"]: s["newState"]["inputs"] for s in plan_with_backup()["steps"]}
    for kind in (VAULT, PLAN, "aws:backup/vaultLockConfiguration:VaultLockConfiguration"):
        assert set(built[kind]) <= set(shipped[kind]), kind


def test_a_plan_is_judged_by_its_own_config_not_one_left_by_an_earlier_run() -> None:
    """An hsm stack planned earlier in the same process leaves its config in the Pulumi
    runtime; a standard stack's plan reviewed afterwards must not inherit it."""
    from pulumi.runtime import config as runtime_config  # noqa: PLC0415

    token = runtime_config.CONFIG.set(
        {**runtime_config.CONFIG.get(), "uae-gpu-platform:keys": '{"custody": "hsm"}'}
    )
    try:
        assert failing_rules(compliant_plan()) == set()
    finally:
        runtime_config.CONFIG.reset(token)
