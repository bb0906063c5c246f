"""Every PostgreSQL client in the shipped plans verifies the server it logs in to: each
libpq setting the plans hold (a container's ``PGSSLMODE``, a connection URL's
``sslmode``, PgBouncer's ``server_tls_sslmode``) is ``verify-full``, with a CA file
named. Each client's CA mount is followed to its object in the layers' own tests
(test_tracking, test_features, test_pipelines); this one catches a client added
anywhere with a weaker mode."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import SHIPPED_STACKS, shipped_plan

URL_MODE = re.compile(r"[?&]sslmode=([\w-]+)")
URL_CA = re.compile(r"[?&]sslrootcert=[^&\s\"]+")
PGBOUNCER_MODE = re.compile(r"^server_tls_sslmode\s*=\s*(\S+)", re.MULTILINE)


def _env_lists(value: Any) -> Iterator[list[dict[str, Any]]]:
    """Every container ``env`` list (name/value entries) and Helm ``extraEnvVars`` map
    (as entries) under ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "env" and isinstance(item, list):
                yield [e for e in item if isinstance(e, dict) and "name" in e]
            elif key == "extraEnvVars" and isinstance(item, dict):
                yield [{"name": k, "value": v} for k, v in item.items()]
            yield from _env_lists(item)
    elif isinstance(value, list):
        for item in value:
            yield from _env_lists(item)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_database_client_of_a_shipped_plan_verifies_the_server(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    modes: list[tuple[str, str]] = []
    for record in registrations.values():
        if not record.type.startswith("kubernetes:"):
            continue
        for env in _env_lists(record.inputs):
            values = {e["name"]: e.get("value") for e in env}
            if "PGSSLMODE" in values or "PGHOST" in values:
                modes.append((record.name, str(values.get("PGSSLMODE"))))
                assert str(values.get("PGSSLROOTCERT", "")).endswith(".crt"), record.name
        for text in _strings(record.inputs):
            for found in URL_MODE.finditer(text):
                modes.append((record.name, found.group(1)))
                assert URL_CA.search(text), f"{record.name}: an sslmode without sslrootcert"
            modes += [(record.name, m) for m in PGBOUNCER_MODE.findall(text)]
    assert modes, "no database client found: the walk no longer reads the plan"
    assert [(name, mode) for name, mode in modes if mode != "verify-full"] == []


def test_the_walk_finds_a_weaker_mode_in_env_urls_and_pgbouncer() -> None:
    """The same readers on hand-made inputs: each weaker setting is seen."""
    inputs = {
        "spec": {"containers": [{"env": [{"name": "PGSSLMODE", "value": "require"}]}]},
        "values": {"extraEnvVars": {"PGSSLMODE": "prefer"}},
        "data": {
            "a": "postgresql://u@h/db?sslmode=require",
            "b": "[pgbouncer]\nserver_tls_sslmode = require\n",
        },
    }
    envs = [{e["name"]: e["value"] for e in env} for env in _env_lists(inputs)]
    assert envs == [{"PGSSLMODE": "require"}, {"PGSSLMODE": "prefer"}]
    text = json.dumps(list(_strings(inputs)))
    assert URL_MODE.findall(text) == ["require"]
    assert PGBOUNCER_MODE.findall("\n".join(_strings(inputs))) == ["require"]
