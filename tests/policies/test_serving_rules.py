"""The serving rules beside their compliant twin: storage in the stack's stores, images
from the in-region registry, properties left out, values unknown during preview."""

from __future__ import annotations

from policies.rules.serving import storage_problem
from tests.policies.builder import compliant_plan
from tests.policies.conftest import failing_rules, messages, review
from tests.policies.serving_cases import GOOD_URI, MISSING, add_serving

UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def test_the_compliant_twin_passes_every_rule() -> None:
    plan = compliant_plan()
    add_serving(plan, canary_uri="s3://uae-data/mlflow/1/models/m-2/artifacts/int8")
    result = review(plan)
    assert result.violations == []
    evaluated = {r.rule.id: r.evaluated for r in result.results}
    # Both rules looked at the serving objects (the runtime and the service).
    assert evaluated["uae-serving-model-storage"] >= 1
    assert evaluated["uae-serving-images"] == 2


def test_a_volume_claim_is_a_stack_store() -> None:
    plan = compliant_plan()
    add_serving(plan, storage_uri="pvc://checkpoints/models/uae-gpt/1")
    assert failing_rules(plan) == set()


def test_a_foreign_bucket_fails_beside_its_twin() -> None:
    good, bad = compliant_plan(), compliant_plan()
    add_serving(good)
    add_serving(bad, storage_uri="s3://someone-elses-bucket/mlflow/1")
    assert failing_rules(good) == set()
    assert failing_rules(bad) == {"uae-serving-model-storage"}
    (message,) = messages(bad, "uae-serving-model-storage")
    assert "someone-elses-bucket" in message and "uae-data" in message


def test_a_foreign_runtime_image_fails_beside_its_twin() -> None:
    bad = compliant_plan()
    add_serving(bad, runtime_image="nvcr.io/nvidia/tritonserver:25.09-py3")
    # The general container rule agrees; the serving rule names the runtime's container.
    assert failing_rules(bad) == {"uae-serving-images", "uae-container-image-registry"}
    assert any("nvcr.io" in m for m in messages(bad, "uae-serving-images"))


def test_a_runtime_container_without_image_is_a_violation() -> None:
    plan = compliant_plan()
    add_serving(plan, runtime_image=MISSING)
    assert "uae-serving-images" in failing_rules(plan)
    assert any("names no image" in m for m in messages(plan, "uae-serving-images"))


def test_an_unknown_storage_uri_cannot_be_checked_during_preview() -> None:
    plan = compliant_plan()
    add_serving(plan, storage_uri=UNKNOWN)
    result = review(plan)
    assert result.violations == []
    assert [f.rule_id for f in result.findings if f.unknown] == ["uae-serving-model-storage"]


def test_storage_problem_names_each_kind_of_foreign_store() -> None:
    buckets = {"uae-data"}
    assert storage_problem(GOOD_URI, buckets) is None
    assert storage_problem("pvc://models/x", buckets) is None
    assert "https://" in (storage_problem("https://example.com/m.onnx", buckets) or "")
    assert "hf://" in (storage_problem("hf://org/model", buckets) or "")
    assert "no volume claim" in (storage_problem("pvc:///x", buckets) or "")
    assert "not a URI" in (storage_problem("uae-data/mlflow/1", buckets) or "")
    assert storage_problem(None, buckets) == "names no storage URI"
