"""The LLM rules beside their twins: a compliant plan with the LLM objects as the platform
writes them (`modules.k8s.llm.manifests`: a GPU model on the stack's bucket, a CPU model
scaled to zero, a confidential model in a namespace labelled for restricted data) passes
every rule; each object broken one property at a time, or with the property left out,
fails exactly its rule; and a shipped stack whose LLM model source becomes a public hub
fails review with the residency rule (what `make review` runs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from modules.k8s.llm import manifests as m
from modules.k8s.llm.spec import LLMModelSpec, LLMServiceSpec
from policies.rules.llm import hub_problem, is_hub_id
from stacks.offline_plan import build_plan, load_stack_file
from tests.policies.builder import ECR, PlanBuilder, compliant_plan, default_deny, find_step
from tests.policies.conftest import failing_rules, messages, review
from tests.policies.twins import twin_tests
from tests.support.pools import P5EN

Plan = dict[str, Any]
RESIDENCY, CC = "uae-llm-model-residency", "uae-restricted-gpu-confidential"
LLMISVC = "kubernetes:serving.kserve.io/v1alpha2:LLMInferenceService"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
TRAINJOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
NAMESPACE = "kubernetes:core/v1:Namespace"
REGISTRY = f"{ECR}/gpu-test"
CPU_POOL = P5EN.__class__("preprocess", "preprocess", "m7i.2xlarge", vcpus=8, memory_gib=32)
SOURCE = "s3://uae-data/mlflow/1/models/m-1/artifacts/hf"
SECURE_NS = "team-secure"
HUB = "meta-llama/Llama-3.1-8B-Instruct"


def placed(name: str, namespace: str, pool: Any = P5EN, **model: Any) -> LLMServiceSpec:
    spec = LLMModelSpec(name=name, team="a", pool=pool.name, source=SOURCE, **model)
    return LLMServiceSpec(spec, pool, namespace, SOURCE)


GPU = placed("chat", "team-a", tensor_parallel=1)
CPU = placed("small", "team-a", CPU_POOL, min_replicas=0)
SECURE = placed("secret", SECURE_NS, confidential_computing=True)


def plan_with_llms() -> Plan:
    plan = compliant_plan()
    steps = [s["newState"] for s in plan["steps"]]
    k8s = next(s["urn"] for s in steps if s["type"] == "pulumi:providers:kubernetes")
    provider = f"{k8s}::id"
    builder = PlanBuilder()
    cuda = f"{REGISTRY}/llm-d-cuda:v0.8.0"
    builder.add(LLMISVC, "chat", m.llm_inference_service(GPU, cuda), provider=provider)
    deployment = m.cpu_deployment(CPU, f"{REGISTRY}/vllm-cpu:0.32.0", f"{REGISTRY}/si:v0.20.0")
    builder.add(DEPLOYMENT, "small", deployment, provider=provider)
    restricted = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": SECURE_NS,
            "labels": {"gpuplatform.ae/data-classification": "restricted"},
        },
    }
    builder.add(NAMESPACE, SECURE_NS, restricted, provider=provider)
    builder.add(
        "kubernetes:networking.k8s.io/v1:NetworkPolicy",
        f"{SECURE_NS}-default-deny-all",
        default_deny(SECURE_NS),
        provider=provider,
    )
    builder.add(LLMISVC, "secret", m.llm_inference_service(SECURE, cuda), provider=provider)
    builder.add(TRAINJOB, "finetune", fine_tuning_job(), provider=provider)
    plan["steps"].extend(builder.steps)
    return plan


def fine_tuning_job() -> dict[str, Any]:
    """A fine-tuning TrainJob in the restricted namespace: the base model from the team's
    volume, its node's GPUs on CC nodes (a runtime patch's pod)."""
    cc_pod = {"nodeSelector": {"nvidia.com/cc.mode": "on"}}
    patch = {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": cc_pod}}}}]
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "finetune", "namespace": SECURE_NS},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "image": f"{ECR}/trainer:1.4.2",
                "args": ["--model_name_or_path", "/mnt/checkpoints/models/base"],
                "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}},
            },
            "runtimePatches": [
                {
                    "manager": "gpuplatform.ae/llm",
                    "trainingRuntimeSpec": {"template": {"spec": patch}},
                }
            ],
        },
    }


def trainer(plan: Plan) -> dict[str, Any]:
    return spec_of(plan, TRAINJOB, "finetune")["trainer"]  # type: ignore[no-any-return]


def drop_trainjob_cc(plan: Plan) -> None:
    pod = spec_of(plan, TRAINJOB, "finetune")["runtimePatches"][0]["trainingRuntimeSpec"]
    pod["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"] = {}


def spec_of(plan: Plan, kind: str, name: str) -> dict[str, Any]:
    return find_step(plan, kind, name)["inputs"]["spec"]  # type: ignore[no-any-return]


def set_uri(value: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        model = spec_of(plan, LLMISVC, "chat")["model"]
        if value is None:
            del model["uri"]
        else:
            model["uri"] = value

    return mutate


def add_env(name: str, value: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        container = spec_of(plan, LLMISVC, "chat")["template"]["containers"][0]
        container["env"].append({"name": name, "value": value})

    return mutate


def cpu_argument(container: str, index: int, value: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        pod = spec_of(plan, DEPLOYMENT, "small")["template"]["spec"]
        (found,) = [
            c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == container
        ]
        found["args"][index] = value

    return mutate


def secure_pod(plan: Plan) -> dict[str, Any]:
    return spec_of(plan, LLMISVC, "secret")["template"]  # type: ignore[no-any-return]


def cc_selector(value: str | None) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        selector = secure_pod(plan)["nodeSelector"]
        if value is None:
            del selector["nvidia.com/cc.mode"]
        else:
            selector["nvidia.com/cc.mode"] = value

    return mutate


def cc_affinity(*term_values: list[str]) -> Callable[[Plan], None]:
    """The CC label by a required node affinity instead, one term per value list."""

    def mutate(plan: Plan) -> None:
        pod = secure_pod(plan)
        del pod["nodeSelector"]["nvidia.com/cc.mode"]
        pod["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "nvidia.com/cc.mode", "operator": "In", "values": v}
                            ]
                        }
                        for v in term_values
                    ]
                }
            }
        }

    return mutate


CASES = [
    # the residency rule: failing twins
    ("hf-uri", set_uri(f"hf://{HUB}"), RESIDENCY, "public Hugging Face hub (hf://)"),
    ("hub-url", set_uri(f"https://huggingface.co/{HUB}"), RESIDENCY, "huggingface.co"),
    ("bare-hub-id", set_uri(HUB), RESIDENCY, "bare Hugging Face hub id"),
    ("foreign-bucket", set_uri("s3://someone-elses-bucket/m"), RESIDENCY, "someone-elses-bucket"),
    (
        "hf-endpoint-abroad",
        add_env("HF_ENDPOINT", "https://hf-mirror.com"),
        RESIDENCY,
        "HF_ENDPOINT",
    ),
    ("hub-in-env", add_env("MODEL_ID", f"hf://{HUB}"), RESIDENCY, "MODEL_ID"),
    (
        "cpu-source-bare-id",
        cpu_argument("storage-initializer", 0, HUB),
        RESIDENCY,
        "as the storage initializer's source is a bare Hugging Face hub id",
    ),
    ("cpu-model-flag", cpu_argument("vllm", 1, HUB), RESIDENCY, "after --model"),
    (
        "finetune-hub-base-model",
        lambda plan: trainer(plan)["args"].__setitem__(1, HUB),
        RESIDENCY,
        "spec.trainer (trainer) argument 1: meta-llama/Llama-3.1-8B-Instruct after "
        "--model_name_or_path",
    ),
    (
        "finetune-hf-endpoint",
        lambda plan: trainer(plan)["env"].append(
            {"name": "HF_ENDPOINT", "value": "https://huggingface.co"}
        ),
        RESIDENCY,
        "HF_ENDPOINT https://huggingface.co is not a Service of the cluster",
    ),
    # the residency rule: the missing-property twin
    ("no-model-uri", set_uri(None), RESIDENCY, "names no model source"),
    # the confidential-computing rule: failing and missing twins
    ("cc-off", cc_selector("off"), CC, 'without selecting nvidia.com/cc.mode: "on"'),
    ("cc-one-term-lacks-it", cc_affinity(["on"], ["on", "off"]), CC, "confidential-computing"),
    ("no-cc-selector", cc_selector(None), CC, "asks for nvidia.com/gpu"),
    ("finetune-not-on-cc-nodes", drop_trainjob_cc, CC, "TrainJob team-secure/finetune"),
]

test_the_plan_passes_every_rule, test_the_broken_plan_fails_exactly_the_rule = twin_tests(
    plan_with_llms, CASES
)


def test_the_rules_judge_the_llm_objects() -> None:
    evaluated = {r.rule.id: r.evaluated for r in review(plan_with_llms()).results}
    # Two LLMInferenceServices, the CPU Deployment, the TrainJob.
    assert evaluated[RESIDENCY] == 4
    assert evaluated[CC] >= 3


def test_cc_by_node_affinity_passes_when_every_term_selects_it() -> None:
    plan = plan_with_llms()
    cc_affinity(["on"], ["on"])(plan)
    assert CC not in failing_rules(plan)


def test_gpus_outside_restricted_namespaces_need_no_cc() -> None:
    """The chat model (team-a, unlabelled) selects no CC nodes and passes; label its
    namespace restricted and it fails."""
    plan = plan_with_llms()
    assert "nvidia.com/cc.mode" not in spec_of(plan, LLMISVC, "chat")["template"]["nodeSelector"]
    assert CC not in failing_rules(plan)
    find_step(plan, NAMESPACE, "team-a")["inputs"]["metadata"]["labels"] = {
        "gpuplatform.ae/data-classification": "restricted"
    }
    found = messages(plan, CC)
    # The Job `train` there asks for no GPU: only the model is refused.
    assert [f.split(" spec.")[0] for f in found] == ["LLMInferenceService team-a/llm-chat"]


def test_hub_references_are_told_from_paths() -> None:
    assert is_hub_id(HUB) and is_hub_id("Qwen/Qwen2.5-0.5B-Instruct")
    for path in ("/mnt/models", "./out/hf", "s3://uae-data/x", "pvc://claim/x", "model"):
        assert not is_hub_id(path), path
    assert hub_problem("https://hf.co/org/m")
    assert hub_problem("s3://uae-data/huggingface-copies/m") is None
    assert hub_problem("/models/hf/x") is None


@pytest.fixture(scope="module")
def hub_sourced_uae_prod() -> Plan:
    """uae-prod's plan with its LLM model's source changed to a public hub (one offline
    plan, as `make review STACK=uae-prod` builds it)."""
    config, _ = load_stack_file("uae-prod")
    llm = json.loads(config["uae-gpu-platform:llm"])
    model = llm["models"][0]
    del model["storagePath"]
    model["source"] = f"hf://{HUB}"
    config["uae-gpu-platform:llm"] = json.dumps(llm)
    return build_plan("uae-prod", config)


def test_a_shipped_stack_with_a_hub_model_fails_review(hub_sourced_uae_prod: Plan) -> None:
    result = review(hub_sourced_uae_prod)
    assert not result.passed
    found = [f.message for f in result.mandatory_violations if f.rule_id == RESIDENCY]
    assert found == [
        f"LLMInferenceService llm-uae-gpt-chat: hf://{HUB} is the public Hugging Face hub (hf://)"
    ]
    # Nothing else mandatory broke: the rule alone stops it.
    assert {f.rule_id for f in result.mandatory_violations} == {RESIDENCY}
