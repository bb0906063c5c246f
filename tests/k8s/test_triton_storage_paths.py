"""The shipped stacks' Triton services point where `make register` logs a version's Triton
repository: the same path pattern (`workloads.layout`), which the lifecycle tests check
register writes (tests/workloads/test_lifecycle_registry.py)."""

from __future__ import annotations

import pytest

from modules.k8s.serving.inference_service.component import TYPE_TOKEN
from modules.k8s.serving.inference_service.spec import InferenceServiceSpec, ModelVersion
from modules.validation import InvalidArgsError
from tests.conftest import shipped_plan
from tests.k8s.fixtures import G6
from workloads.layout import TRITON_DIR, TRITON_STORAGE_PATH, triton_storage_path

ISVC = "kubernetes:serving.kserve.io/v1beta1:InferenceService"


def test_the_stacks_triton_services_point_at_a_registered_triton_repository() -> None:
    # Every shipped stack that serves with Triton points at such a path in its bucket.
    triton_stacks = 0
    for stack in ("uae-prod", "uae-dev", "smb-cpu", "onprem-ib"):
        registrations, _ = shipped_plan(stack)
        components = {r.urn for r in registrations.values() if r.type == TYPE_TOKEN}
        (isvc,) = [
            r.inputs for r in registrations.values() if r.type == ISVC and r.parent in components
        ]
        model = isvc["spec"]["predictor"]["model"]
        if model["runtime"] != "uae-triton":
            continue
        triton_stacks += 1
        uri = model["storageUri"]
        if uri.startswith("s3://"):
            assert TRITON_STORAGE_PATH.match(uri.split("/", 3)[3]), (stack, uri)
        else:  # on premises: an export (or download) on the team's volume
            assert uri.startswith("pvc://") and uri.endswith(f"/{TRITON_DIR}"), (stack, uri)
    assert triton_stacks == 3


def _triton_service(path: str, store: str = "s3") -> InferenceServiceSpec:
    return InferenceServiceSpec(
        name="uae-gpt",
        namespace="team-nlp",
        model_name="uae-gpt",
        model=ModelVersion(1, path),
        pool=G6,  # a GPU pool: Triton
        client_namespaces=("team-nlp",),
        store=store,
        bucket="gpu-test-data" if store == "s3" else None,
        claim="checkpoints" if store == "pvc" else None,
    )


def test_a_triton_service_must_name_a_triton_repository() -> None:
    assert _triton_service(triton_storage_path("1", "m-0123abcd")).runtime == "uae-triton"
    _triton_service("models/uae-gpt/1/triton", store="pvc")
    for wrong, store in (
        ("mlflow/1/models/m-0123abcd/artifacts", "s3"),  # the MLflow model, not Triton's
        ("mlflow/1/models/m-0123abcd/artifacts/onnx", "s3"),
        ("mlflow/1/0123abcd/artifacts/triton", "s3"),  # run artifacts: register writes none
        ("models/uae-gpt/1", "pvc"),
    ):
        with pytest.raises(InvalidArgsError, match="a Triton model repository"):
            _triton_service(wrong, store=store)
