"""The example model service as each shipped stack deploys it (offline plans, shared per
session): strictly valid, stopped until released, its model in the stack's own store."""

from __future__ import annotations

from typing import Any

import pytest

from modules.k8s.serving.inference_service.component import TYPE_TOKEN
from stacks.offline_runtime import Registration
from tests.conftest import SHIPPED_STACKS, shipped_plan
from tests.k8s.crd_checks import crd_errors
from tests.support.k8s_schema import is_builtin, schema_errors

ISVC = "kubernetes:serving.kserve.io/v1beta1:InferenceService"
BUCKET = "aws:s3/bucket:Bucket"


def service_objects(stack: str) -> list[Registration]:
    registrations, _ = shipped_plan(stack)
    components = {r.urn for r in registrations.values() if r.type == TYPE_TOKEN}
    return [r for r in registrations.values() if r.parent in components]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_the_example_service_is_valid_and_held(stack: str) -> None:
    _, plan = shipped_plan(stack)
    version = str(plan["config"]["uae-gpu-platform:kubernetesVersion"])
    objects: list[dict[str, Any]] = [r.inputs for r in service_objects(stack)]
    assert {o["kind"] for o in objects} >= {
        "InferenceService",
        "Service",
        "NetworkPolicy",
        "Role",
        "RoleBinding",
        "ConfigMap",
    }
    assert schema_errors([o for o in objects if is_builtin(o)], version) == []
    assert crd_errors([o for o in objects if not is_builtin(o)]) == []
    (isvc,) = [o for o in objects if o["kind"] == "InferenceService"]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/stop"] == "true"


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_the_example_model_comes_from_the_stacks_own_store(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    buckets = {r.inputs["bucket"] for r in registrations.values() if r.type == BUCKET}
    (isvc,) = [r.inputs for r in service_objects(stack) if r.type == ISVC]
    uris = [isvc["spec"]["predictor"]["model"]["storageUri"]]
    uris += [c["predictor"]["model"]["storageUri"] for c in isvc["spec"].get("canary", [])]
    for uri in uris:
        if stack == "onprem-ib":
            assert uri.startswith("pvc://checkpoints/")
        else:
            assert uri.startswith("s3://") and "/mlflow/" in uri
            # The data bucket of this stack, below MLflow's artifact prefix.
            assert uri.split("/")[2] in buckets and uri.split("/")[2].endswith("-data-123456789012")
