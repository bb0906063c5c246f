"""Project-wide fixtures: programs run under Pulumi's mock runtime, answered by moto.

`run_under_mocks` runs any program (a component, a whole stack) and returns every
registered resource with its type, parent, provider, protect flag and inputs as the
engine would see them. Each call gets a fresh runtime, so nothing leaks between tests.
Plans of the shipped stacks are built once per session and shared.

This conftest is loaded in every environment's test run (Makefile, TESTS_<env>), but
only the plan environment has Pulumi: the stacks' modules are imported where they are
used, not here at the top.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from stacks.offline_runtime import Registration

RunUnderMocks = Callable[..., dict[str, "Registration"]]
SHIPPED_STACKS = ("uae-prod", "uae-dev", "smb-cpu", "onprem-ib")


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread() -> Iterator[None]:
    """Tests that train or export in this process use one intra-op thread, as every
    worker the tests start does (OMP_NUM_THREADS=1, tests/workloads/helpers.py): the
    tiny models gain nothing from a second thread, and on a busy 2-core machine its
    OpenMP spin-waiting cost the training tests ~6x the CPU time (test_train: 22 s ->
    1.6 s). Only where a test module has already imported torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def run_under_mocks() -> RunUnderMocks:
    from stacks.config import PROJECT  # noqa: PLC0415  (plan environment only)
    from stacks.offline_runtime import run_program  # noqa: PLC0415

    def run(
        program: Callable[[], None], *, stack: str = "test", config: Mapping[str, str] | None = None
    ) -> dict[str, Registration]:
        registrations, _ = run_program(
            program, project=PROJECT, stack=stack, config=dict(config or {}), secret_keys=[]
        )
        return registrations

    return run


_PLANS: dict[str, tuple[dict[str, Registration], dict[str, Any]]] = {}


def shipped_plan(stack: str) -> tuple[dict[str, Registration], dict[str, Any]]:
    """(registrations, plan document) of a shipped stack, built once per session."""
    from stacks.offline_plan import (  # noqa: PLC0415  (plan environment only)
        load_stack_file,
        plan_document,
        plan_registrations,
    )

    if stack not in _PLANS:
        config, secret_keys = load_stack_file(stack)
        registrations = plan_registrations(stack, config, secret_keys)
        _PLANS[stack] = (registrations, plan_document(registrations, config, secret_keys))
    return _PLANS[stack]
