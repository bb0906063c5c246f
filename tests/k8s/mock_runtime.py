"""The Kubernetes layer's component tests run on the project's recording mock runtime
(`stacks.offline_runtime`, the same one behind `make plan` and `run_under_mocks`)."""

from __future__ import annotations

from collections.abc import Callable

from stacks.config import PROJECT
from stacks.offline_runtime import Registration, run_program

Registered = Registration


def run(program: Callable[[], None]) -> list[Registration]:
    """Run ``program`` under a fresh runtime; return every registration."""
    registrations, _ = run_program(
        program, project=PROJECT, stack="test", config={}, secret_keys=[]
    )
    return list(registrations.values())
