"""Each team's (and platform service's) MLflow credentials, kept in Secrets Manager in
the stack's region.

One secret per user, ``<prefix>/mlflow/<user>`` (``team-<name>`` for a team,
``pipelines`` for the Kubeflow Pipelines runs), encrypted with the stack's ``secrets``
CMK, holding ``{"username": ..., "password": ...}``: the record an operator or the team
reads (``aws secretsmanager get-secret-value``). The Kubernetes layer makes the user's
Secret in its namespace, and the tracking server's user, from the secret's value
(`TrackingUserSecrets.passwords` reads it back from the version). The password is
`modules.k8s.tracking.users.team_password` (or ``service_password``) of the tracking
admin password: stable across runs (nothing in this project's SDKs generates a random
value that stays put) and never in git.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from modules.component_base import AwsComponent, Outputs
from modules.validation import Checker

#: Days a deleted team secret can still be restored (Secrets Manager: 7 to 30).
RECOVERY_WINDOW_DAYS = 7


def secret_name(name_prefix: str, team: str) -> str:
    """``<prefix>/mlflow/team-<name>``."""
    return user_secret_name(name_prefix, f"team-{team}")


def user_secret_name(name_prefix: str, username: str) -> str:
    """``<prefix>/mlflow/<user>``: a team's (``team-<name>``) or a service's."""
    return f"{name_prefix}/mlflow/{username}"


def secret_document(username: str, password: str) -> str:
    """The secret's value (JSON)."""
    return json.dumps({"username": username, "password": password}, sort_keys=True)


def _document_for(username: str, password: str) -> str:
    return secret_document(username, password)


def password_of(document: str | None) -> str:
    """The password a secret's value holds (empty for a value that holds none)."""
    return str(json.loads(document or "{}").get("password", ""))


@dataclass(frozen=True)
class TrackingUserSecretsArgs:
    """Args of `TrackingUserSecrets`.

    Args:
        name_prefix: the stack's resource prefix (``gpu-<stack>``).
        secrets_key_arn: the stack's ``secrets`` CMK (in its region).
        teams: (key, MLflow user name, password as a Pulumi secret) per user; the key
            names the resources and `TrackingUserSecrets.passwords` (a team's name, or a
            service user's name).
        holder: whose credentials these are, for the secrets' descriptions (``team``,
            or ``service`` for the platform's own users).
    """

    name_prefix: str
    secrets_key_arn: pulumi.Input[str]
    teams: Sequence[tuple[str, str, pulumi.Input[str]]]
    holder: str = "team"

    def __post_init__(self) -> None:
        check = Checker()
        names = [t for t, _, _ in self.teams]
        for name in sorted({n for n in names if names.count(n) > 1}):
            check.require(False, "teams", name, "one secret per team")
        check.done()


class TrackingUserSecrets(AwsComponent[TrackingUserSecretsArgs]):
    """One Secrets Manager secret per user (the stack's ``secrets`` CMK, no replicas).

    Attributes:
        passwords: key (team name) -> the password as the secret's version holds it.
    """

    def declare(self, name: str, args: TrackingUserSecretsArgs) -> Outputs:
        self.passwords: dict[str, pulumi.Output[str]] = {}
        for team, username, password in args.teams:
            secret = aws.secretsmanager.Secret(
                f"{name}-{team}",
                name=user_secret_name(args.name_prefix, username),
                description=f"MLflow credentials of {args.holder} {team} (user {username})",
                kms_key_id=args.secrets_key_arn,
                recovery_window_in_days=RECOVERY_WINDOW_DAYS,
                opts=pulumi.ResourceOptions(parent=self),
            )
            # A secret from the start: what is computed from it stays secret.
            document: pulumi.Output[str] = pulumi.Output.secret(password).apply(
                functools.partial(_document_for, username)
            )
            version = aws.secretsmanager.SecretVersion(
                f"{name}-{team}",
                secret_id=secret.id,
                secret_string=document,
                opts=pulumi.ResourceOptions(parent=self),
            )
            readback: pulumi.Output[str] = version.secret_string.apply(password_of)
            self.passwords[team] = pulumi.Output.secret(readback)
        return {"secrets": [user_secret_name(args.name_prefix, u) for _, u, _ in args.teams]}
