"""The layer as the shipped stacks build it (their offline plans, shared per session):
every object under the KubernetesPlatform is valid for the stack's Kubernetes version,
uses the stack's Kubernetes provider, and the site is declared."""

from __future__ import annotations

import pytest

from stacks.offline_runtime import Registration
from tests.conftest import SHIPPED_STACKS, shipped_plan
from tests.k8s.crd_checks import crd_errors
from tests.k8s.shipped import under_component
from tests.support.k8s_schema import is_builtin, schema_errors

PLATFORM = "gpuplatform:k8s:KubernetesPlatform"
HELM = "kubernetes:helm.sh/v3:Release"


def in_layer(stack: str) -> list[Registration]:
    """Custom resources whose parent chain leads to the KubernetesPlatform component."""
    registrations, _ = shipped_plan(stack)
    return under_component(registrations, PLATFORM)


def layer_objects(stack: str) -> list[dict[str, object]]:
    return [
        r.inputs for r in in_layer(stack) if r.type.startswith("kubernetes:") and r.type != HELM
    ]


def kubernetes_version(stack: str) -> str:
    _, plan = shipped_plan(stack)
    return str(plan["config"]["uae-gpu-platform:kubernetesVersion"])


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_shipped_stack_objects_pass_the_strict_schema_of_its_version(stack: str) -> None:
    objects = layer_objects(stack)
    assert len(objects) > 20
    assert schema_errors([o for o in objects if is_builtin(o)], kubernetes_version(stack)) == []
    assert crd_errors([o for o in objects if not is_builtin(o)]) == []


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_shipped_stack_layer_uses_the_kubernetes_provider(stack: str) -> None:
    layer = in_layer(stack)
    assert layer
    providers = {record.provider for record in layer}
    assert len(providers) == 1
    (provider,) = providers
    assert "$pulumi:providers:kubernetes::" in provider


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_shipped_stack_declares_its_site(stack: str) -> None:
    (site,) = [
        o
        for o in layer_objects(stack)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpuplatform-site"  # type: ignore[index]
    ]
    assert site["data"]["country"] == "AE"  # type: ignore[index]
