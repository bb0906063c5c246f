"""The platform's MLflow users: one per team and one per platform service (the Kubeflow
Pipelines runs' `PIPELINES_USERNAME`); their names, passwords, and the users file the
server's sidecar reads.

Standard library only, so that the environment that runs a real MLflow server in the
tests (the lifecycle one, which has no Pulumi) checks the same functions the plan uses.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping

#: The MLflow user of Kubeflow Pipelines' runs (namespace ``kubeflow``): not a team, so
#: not ``team-<name>``, and no team's user name can be it (every one of those starts
#: with ``team-``).
PIPELINES_USERNAME = "pipelines"


def team_username(team: str) -> str:
    """A team's MLflow user: ``team-<name>`` (the creator of the team's runs)."""
    return f"team-{team}"


def team_password(admin_password: str, team: str) -> str:
    """A team's MLflow password, derived from the admin password (a Pulumi secret that
    never leaves the stack's encrypted config) with HMAC-SHA256 keyed by it: distinct
    per team, stable across runs, and no team's password reveals another's or the
    admin's. Rotating ``trackingAdminPassword`` rotates every team's. (Pulumi's random
    provider is not among this project's SDKs, so nothing else can generate a secret
    that stays the same on the next run.)"""
    digest = hmac.new(
        admin_password.encode(), f"gpuplatform/mlflow/team/{team}".encode(), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def service_password(admin_password: str, username: str) -> str:
    """A platform service's MLflow password (e.g. `PIPELINES_USERNAME`), derived as a
    team's is (`team_password`) but under its own HMAC label
    (``gpuplatform/mlflow/service/<user>``), so that it equals no team's password even
    for a team named like the service."""
    digest = hmac.new(
        admin_password.encode(), f"gpuplatform/mlflow/service/{username}".encode(), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def users_json(passwords: Mapping[str, str], services: Mapping[str, str] | None = None) -> str:
    """``users.json``: MLflow user name -> password, for every team (``passwords``: team
    name -> password) and every platform service user (``services``: user name ->
    password)."""
    users = {team_username(t): p for t, p in passwords.items()}
    for username, password in (services or {}).items():
        if username.startswith("team-") or username in users:
            raise ValueError(f"service user {username!r} collides with a team's user")
        users[username] = password
    return json.dumps(users, sort_keys=True)
