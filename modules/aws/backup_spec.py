"""Backups as the stack file declares them (the typed args of `StackBackups`), and the
pure decisions about what AWS Backup can protect.

The limits below are AWS Backup's (Developer Guide, "AWS Backup Vault Lock" and the
``PutBackupVaultLockConfiguration`` / ``CreateBackupPlan`` API references): a lock's
``ChangeableForDays`` of at least 3 puts it in compliance mode (immutable once that grace
time has passed), retention is 1 to 36500 days, and a recovery point whose retention
falls outside the lock's minimum and maximum is refused by the locked vault.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from modules.validation import Checker, TextFormat

#: AWS Backup's bounds on retention and on a vault lock (days).
MAX_RETENTION_DAYS = 36500
MIN_CHANGEABLE_FOR_DAYS = 3
# AWS Backup schedule expressions: cron(...) with six fields, UTC.
_CRON = TextFormat(
    r"^cron\((\S+\s+){5}\S+\)$",
    "use an AWS Backup cron expression such as cron(0 1 * * ? *) (six fields, UTC)",
)


@dataclass(frozen=True)
class VaultLockSpec:
    """AWS Backup Vault Lock, always in compliance mode.

    Args:
        min_retention_days: the shortest retention a recovery point may have (default 7).
        max_retention_days: the longest (default 365).
        changeable_for_days: grace time (3 or more, default 3) after which the lock can no
            longer be changed or removed by anyone, the root user and AWS included: the
            vault is then in compliance mode.
    """

    min_retention_days: int = 7
    max_retention_days: int = 365
    changeable_for_days: int = MIN_CHANGEABLE_FOR_DAYS

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            1 <= self.min_retention_days <= MAX_RETENTION_DAYS,
            "min_retention_days",
            self.min_retention_days,
            f"use 1 to {MAX_RETENTION_DAYS}",
        )
        check.require(
            1 <= self.max_retention_days <= MAX_RETENTION_DAYS,
            "max_retention_days",
            self.max_retention_days,
            f"use 1 to {MAX_RETENTION_DAYS}",
        )
        check.require(
            self.min_retention_days <= self.max_retention_days,
            "min_retention_days",
            self.min_retention_days,
            f"must not exceed maxRetentionDays ({self.max_retention_days})",
        )
        check.require(
            MIN_CHANGEABLE_FOR_DAYS <= self.changeable_for_days <= MAX_RETENTION_DAYS,
            "changeable_for_days",
            self.changeable_for_days,
            f"use {MIN_CHANGEABLE_FOR_DAYS} or more: fewer is not a compliance-mode lock",
        )
        check.done()


@dataclass(frozen=True)
class BackupSpec:
    """AWS Backup for the stack's data (docs/recovery.md).

    Args:
        enabled: create the vault, its lock, the plan and its selections (default true).
        retention_days: how long each recovery point is kept (default 35); it must lie
            within the vault lock's minimum and maximum, or the locked vault refuses it.
        schedule: when the daily backup starts, an AWS Backup ``cron(...)`` expression in
            UTC (default ``cron(0 1 * * ? *)``, 01:00 UTC).
        start_window_minutes: how long after the scheduled time a job may start
            (default 60, the least AWS Backup accepts).
        completion_window_minutes: how long a started job may run before it is cancelled
            (default 720); it must exceed the start window.
        vault_lock: the vault lock (`VaultLockSpec`), compliance mode.
    """

    enabled: bool = True
    retention_days: int = 35
    schedule: str = "cron(0 1 * * ? *)"
    start_window_minutes: int = 60
    completion_window_minutes: int = 720
    vault_lock: VaultLockSpec = field(default_factory=VaultLockSpec)

    def __post_init__(self) -> None:
        check = Checker()
        lock = self.vault_lock
        check.require(
            lock.min_retention_days <= self.retention_days <= lock.max_retention_days,
            "retention_days",
            self.retention_days,
            (
                f"must lie within the vault lock's minRetentionDays ({lock.min_retention_days}) "
                f"and maxRetentionDays ({lock.max_retention_days}): the locked vault refuses "
                "other retentions"
            ),
        )
        check.matches("schedule", self.schedule, _CRON)
        check.require(
            self.start_window_minutes >= 60,
            "start_window_minutes",
            self.start_window_minutes,
            "use 60 or more (AWS Backup needs at least an hour)",
        )
        check.require(
            self.completion_window_minutes > self.start_window_minutes,
            "completion_window_minutes",
            self.completion_window_minutes,
            f"must exceed startWindowMinutes ({self.start_window_minutes})",
        )
        check.done()


def lustre_backups_supported(deployment_type: str, linked_to_s3: bool) -> bool:
    """Whether FSx for Lustre (its own automatic backups and AWS Backup alike) can back
    up the file system.

    The FSx for Lustre User Guide ("Working with backups"): backups are taken "of
    persistent file systems that are not linked to an Amazon S3 durable data
    repository"; scratch file systems have none. The platform's file system is
    PERSISTENT_2 and linked to the data bucket by a data repository association, so it
    cannot be backed up: what is under the linked path lives in the (versioned, backed
    up) bucket.
    """
    return deployment_type.startswith("PERSISTENT") and not linked_to_s3
