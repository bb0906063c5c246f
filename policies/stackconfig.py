"""The stack's own configuration (``uae-gpu-platform:*``) as policies can read it.

Inside ``pulumi preview --policy-pack`` the analyzer loads the stack config into the
Pulumi runtime (``pulumi_policy`` does it before every call); the offline review loads
the plan document's ``config`` the same way through `loaded`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pulumi.runtime
from pulumi.runtime import config as runtime_config

PROJECT = "uae-gpu-platform"


def get(key: str) -> Any:
    """A config value of this project (JSON objects decoded), or None when unset."""
    value = pulumi.runtime.get_config(f"{PROJECT}:{key}")
    if isinstance(value, str) and value.strip().startswith(("{", "[")):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


@contextmanager
def loaded(config: Mapping[str, Any]) -> Iterator[None]:
    """Make ``config`` (a plan's ``config`` map) the runtime config while inside.

    The plan's map is the stack's whole configuration: values of this project left in
    the runtime by an earlier program run in the same process (another stack's
    ``keys`` or ``target``) are dropped, not merged with it.
    """
    values = {
        str(key): value if isinstance(value, str) else json.dumps(value)
        for key, value in config.items()
    }
    others = {
        key: value
        for key, value in runtime_config.CONFIG.get().items()
        if not key.startswith(f"{PROJECT}:")
    }
    token = runtime_config.CONFIG.set({**others, **values})
    try:
        yield
    finally:
        runtime_config.CONFIG.reset(token)
