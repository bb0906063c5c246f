"""The teams' MLflow users: names, passwords, the users file the server's sidecar reads.

Standard library only, so that the environment that runs a real MLflow server in the
tests (the lifecycle one, which has no Pulumi) checks the same functions the plan uses.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping


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


def users_json(passwords: Mapping[str, str]) -> str:
    """``users.json``: MLflow user name -> password, for every team."""
    return json.dumps({team_username(t): p for t, p in passwords.items()}, sort_keys=True)
