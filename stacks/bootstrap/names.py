"""The names the bootstrap derives from the account id and the region, and the lines it
prints for the stacks. Pure: the offline plan and the program use them too (the default
backend of an offline plan is the bootstrap's state bucket for a placeholder account).
"""

from __future__ import annotations

from dataclasses import dataclass

from modules.residency import UAE_AWS_REGIONS

PREFIX = "uae-gpu-platform"
DEFAULT_REGION = UAE_AWS_REGIONS[0]
# The account id the shipped stack files and offline plans use where a real one is not
# known (the same placeholder the offline runtime answers `getCallerIdentity` with).
PLACEHOLDER_ACCOUNT = "123456789012"


@dataclass(frozen=True)
class Names:
    """Every name the bootstrap creates, for one account and region.

    Args:
        account: the 12-digit AWS account id.
        region: the UAE region everything is created in.
    """

    account: str
    region: str = DEFAULT_REGION
    suffix: str = ""  # appended to the bucket names when the derived ones are taken

    @property
    def state_bucket(self) -> str:
        """Pulumi's state bucket (``pulumi login s3://...``)."""
        return f"{PREFIX}-state-{self.account}-{self.region}{self.suffix}"

    @property
    def trail_bucket(self) -> str:
        """Where the account trail and the state bucket's access logs are delivered."""
        return f"{PREFIX}-trail-{self.account}-{self.region}{self.suffix}"

    @property
    def state_key_alias(self) -> str:
        """The CMK that encrypts the state bucket."""
        return f"alias/{PREFIX}-state"

    @property
    def secrets_key_alias(self) -> str:
        """The CMK of the stacks' ``awskms://`` secrets provider."""
        return f"alias/{PREFIX}-secrets"

    @property
    def trail_key_alias(self) -> str:
        """The CMK that encrypts the trail's log files and its log group."""
        return f"alias/{PREFIX}-trail"

    @property
    def trail(self) -> str:
        return f"{PREFIX}-account-trail"

    @property
    def trail_arn(self) -> str:
        return f"arn:aws:cloudtrail:{self.region}:{self.account}:trail/{self.trail}"

    @property
    def log_group(self) -> str:
        return f"/aws/cloudtrail/{PREFIX}"

    @property
    def trail_logs_role(self) -> str:
        """The role CloudTrail assumes to write into the log group (IAM is global)."""
        return f"{PREFIX}-trail-to-logs"

    @property
    def guardrail_policy(self) -> str:
        return f"{PREFIX}-uae-region-guardrail"

    @property
    def backend_url(self) -> str:
        """The ``pulumi login`` URL of the state bucket."""
        return f"s3://{self.state_bucket}?region={self.region}"

    @property
    def secrets_provider(self) -> str:
        """The ``--secrets-provider`` URL of the secrets key."""
        return f"awskms://{self.secrets_key_alias}?region={self.region}"


def pulumi_lines(names: Names, stacks: tuple[str, ...]) -> list[str]:
    """The exact commands that put a stack's state and secrets on what the bootstrap made."""
    lines = [f"pulumi login '{names.backend_url}'"]
    lines += [
        f"pulumi stack init {stack} --secrets-provider '{names.secrets_provider}'"
        for stack in stacks
    ]
    return lines
