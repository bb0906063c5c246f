"""The TrainingJob example in docs/workloads.md names what a shipped stack creates."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

import modules.k8s.trainer.training_job.component
from modules.k8s.names import CHECKPOINT_CLAIM_NAME, TRAINER_SERVICE_ACCOUNT
from modules.k8s.trainer.training_job.manifests import training_job_manifests
from modules.k8s.trainer.training_job.spec import TrainingJobSpec
from stacks.offline_runtime import Registration
from tests.conftest import shipped_plan
from tests.k8s.crd_checks import crd_errors
from tests.support.pools import P5EN

DOC = Path(__file__).resolve().parents[2] / "docs" / "workloads.md"
STACK = "uae-prod"


def example_code() -> str:
    """The ```python block of the doc that declares a TrainingJob."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    (code,) = [b for b in blocks if "TrainingJobSpec(" in b]
    return code


def run_example(monkeypatch: pytest.MonkeyPatch) -> tuple[TrainingJobSpec, str]:
    """Execute the example as written, with the stack program's variables it expects
    (``args``, ``provider``, ``image``) and TrainingJob recorded instead of registered."""
    declared: list[tuple[str, TrainingJobSpec]] = []

    def record(name: str, spec: TrainingJobSpec, provider: object) -> None:
        declared.append((name, spec))

    pools = (dataclasses.replace(P5EN, name="h200"),)  # uae-prod's h200 pool is a p5en pool
    image = "123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-uae-prod/training:0.1.0"
    scope: dict[str, Any] = {"args": SimpleNamespace(pools=pools), "provider": object(),
                             "image": image}  # fmt: skip
    # Only while the example runs: the stack program (shipped_plan) imports the real one.
    with monkeypatch.context() as patched:
        patched.setattr(modules.k8s.trainer.training_job.component, "TrainingJob", record)
        exec(compile(example_code(), str(DOC), "exec"), scope)
    ((_, spec),) = declared
    pool_name = re.search(r'p\.name == "([^"]+)"', example_code())
    assert pool_name is not None
    return spec, pool_name.group(1)


def named(registrations: dict[str, Registration], kind: str, name: str, ns: str | None) -> bool:
    return any(
        r.type.startswith("kubernetes:")
        and r.type.endswith(f":{kind}")
        and r.inputs.get("metadata", {}).get("name") == name
        and r.inputs.get("metadata", {}).get("namespace") == ns
        for r in registrations.values()
    )


def test_the_example_runs_against_what_the_shipped_stack_creates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec, pool = run_example(monkeypatch)
    registrations, _ = shipped_plan(STACK)
    ns = spec.namespace
    assert named(registrations, "Namespace", ns, None), ns
    assert named(registrations, "LocalQueue", spec.local_queue, ns), spec.local_queue
    assert named(registrations, "ServiceAccount", spec.service_account, ns)
    assert named(registrations, "PersistentVolumeClaim", spec.checkpoint_claim, ns)
    assert named(registrations, "PriorityClass", spec.priority_class, None)
    assert named(registrations, "ResourceFlavor", pool, None), pool
    # The team may use the priority: no quota in its namespace forbids it.
    forbidden = [
        expr["values"]
        for r in registrations.values()
        if r.type == "kubernetes:core/v1:ResourceQuota"
        and r.inputs["metadata"].get("namespace") == ns
        for expr in r.inputs["spec"].get("scopeSelector", {}).get("matchExpressions", [])
    ]
    assert all(spec.priority_class not in values for values in forbidden)


def test_uae_dev_gpu_sharing_is_what_docs_kubernetes_says() -> None:
    """docs/kubernetes.md: uae-dev's default is whole GPUs; only l4-shared is time-sliced."""
    doc = (DOC.parent / "kubernetes.md").read_text(encoding="utf-8")
    assert "`uae-dev` is such a stack: its `l4` pool gives whole" in doc
    registrations, _ = shipped_plan("uae-dev")
    (operator,) = [
        r
        for r in registrations.values()
        if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs.get("chart") == "gpu-operator"
    ]
    device_plugin = operator.inputs["values"]["devicePlugin"]["config"]
    assert device_plugin["default"] == "default"
    groups = {
        r.inputs["labels"]["gpuplatform.ae/pool"]: r.inputs["labels"]
        for r in registrations.values()
        if r.type == "aws:eks/nodeGroup:NodeGroup"
    }
    assert "nvidia.com/device-plugin.config" not in groups["l4"]
    assert groups["l4-shared"]["nvidia.com/device-plugin.config"] == "l4-shared"


def test_the_examples_trainjob_names_a_runtime_the_stack_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec, _ = run_example(monkeypatch)
    (job,) = training_job_manifests(spec)
    registrations, _ = shipped_plan(STACK)
    assert named(registrations, "ClusterTrainingRuntime", job["spec"]["runtimeRef"]["name"], None)


def doc_trainjobs() -> list[dict[str, Any]]:
    """The TrainJobs of the doc's "How a team submits each kind of job"."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    docs = [yaml.safe_load(b) for b in blocks]
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "TrainJob"]


def test_the_docs_trainjobs_are_valid_and_name_what_the_stack_creates() -> None:
    jobs = doc_trainjobs()
    runtimes = {j["spec"]["runtimeRef"]["name"].split("-", 1)[0] for j in jobs}
    assert runtimes == {"torch", "deepspeed", "mpi"}  # one example of each kind
    assert crd_errors(jobs) == []
    registrations, _ = shipped_plan(STACK)
    for job in jobs:
        ns = job["metadata"]["namespace"]
        assert named(registrations, "Namespace", ns, None), ns
        queue = job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
        assert named(registrations, "LocalQueue", queue, ns), queue
        runtime = job["spec"]["runtimeRef"]["name"]
        assert named(registrations, "ClusterTrainingRuntime", runtime, None), runtime
        trainer = job["spec"]["trainer"]
        if runtime.startswith("mpi-"):
            assert trainer["numNodes"] >= 2
        else:
            assert "--rdzv_endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)" in trainer["args"]
            assert ("--engine=deepspeed" in trainer["args"]) == runtime.startswith("deepspeed")


def test_the_docs_elastic_trainjob_is_what_a_trainingjob_with_min_nodes_makes() -> None:
    """docs/workloads.md, "An elastic TrainJob on the cluster": the TrainJob with a node
    range is the one `TrainingJobSpec(min_nodes=...)` emits for uae-prod's h200 pool."""
    elastic = [
        j
        for j in doc_trainjobs()
        if any(a.startswith("--nnodes=") for a in j["spec"]["trainer"].get("args", []))
    ]
    (doc,) = elastic
    (low, high) = next(a.removeprefix("--nnodes=") for a in doc["spec"]["trainer"]["args"]).split(
        ":"
    )
    spec = TrainingJobSpec(
        name=doc["metadata"]["name"],
        namespace=doc["metadata"]["namespace"],
        pool=dataclasses.replace(P5EN, name="h200"),
        local_queue=doc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        priority_class="research",
        service_account=TRAINER_SERVICE_ACCOUNT,
        image="123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-uae-prod/training:0.1.0",
        checkpoint_claim=CHECKPOINT_CLAIM_NAME,
        preset="gpt2-350m",
        nodes=int(high),
        min_nodes=int(low),
        extra_args=("--grad-accum-steps=1",),
    )
    (emitted,) = training_job_manifests(spec)
    assert "runtimePatches" not in emitted["spec"]
    assert doc["spec"]["runtimeRef"]["name"] == emitted["spec"]["runtimeRef"]["name"]
    for key in ("numNodes", "numProcPerNode", "command", "args", "env"):
        assert doc["spec"]["trainer"][key] == emitted["spec"]["trainer"][key], key
