"""Stack configs for the config tests: a shipped stack's values with some keys changed,
and the problems parsing reports."""

from __future__ import annotations

import json

import pytest

from stacks.config import parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.offline_plan import load_stack_file

NS = "uae-gpu-platform:"


def config_of(stack: str, **changes: object) -> dict[str, str]:
    """The stack file's values with ``changes``: a key set to ``None`` is removed, an
    object is given as its Python value (JSON in the config, as the engine passes it)."""
    config, _ = load_stack_file(stack)
    for key, value in changes.items():
        if value is None:
            config.pop(NS + key, None)
        else:
            config[NS + key] = value if isinstance(value, str) else json.dumps(value)
    return config


def problems_of(config: dict[str, str]) -> list[str]:
    """The problems parsing ``config`` reports (it must report some)."""
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    return caught.value.problems
