"""The stack's secret config values (``pulumi config set --secret``): reading one that a
part of the stack needs, and the one line that says how to set a missing one."""

from __future__ import annotations

import pulumi

from .config import PROJECT
from .config_parsing import ConfigError


def missing_secret(key: str, what: str, instead: str = "") -> str:
    """The problem line of a missing secret config value.

    Args:
        key: the config key (``featuresRedisAuthToken``).
        what: what the value is, for the reader (``the feature store's Redis password``).
        instead: how to do without it (``set features.enabled: false``); empty: no way.
    """
    line = f"{PROJECT}:{key}: missing; {what}: pulumi config set --secret {key}"
    return f"{line} (or {instead})" if instead else line


def required_secret(key: str, what: str, instead: str) -> pulumi.Output[str]:
    """The secret config value ``key``; a `ConfigError` (`missing_secret`) if unset."""
    value = pulumi.Config(PROJECT).get_secret(key)
    if value is None:
        raise ConfigError([missing_secret(key, what, instead)])
    return value
