"""The whole layer run under mocks once per (stack, version), shared by the tests."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import pulumi_kubernetes as k8s

from modules.k8s.platform.component import KubernetesPlatform
from modules.k8s.platform.spec import KubernetesPlatformArgs
from tests.k8s.fixtures import eks_args, onprem_args
from tests.k8s.mock_runtime import Registered, run

HELM = "kubernetes:helm.sh/v3:Release"
STACKS: dict[str, Callable[..., KubernetesPlatformArgs]] = {"eks": eks_args, "onprem": onprem_args}


@cache
def registrations(stack: str, version: str = "1.33") -> tuple[Registered, ...]:
    """Every registration of the platform for an EKS-like or on-prem-like stack."""

    def program() -> None:
        provider = k8s.Provider("cluster", kubeconfig="{}")
        KubernetesPlatform("platform", STACKS[stack](version, provider=provider))

    return tuple(run(program))


def manifests(records: tuple[Registered, ...]) -> list[dict[str, Any]]:
    """The Kubernetes objects registered from manifests (not Helm releases)."""
    return [
        r.inputs
        for r in records
        if r.custom and r.type.startswith("kubernetes:") and r.type != HELM
    ]


def of_kind(records: tuple[Registered, ...], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests(records) if m["kind"] == kind]


def releases(records: tuple[Registered, ...]) -> dict[str, dict[str, Any]]:
    """Helm releases by release name, with their inputs."""
    return {r.inputs["name"]: r.inputs for r in records if r.type == HELM}
