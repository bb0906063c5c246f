"""The fine-tuning TrainJob (`modules.k8s.trainer.finetune_job`): valid against the
vendored Trainer CRDs, on a runtime the platform makes for its pool, the fine-tuning
image's module with the base read from the team's in-region volume and the hub libraries
offline; a hub source is refused by the spec and, put into the manifest by hand, by the
policy pack's residency rule (what `make review` runs), while the job as made passes
every rule."""

from __future__ import annotations

from typing import Any

import pytest

from modules.k8s.trainer.finetune_job import FinetuneJobSpec, finetune_job_manifest
from modules.k8s.trainer.runtimes import runtime_name
from modules.pools import NodePoolProfile
from modules.validation import InvalidArgsError
from tests.k8s.crd_checks import crd_errors
from tests.policies.builder import ECR, PlanBuilder, compliant_plan
from tests.policies.conftest import failing_rules, messages
from tests.support.pools import P5EN

CPU_TRAINING = NodePoolProfile(
    "cpu-train", "cpu-training", "m7i.8xlarge", vcpus=32, memory_gib=128, max_size=2
)
TRAINJOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
RESIDENCY = "uae-llm-model-residency"
HUB = "meta-llama/Llama-3.1-8B-Instruct"
IMAGE = f"{ECR}/finetune:0.1.0"


def spec(**changes: Any) -> FinetuneJobSpec:
    values: dict[str, Any] = {
        "name": "finetune-demo",
        "namespace": "team-a",
        "pool": CPU_TRAINING,
        "local_queue": "team-a",
        "priority_class": "research",
        "service_account": "training-team-a",
        "image": IMAGE,
        "checkpoint_claim": "team-a-checkpoints",
        "base": "pvc://team-a-checkpoints/models/llama-base",
        "data": "pvc://team-a-checkpoints/data/pairs.jsonl",
        "out": "pvc://team-a-checkpoints/finetune/demo",
        "extra_args": ("--steps", "200"),
    }
    return FinetuneJobSpec(**(values | changes))


def test_the_trainjob_passes_the_vendored_crds_and_runs_the_finetune_offline() -> None:
    manifest = finetune_job_manifest(spec())
    assert crd_errors([manifest]) == []
    assert manifest["kind"] == "TrainJob" and manifest["spec"]["suspend"] is True
    assert manifest["spec"]["runtimeRef"]["name"] == runtime_name("torch", "cpu-train", "research")
    trainer = manifest["spec"]["trainer"]
    assert trainer["image"] == IMAGE and trainer["numNodes"] == 1
    assert trainer["numProcPerNode"] == 1
    assert trainer["command"] == ["python", "-m", "workloads.finetune"]
    assert trainer["args"] == [
        "--base-model", "/checkpoints/models/llama-base",
        "--data", "/checkpoints/data/pairs.jsonl",
        "--out", "/checkpoints/finetune/demo",
        "--steps", "200",
    ]  # fmt: skip
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["HF_HOME"].startswith("/tmp/")  # the root filesystem is read-only
    # The team's claim and ServiceAccount replace the runtime's (its patch).
    pod = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod = pod["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "training-team-a"
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]]
    assert claims == ["team-a-checkpoints"]
    # Held: no queue label until a user releases it.
    assert "kueue.x-k8s.io/queue-name" not in manifest["metadata"]["labels"]
    released = finetune_job_manifest(spec(hold=False))
    assert released["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"


@pytest.mark.parametrize(
    ("changes", "field", "needle"),
    [
        ({"base": HUB}, "base", "pvc://team-a-checkpoints/<path>"),
        ({"base": f"hf://{HUB}"}, "base", "a hub id, hf://"),
        ({"base": f"https://huggingface.co/{HUB}"}, "base", "pvc://"),
        ({"data": "s3://uae-data/pairs.jsonl"}, "data", "s3:// model is first copied"),
        ({"base": "pvc://other-claim/models/x"}, "base", "the team's checkpoint volume"),
        ({"out": "pvc://team-a-checkpoints/../x"}, "out", "without '..'"),
        ({"out": "pvc://team-a-checkpoints/models/llama-base/out"}, "out", "outside base"),
        ({"pool": P5EN}, "pool", "runs on CPUs"),
        ({"extra_args": ("--out=/tmp/x",)}, "extra_args", "other options"),
        ({"name": "9-starts-with-a-digit"}, "name", "starts with a letter"),
        ({"image": f"{ECR}/finetune:latest"}, "image", "not 'latest'"),
    ],
)
def test_the_spec_refuses_what_is_not_in_region_or_cannot_run(
    changes: dict[str, Any], field: str, needle: str
) -> None:
    with pytest.raises(InvalidArgsError) as refused:
        spec(**changes)
    assert [p.field for p in refused.value.problems] == [field]
    assert needle in refused.value.problems[0].expected


def plan_with(manifest: dict[str, Any]) -> dict[str, Any]:
    plan = compliant_plan()
    steps = [s["newState"] for s in plan["steps"]]
    provider = next(s["urn"] for s in steps if s["type"] == "pulumi:providers:kubernetes")
    builder = PlanBuilder()
    builder.add(TRAINJOB, "finetune-demo", manifest, provider=f"{provider}::id")
    plan["steps"].extend(builder.steps)
    return plan


def test_the_in_region_job_passes_review_and_a_hub_base_fails_it() -> None:
    assert failing_rules(plan_with(finetune_job_manifest(spec()))) == set()
    for source, why in ((HUB, "is a bare Hugging Face hub id"), (f"hf://{HUB}", "(hf://)")):
        manifest = finetune_job_manifest(spec())
        manifest["spec"]["trainer"]["args"][1] = source
        plan = plan_with(manifest)
        assert failing_rules(plan) == {RESIDENCY}
        assert messages(plan, RESIDENCY) == [
            # Argument 4: the command's three words, then --base-model.
            f"TrainJob finetune-demo spec.trainer (trainer) argument 4: {source} "
            + (
                f"after --base-model {why}"
                if source == HUB
                else f"is the public Hugging Face hub {why}"
            )
        ]
