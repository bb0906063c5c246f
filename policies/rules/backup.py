"""Backups stay in the UAE: every copy an AWS Backup plan makes, and every backup it
writes to a logically air-gapped vault, goes to a vault in an allowed region.

S3 replication, the other way a stack copies its data to a second place, is
`uae-s3-replication-in-region`'s (policies/rules/stack.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from pulumi_policy import Severity

from policies import controls
from policies.aws import parse_arn, region_of
from policies.model import ResourceView, StackView, stack_rule, types_in
from policies.settings import Settings
from policies.values import Deferred, as_list, dig, is_unknown, known

PLAN = "aws:backup/plan:Plan"
VAULT_TYPES = (
    "aws:backup/vault:Vault",
    "aws:backup/logicallyAirGappedVault:LogicallyAirGappedVault",
)


def _vault_ids(vault: ResourceView) -> set[str]:
    return {
        str(vault.props[k])
        for k in ("arn", "id", "name")
        if isinstance(vault.props.get(k), str) and not is_unknown(vault.props[k])
    }


def _destination_problem(
    stack: StackView, plan: ResourceView, value: object, path: str, settings: Settings
) -> str | None:
    """Why the vault ``value`` names is not shown to be in an allowed region, or None."""
    if value in (None, ""):
        return f"`{path}` names no destination vault"
    vaults = list(stack.of_type(*VAULT_TYPES))
    if is_unknown(value):
        # Computed from a vault of this stack: the plan's rules depend on it. Every vault
        # they depend on must then be in an allowed region; with none, it cannot be told.
        depended = [v for v in vaults if v.urn in plan.property_dependencies.get("rules", ())]
        if not depended:
            known(value, f"{plan.name}.{path}")
        for vault in depended:
            region = known(region_of(vault), f"{vault.name}.region")
            if region not in settings.allowed_regions:
                return f"`{path}` copies to vault {vault.name} in {region}"
        return None
    text = str(value)
    mine = next((v for v in vaults if text in _vault_ids(v)), None)
    if mine is not None:
        region = known(region_of(mine), f"{mine.name}.region")
        if region not in settings.allowed_regions:
            return f"`{path}` copies to vault {mine.name} in {region}"
        return None
    arn = parse_arn(text)
    if arn is None or arn.service != "backup" or not arn.region:
        return f"`{path}` is {text!r}, not the ARN of a backup vault: its region cannot be told"
    if arn.region not in settings.allowed_regions:
        return f"`{path}` copies to {text} in {arn.region}"
    return None


@stack_rule(
    id="uae-backup-copies-in-region",
    description=(
        "AWS Backup plans copy recovery points only to vaults in an allowed region: every "
        "copy action's destination, and a logically air-gapped target vault, is a backup "
        "vault ARN in the allowlist (or a vault of the stack there)."
    ),
    severity=Severity.CRITICAL,
    remediation=(
        "Point `copyActions[].destinationVaultArn` (and "
        "`targetLogicallyAirGappedBackupVaultArn`) at a vault in an allowed region, e.g. "
        "the stack's own vault or a second UAE account's vault in me-central-1, or remove "
        "the copy action; a copy abroad moves every recovery point out of the UAE."
    ),
    controls=controls.BACKUP_RESIDENCY,
    applies_to=types_in(PLAN),
    config_keys=("allowedRegions",),
)
def backup_copies_in_region(
    stack: StackView, settings: Settings
) -> Iterator[tuple[str | None, str]]:
    deferred = Deferred()
    for plan in stack.of_type(PLAN):
        for i, rule in enumerate(as_list(plan.props.get("rules"))):
            destinations = [
                (f"rules[{i}].copyActions[{j}].destinationVaultArn", dig(a, "destinationVaultArn"))
                for j, a in enumerate(as_list(dig(rule, "copyActions")))
            ]
            air_gapped = dig(rule, "targetLogicallyAirGappedBackupVaultArn")
            if air_gapped not in (None, ""):
                path = f"rules[{i}].targetLogicallyAirGappedBackupVaultArn"
                destinations.append((path, air_gapped))
            for path, value in destinations:
                with deferred.each():
                    problem = _destination_problem(stack, plan, value, path, settings)
                    if problem:
                        yield plan.urn, problem
    deferred.finish()
