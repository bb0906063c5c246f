"""What the shipped stacks' offline plans (shared per session) hold, for the layer's
tests: the objects of one kind, the resources under one component."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stacks.offline_runtime import Registration
from tests.conftest import shipped_plan


def kubernetes_objects(stack: str, kind: str) -> list[dict[str, Any]]:
    """Every Kubernetes object of ``kind`` the stack's plan registers."""
    registrations, _ = shipped_plan(stack)
    return [
        r.inputs
        for r in registrations.values()
        if r.type.startswith("kubernetes:") and r.inputs.get("kind") == kind
    ]


def under_component(
    registrations: Mapping[str, Registration], component_type: str
) -> list[Registration]:
    """Custom resources whose parent chain leads to a component of ``component_type``."""

    def under(record: Registration) -> bool:
        while record.parent in registrations:
            record = registrations[record.parent]
            if record.type == component_type:
                return True
        return False

    return [r for r in registrations.values() if r.custom and under(r)]
