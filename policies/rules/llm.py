"""Language models: their weights come from the UAE, and restricted data meets GPUs only
in confidential-computing mode.

* Model residency (``uae-llm-model-residency``): an LLM service or a fine-tuning job
  loads its model from the stack's own stores only. Judged: KServe's
  ``LLMInferenceService`` and ``LLMInferenceServiceConfig`` (``spec.model.uri``, which
  must be named, and be ``s3://`` of a bucket this stack creates or ``pvc://`` of a
  claim in the cluster, `policies.rules.serving.storage_problem`), the platform's vLLM
  CPU Deployments (pods labelled ``gpuplatform.ae/llm``) and Kubeflow Trainer
  ``TrainJob``s. In every container of these (and of the LLM objects' pod templates, and
  a TrainJob's ``spec.trainer``: its command, arguments and variables), a
  public hub is refused wherever the model is named: an ``hf://`` URI or a
  ``huggingface.co`` / ``hf.co`` address in an argument or a variable, a bare hub id
  (``org/model``) after a model flag (``--model``, ``--model-name-or-path``,
  ``--tokenizer``...) or as the storage initializer's source, and an ``HF_ENDPOINT``
  that is not a Service of the cluster (``*.svc``, ``*.svc.cluster.local``): the
  Hugging Face libraries download from that endpoint, so a mirror outside the region is
  a hub outside the region.
* Confidential computing (``uae-restricted-gpu-confidential``): a namespace labelled
  ``gpuplatform.ae/data-classification: restricted`` runs GPU work only on nodes whose
  GPUs are in confidential-computing mode: every pod spec in it that asks for
  ``nvidia.com/gpu`` selects ``nvidia.com/cc.mode: "on"`` (a ``nodeSelector``, or a
  required node affinity with that one value), the label the GPU Operator's CC manager
  acts on (docs/llm-cluster.md, "Confidential computing"). A TrainJob whose trainer asks
  for GPUs (``resourcesPerNode``) must say so in a runtime patch's pod: its runtime's
  pods are not in the plan.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

from modules.k8s.llm.spec import CC_MODE_LABEL, CC_MODE_ON, CPU_MODEL_LABEL
from policies.catalogue import stack_rule
from policies.k8s import Container, containers, has_pod_spec, kind_of, metadata, pod_specs
from policies.model import ResourceView, StackFindings, StackView
from policies.rules.checks import stack_buckets
from policies.rules.serving import storage_problem
from policies.settings import Settings
from policies.values import Deferred, dig, known

LLMISVC_TYPE = "kubernetes:serving.kserve.io/v1alpha2:LLMInferenceService"
LLMISVC_CONFIG_TYPE = "kubernetes:serving.kserve.io/v1alpha2:LLMInferenceServiceConfig"
TRAINJOB_TYPE = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
NAMESPACE_TYPE = "kubernetes:core/v1:Namespace"
#: The namespace label that marks restricted data, and the node label of GPUs in
#: confidential-computing mode.
RESTRICTED_LABEL = "gpuplatform.ae/data-classification"
RESTRICTED_VALUE = "restricted"
GPU_RESOURCE = "nvidia.com/gpu"

#: Hosts of the public hub (its website, API and CDN names).
HUB_HOSTS = ("huggingface.co", "hf.co")
_HUB_TEXT = re.compile(r"\bhf://|(?:^|[/.@\s])(?:huggingface\.co|hf\.co)\b", re.IGNORECASE)
#: Stands for the storage initializer's first argument (its source) among the flags.
SOURCE_ARGUMENT = "<storage-initializer source>"
#: Flags after which a model (or its tokenizer) is named: vLLM's, transformers' examples'.
MODEL_FLAGS = frozenset(
    {
        "--model",
        "--model-name-or-path",
        "--model_name_or_path",
        "--tokenizer",
        "--base-model",
        "--base_model",
        "--served-model-path",
        SOURCE_ARGUMENT,
    }
)
#: A bare hub id: ``org/name`` (letters, digits, ``-_.``), no scheme, not a path.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hub_id(value: str) -> bool:
    """Whether ``value`` reads as a Hugging Face hub id (``meta-llama/Llama-3.1-8B``)
    rather than a path (``/mnt/models``, ``./out``) or a URI."""
    return bool(_HUB_ID.fullmatch(value)) and not value.startswith((".", "/"))


def hub_problem(value: str) -> str | None:
    """Why a model reference is a public hub (None when it is not)."""
    if value.lower().startswith("hf://"):
        return f"{value} is the public Hugging Face hub (hf://)"
    if _HUB_TEXT.search(value):
        return f"{value} is on the public Hugging Face hub (huggingface.co)"
    return None


def _in_cluster(endpoint: str) -> bool:
    host = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}").hostname or ""
    return host.endswith((".svc", ".svc.cluster.local"))


def model_uri_problem(uri: Any, buckets: set[str]) -> str | None:
    """Why an LLM object's ``spec.model.uri`` is not in the stack's stores."""
    if not isinstance(uri, str) or not uri:
        return "names no model source (spec.model.uri)"
    hub = hub_problem(uri)
    if hub is not None:
        return hub
    if is_hub_id(uri):
        return f"{uri} is a bare Hugging Face hub id, fetched from the public hub"
    return storage_problem(uri, buckets)


def _containers_and_trainer(resource: ResourceView) -> Iterator[Container]:
    """Every container of the object, and a TrainJob's ``spec.trainer`` (its command,
    arguments and variables, which Kubeflow Trainer puts into the trainer container)."""
    yield from containers(resource)
    trainer = dig(resource.props, "spec", "trainer")
    if resource.type == TRAINJOB_TYPE and isinstance(trainer, Mapping):
        yield Container("spec.trainer", {"name": "trainer", **trainer}, {})


def container_problems(resource: ResourceView) -> Iterator[tuple[str, Any, str]]:
    """(path, value, why) of each place a container names a hub or sends the Hugging
    Face libraries outside the cluster (values may be unknown: the caller decides)."""
    for container in _containers_and_trainer(resource):
        args = [*(container.spec.get("command") or []), *(container.spec.get("args") or [])]
        for index, raw in enumerate(args):
            path = f"{container.path} ({container.name}) argument {index}"
            if not isinstance(raw, str):
                yield path, raw, ""
                continue
            arg = raw
            previous = args[index - 1] if index else None
            if container.name == "storage-initializer" and index == 0:
                previous = SOURCE_ARGUMENT  # KServe's initializer: source, then destination
            flag, eq, rest = arg.partition("=")
            if eq and flag in MODEL_FLAGS:
                previous, arg = flag, rest
            why = hub_problem(arg)
            if why is None and previous in MODEL_FLAGS and is_hub_id(arg):
                where = (
                    "as the storage initializer's source"
                    if previous == SOURCE_ARGUMENT
                    else f"after {previous}"
                )
                why = f"{arg} {where} is a bare Hugging Face hub id"
            if why:
                yield path, arg, why
        for item in container.spec.get("env") or []:
            if not isinstance(item, Mapping) or "value" not in item:
                continue
            name, value = item.get("name"), item["value"]
            path = f"{container.path} ({container.name}) env {name}"
            if name == "HF_ENDPOINT":
                if not isinstance(value, str) or not _in_cluster(value):
                    why = f"HF_ENDPOINT {value} is not a Service of the cluster"
                    yield path, value, why
            elif isinstance(value, str) and (why := hub_problem(value)):
                yield path, value, why


def is_llm_workload(resource: ResourceView) -> bool:
    """LLM services (KServe's LLMInferenceService and its configs, the platform's vLLM
    CPU Deployments: pods labelled ``gpuplatform.ae/llm``) and fine-tuning jobs
    (Kubeflow Trainer TrainJobs)."""
    if resource.type in (LLMISVC_TYPE, LLMISVC_CONFIG_TYPE, TRAINJOB_TYPE):
        return True
    if kind_of(resource) != "Deployment":
        return False
    labels = dig(resource.props, "spec", "template", "metadata", "labels")
    return isinstance(labels, Mapping) and CPU_MODEL_LABEL in labels


@stack_rule("uae-llm-model-residency")
def llm_model_residency(stack: StackView, settings: Settings) -> StackFindings:
    buckets = set(stack_buckets(stack))
    deferred = Deferred()
    for resource in stack.resources:
        if not is_llm_workload(resource):
            continue
        name = f"{kind_of(resource)} {metadata(resource).get('name', resource.name)}"
        if resource.type == LLMISVC_TYPE or (
            resource.type == LLMISVC_CONFIG_TYPE and dig(resource.props, "spec", "model")
        ):
            with deferred.each():
                uri = known(dig(resource.props, "spec", "model", "uri"), "spec.model.uri")
                problem = model_uri_problem(uri, buckets)
                if problem:
                    yield resource.urn, f"{name}: {problem}"
        for path, value, why in container_problems(resource):
            with deferred.each():
                known(value, path)
                if why:
                    yield resource.urn, f"{name} {path}: {why}"
    deferred.finish()


def restricted_namespaces(stack: StackView) -> set[str]:
    """The namespaces the plan labels for restricted data."""
    found = set()
    for ns in stack.of_type(NAMESPACE_TYPE):
        labels = metadata(ns).get("labels")
        if isinstance(labels, Mapping) and labels.get(RESTRICTED_LABEL) == RESTRICTED_VALUE:
            found.add(str(metadata(ns).get("name", ns.name)))
    return found


def asks_for_gpus(pod: Mapping[str, Any]) -> bool:
    for group in ("initContainers", "containers"):
        for container in pod.get(group) or []:
            resources = container.get("resources") if isinstance(container, Mapping) else None
            for kind in ("limits", "requests"):
                amounts = dig(resources, kind)
                if isinstance(amounts, Mapping) and GPU_RESOURCE in amounts:
                    return True
    return False


def selects_cc_nodes(pod: Mapping[str, Any]) -> bool:
    """The pod may land only on nodes labelled ``nvidia.com/cc.mode=on``."""
    selector = pod.get("nodeSelector")
    if isinstance(selector, Mapping) and selector.get(CC_MODE_LABEL) == CC_MODE_ON:
        return True
    terms = dig(
        pod,
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    )
    if not isinstance(terms, list) or not terms:
        return False

    def term_selects(term: Any) -> bool:
        expressions = term.get("matchExpressions") if isinstance(term, Mapping) else None
        return isinstance(expressions, list) and any(
            isinstance(e, Mapping)
            and e.get("key") == CC_MODE_LABEL
            and e.get("operator") == "In"
            and e.get("values") == [CC_MODE_ON]
            for e in expressions
        )

    # Terms are ORed: every one must keep the pod on CC nodes.
    return all(term_selects(t) for t in terms)


def _trainjob_pods(resource: ResourceView) -> list[Mapping[str, Any]]:
    """The pod specs a TrainJob's runtime patches set (``runtimePatches[].
    trainingRuntimeSpec.template.spec.replicatedJobs[].template.spec.template.spec``)."""
    found = []
    for patch in dig(resource.props, "spec", "runtimePatches") or []:
        jobs = dig(patch, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
        for job in jobs if isinstance(jobs, list) else []:
            pod = dig(job, "template", "spec", "template", "spec")
            if isinstance(pod, Mapping):
                found.append(pod)
    return found


def _trainjob_problem(resource: ResourceView) -> str | None:
    """A TrainJob whose trainer asks for GPUs (``spec.trainer.resourcesPerNode``) and
    whose runtime patches put no pod on CC nodes (the runtime's own pods cannot be
    seen from the job: refused unless the job says so itself)."""
    trainer = {
        "containers": [{"resources": dig(resource.props, "spec", "trainer", "resourcesPerNode")}]
    }
    if not asks_for_gpus(trainer):
        return None
    if any(selects_cc_nodes(pod) for pod in _trainjob_pods(resource)):
        return None
    return "spec.trainer.resourcesPerNode"


def runs_pods(resource: ResourceView) -> bool:
    """Objects that run pods: those with a pod spec, and Kubeflow Trainer TrainJobs
    (whose pods come from their runtime)."""
    return resource.type == TRAINJOB_TYPE or has_pod_spec(resource)


@stack_rule("uae-restricted-gpu-confidential")
def restricted_gpu_confidential(stack: StackView, settings: Settings) -> StackFindings:
    restricted = restricted_namespaces(stack)
    if not restricted:
        return
    for resource in stack.resources:
        namespace = metadata(resource).get("namespace")
        if namespace not in restricted:
            continue
        name = f"{kind_of(resource)} {namespace}/{metadata(resource).get('name', resource.name)}"
        paths = [
            p.path
            for p in pod_specs(resource)
            if asks_for_gpus(p.spec) and not selects_cc_nodes(p.spec)
        ]
        if resource.type == TRAINJOB_TYPE and (path := _trainjob_problem(resource)):
            paths.append(path)
        for path in paths:
            yield (
                resource.urn,
                f"{name} {path}: asks for {GPU_RESOURCE} in a namespace labelled "
                f"{RESTRICTED_LABEL}={RESTRICTED_VALUE} without selecting "
                f'{CC_MODE_LABEL}: "{CC_MODE_ON}" (confidential-computing GPUs)',
            )
