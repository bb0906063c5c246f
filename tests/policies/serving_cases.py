"""Serving objects (KServe) added to the compliant plan, compliant or broken one way each.

`add_serving` appends an InferenceService and a ClusterServingRuntime that every rule
accepts; its keyword arguments break one property. `SERVING_CASES` are the cases of
`tests/policies/test_rules.py` (each fails exactly one rule).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.policies.builder import ECR, PlanBuilder, secure_pod

Plan = dict[str, Any]
ISVC = "kubernetes:serving.kserve.io/v1beta1:InferenceService"
RUNTIME = "kubernetes:serving.kserve.io/v1alpha1:ClusterServingRuntime"
GOOD_URI = "s3://uae-data/mlflow/1/models/m-1/artifacts/int8"
GOOD_IMAGE = f"{ECR}/gpu-test/predictor:0.1.0"
MISSING = object()


def k8s_provider(plan: Plan) -> str:
    for step in plan["steps"]:
        state = step["newState"]
        if state["type"] == "pulumi:providers:kubernetes":
            return f"{state['urn']}::cluster-0000"
    raise KeyError("the plan has no Kubernetes provider")


def add_serving(
    plan: Plan,
    *,
    storage_uri: Any = GOOD_URI,
    canary_uri: Any = None,
    runtime_image: Any = GOOD_IMAGE,
    model_image: str | None = None,
) -> None:
    """Append a compliant InferenceService and runtime; ``MISSING`` drops a property."""
    provider = k8s_provider(plan)
    builder = PlanBuilder()
    model: dict[str, Any] = {"modelFormat": {"name": "uae-gpt"}, "runtime": "uae-cpu"}
    if storage_uri is not MISSING:
        model["storageUri"] = storage_uri
    if model_image is not None:
        model["image"] = model_image
    predictor = {**secure_pod(f"{ECR}/gpu-test/kube-rbac-proxy:v0.18.0"), "model": model}
    predictor.pop("restartPolicy")
    spec: dict[str, Any] = {"predictor": predictor}
    if canary_uri is not None:
        canary_model = {**model, "storageUri": canary_uri}
        spec["canary"] = [
            {"trafficPercent": 10, "predictor": {"name": "v2", "model": canary_model}}
        ]
    builder.add(
        ISVC,
        "example",
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "example", "namespace": "team-a"},
            "spec": spec,
        },
        provider=provider,
    )
    runtime_pod = secure_pod(GOOD_IMAGE)
    container = runtime_pod["containers"][0]
    if runtime_image is MISSING:
        del container["image"]
    else:
        container["image"] = runtime_image
    builder.add(
        RUNTIME,
        "uae-cpu",
        {
            "apiVersion": "serving.kserve.io/v1alpha1",
            "kind": "ClusterServingRuntime",
            "metadata": {"name": "uae-cpu"},
            "spec": {
                "supportedModelFormats": [{"name": "uae-gpt", "autoSelect": True}],
                "securityContext": runtime_pod["securityContext"],
                "containers": runtime_pod["containers"],
            },
        },
        provider=provider,
    )
    plan["steps"].extend(copy.deepcopy(builder.steps))


def serving(**broken: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        add_serving(plan, **broken)

    return mutate


SERVING_CASES: list[tuple[str, Callable[[Plan], None], str, str]] = [
    (
        "isvc-foreign-bucket",
        serving(storage_uri="s3://models-eu-west-1/uae-gpt/1"),
        "uae-serving-model-storage",
        "'models-eu-west-1'",
    ),
    (
        "isvc-canary-foreign-store",
        serving(canary_uri="gs://public-models/uae-gpt/2"),
        "uae-serving-model-storage",
        "gs://",
    ),
    (
        "isvc-storage-missing",
        serving(storage_uri=MISSING),
        "uae-serving-model-storage",
        "names no storage URI",
    ),
    (
        "isvc-foreign-model-image",
        serving(model_image="nvcr.io/nvidia/tritonserver:25.09-py3"),
        "uae-serving-images",
        "nvcr.io",
    ),
]
