"""Required-field checks for the CRD objects the platform registers.

The upstream OpenAPI schemas cover built-in kinds only; these checks encode the rules of
the CRDs we write (Kueue v1beta2, Prometheus Operator v1, NVIDIA Network Operator), as
their API types declare them: required fields, name patterns, and cross-field rules such
as "every flavor lists the covered resources in the same order".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tests.k8s.vendored_crds import vendored_crd_errors

DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUANTITY = re.compile(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE])?$")
IMAGE_NAME = re.compile(r"^[a-zA-Z0-9\-]+$")
IMAGE_REPOSITORY = re.compile(r"^[a-zA-Z0-9.\-/]+$")
IMAGE_VERSION = re.compile(r"^[a-zA-Z0-9.\-]+$")
TAINT_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}


def _name(manifest: Mapping[str, Any]) -> str:
    return f"{manifest['kind']}/{manifest.get('metadata', {}).get('name', '?')}"


def _resource_flavor(m: Mapping[str, Any]) -> Iterable[str]:
    spec = m.get("spec", {})
    labels = spec.get("nodeLabels", {})
    # No labels is valid: the fleet's burst flavor exists on no node of the manager.
    if len(labels) > 8:
        yield "spec.nodeLabels: at most 8 labels"
    for taint in spec.get("nodeTaints", []):
        if not taint.get("key") or taint.get("effect") not in TAINT_EFFECTS:
            yield f"spec.nodeTaints: bad taint {taint}"
    if len(spec.get("nodeTaints", [])) > 8:
        yield "spec.nodeTaints: at most 8"


def _cluster_queue(m: Mapping[str, Any]) -> Iterable[str]:
    spec = m.get("spec", {})
    cohort = spec.get("cohortName")
    if cohort is not None and not DNS_NAME.match(cohort):
        yield f"spec.cohortName: {cohort!r} is not a DNS name"
    if "namespaceSelector" not in spec:
        yield "spec.namespaceSelector: missing (no namespace could submit)"
    groups = spec.get("resourceGroups", [])
    if not 1 <= len(groups) <= 16:
        yield "spec.resourceGroups: 1 to 16 groups"
    for group in groups:
        covered = group.get("coveredResources", [])
        if not 1 <= len(covered) <= 64:
            yield "coveredResources: 1 to 64 resources"
        flavors = group.get("flavors", [])
        if not 1 <= len(flavors) <= 64:
            yield "flavors: 1 to 64 flavors"
        for flavor in flavors:
            if not DNS_NAME.match(flavor.get("name", "")):
                yield f"flavor name {flavor.get('name')!r} is not a DNS name"
            names = [r.get("name") for r in flavor.get("resources", [])]
            if names != covered:
                yield f"flavor {flavor.get('name')}: resources {names} != covered {covered}"
            for resource in flavor.get("resources", []):
                for key in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    value = resource.get(key)
                    if key == "nominalQuota" and value is None:
                        yield f"flavor {flavor.get('name')}: {resource.get('name')} has no quota"
                    if value is not None and not QUANTITY.match(str(value)):
                        yield f"flavor {flavor.get('name')}: {key} {value!r} is not a quantity"
                if "borrowingLimit" in resource and cohort is None:
                    yield "borrowingLimit needs a cohort"
    preemption = spec.get("preemption", {})
    if preemption.get("reclaimWithinCohort", "Never") not in {"Never", "LowerPriority", "Any"}:
        yield "preemption.reclaimWithinCohort: invalid"
    if preemption.get("withinClusterQueue", "Never") not in {
        "Never",
        "LowerPriority",
        "LowerOrNewerEqualPriority",
    }:
        yield "preemption.withinClusterQueue: invalid"
    if "borrowWithinCohort" in preemption and "fairSharing" in spec:
        yield "preemption.borrowWithinCohort is not allowed with fair sharing"
    weight = spec.get("fairSharing", {}).get("weight")
    if weight is not None and not QUANTITY.match(str(weight)):
        yield f"fairSharing.weight {weight!r} is not a quantity"


def _local_queue(m: Mapping[str, Any]) -> Iterable[str]:
    if not m["metadata"].get("namespace"):
        yield "metadata.namespace: a LocalQueue is namespaced"
    if not DNS_NAME.match(m.get("spec", {}).get("clusterQueue", "")):
        yield "spec.clusterQueue: a ClusterQueue name is required"


def _scrape_targets(m: Mapping[str, Any], field: str, other_port: str) -> Iterable[str]:
    """A PodMonitor's or ServiceMonitor's selector, and its endpoints (``field``), each
    with a port (by name, or by ``other_port``)."""
    spec = m.get("spec", {})
    if "selector" not in spec:
        yield "spec.selector: required"
    endpoints = spec.get(field, [])
    if not endpoints:
        yield f"spec.{field}: at least one endpoint"
    for endpoint in endpoints:
        if not (endpoint.get("port") or endpoint.get(other_port)):
            yield f"{field}[].port: required"


def _pod_monitor(m: Mapping[str, Any]) -> Iterable[str]:
    yield from _scrape_targets(m, "podMetricsEndpoints", "portNumber")
    for endpoint in m.get("spec", {}).get("podMetricsEndpoints", []):
        for relabel in endpoint.get("relabelings", []):
            if "targetLabel" not in relabel:
                yield "relabelings[].targetLabel: required for replace"


def _prometheus_rule(m: Mapping[str, Any]) -> Iterable[str]:
    groups = m.get("spec", {}).get("groups", [])
    names = [g.get("name") for g in groups]
    if len(set(names)) != len(names) or not all(names):
        yield "spec.groups[].name: required and unique"
    for group in groups:
        for rule in group.get("rules", []):
            if not rule.get("expr") or not (rule.get("alert") or rule.get("record")):
                yield f"rule {rule}: needs expr and alert or record"
            duration = rule.get("for")
            if duration is not None and not re.fullmatch(r"\d+[smh]", duration):
                yield f"rule {rule.get('alert')}: for {duration!r} is not a duration"


def _image_spec(path: str, spec: Mapping[str, Any]) -> Iterable[str]:
    for key, pattern in (
        ("image", IMAGE_NAME),
        ("repository", IMAGE_REPOSITORY),
        ("version", IMAGE_VERSION),
    ):
        value = spec.get(key)
        if not isinstance(value, str) or not pattern.match(value):
            yield f"{path}.{key}: required, got {value!r}"


def _nic_cluster_policy(m: Mapping[str, Any]) -> Iterable[str]:
    spec = m.get("spec", {})
    if "namespace" in m["metadata"]:
        yield "metadata.namespace: NicClusterPolicy is cluster-scoped"
    for component in ("rdmaSharedDevicePlugin", "ofedDriver", "nvIpam"):
        if component in spec:
            yield from _image_spec(f"spec.{component}", spec[component])
    for component, value in spec.get("secondaryNetwork", {}).items():
        yield from _image_spec(f"spec.secondaryNetwork.{component}", value)
    if "rdmaSharedDevicePlugin" in spec:
        config = json.loads(spec["rdmaSharedDevicePlugin"]["config"])
        for entry in config["configList"]:
            if not entry.get("resourceName") or not entry.get("selectors"):
                yield "rdmaSharedDevicePlugin.config: resourceName and selectors required"


def _ip_pool(m: Mapping[str, Any]) -> Iterable[str]:
    spec = m.get("spec", {})
    if not spec.get("subnet") or not isinstance(spec.get("perNodeBlockSize"), int):
        yield "spec.subnet and spec.perNodeBlockSize: required"


def _ipoib_network(m: Mapping[str, Any]) -> Iterable[str]:
    spec = m.get("spec", {})
    if not spec.get("networkNamespace") or not spec.get("master"):
        yield "spec.networkNamespace and spec.master: required"
    json.loads(spec.get("ipam", "{}"))


def _service_monitor(m: Mapping[str, Any]) -> Iterable[str]:
    yield from vendored_crd_errors(m)
    yield from _scrape_targets(m, "endpoints", "targetPort")
    for endpoint in m.get("spec", {}).get("endpoints", []):
        auth = endpoint.get("basicAuth")
        if auth is not None:
            for part in ("username", "password"):
                ref = auth.get(part, {})
                if not ref.get("name") or not ref.get("key"):
                    yield f"endpoints[].basicAuth.{part}: a Secret name and key are required"


def _vendored_crd(m: Mapping[str, Any]) -> Iterable[str]:
    """Kinds whose CRD is vendored are validated against it (tests/k8s/vendored_crds.py)."""
    from tests.k8s.vendored_crds import vendored_errors  # noqa: PLC0415 - keeps YAML lazy

    return [e.split(": ", 1)[1] for e in vendored_errors([m])]


#: robfig/cron with seconds, as CloudNativePG parses a ScheduledBackup's schedule (six
#: fields; the Kubernetes CronJob format has five and would mean something else).
_CNPG_SCHEDULE = re.compile(r"^(\S+\s+){5}\S+$")


def _scheduled_backup(m: Mapping[str, Any]) -> Iterable[str]:
    """The vendored ScheduledBackup schema, and its schedule's six fields."""
    yield from vendored_crd_errors(m)
    schedule = m.get("spec", {}).get("schedule", "")
    if not _CNPG_SCHEDULE.match(str(schedule)):
        yield f"spec.schedule: {schedule!r} is not six cron fields (seconds first)"


def _vendored_kueue_schema(m: Mapping[str, Any]) -> Iterable[str]:
    """MultiKueue kinds: strictly against the vendored Kueue CRDs (tests/k8s/kueue_crds.py)."""
    from tests.k8s.kueue_crds import kueue_errors  # noqa: PLC0415 - loads the CRDs lazily

    prefix = f"{_name(m)}: "
    return [e.removeprefix(prefix) for e in kueue_errors([m])]


_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def _train_job(m: Mapping[str, Any]) -> Iterable[str]:
    """The vendored TrainJob schema, and the CEL rules of that CRD an object can break on
    creation (``oldSelf`` rules only bind updates): the name is an RFC 1035 label of at
    most 63 characters; ``managedBy`` is Trainer's or MultiKueue's."""
    yield from vendored_crd_errors(m)
    name = m.get("metadata", {}).get("name", "")
    if not _RFC1035.match(name) or len(name) > 63:
        yield f"metadata.name: {name!r} is not an RFC 1035 label of at most 63 characters"
    managed = m.get("spec", {}).get("managedBy")
    if managed is not None and managed not in (
        "trainer.kubeflow.org/trainjob-controller",
        "kueue.x-k8s.io/multikueue",
    ):
        yield f"spec.managedBy: {managed!r} is neither Trainer's nor MultiKueue's"


def _cluster_training_runtime(m: Mapping[str, Any]) -> Iterable[str]:
    """The vendored ClusterTrainingRuntime schema, its creation-time CEL rules (one ML
    policy at most; JobSet's startupPolicy InOrder excludes dependsOn), and what Trainer
    needs of a runtime: exactly one replicated job labelled as the trainer step, with a
    container ``node``; an MPI runtime running its launcher as a node has ``launcher``
    and ``node`` jobs."""
    yield from vendored_crd_errors(m)
    spec = m.get("spec", {})
    policy = spec.get("mlPolicy", {})
    sources = [k for k in ("torch", "mpi", "jax", "xgboost", "flux") if k in policy]
    if len(sources) > 1:
        yield f"spec.mlPolicy: only one policy may be configured, got {sources}"
    template = spec.get("template", {}).get("spec", {})
    jobs = template.get("replicatedJobs", [])
    in_order = template.get("startupPolicy", {}).get("startupPolicyOrder") == "InOrder"
    if in_order and any("dependsOn" in j for j in jobs):
        yield "spec.template.spec: startupPolicy InOrder and dependsOn are mutually exclusive"
    ancestors = [
        j
        for j in jobs
        if j.get("template", {}).get("metadata", {}).get("labels", {}).get(_ANCESTOR) == "trainer"
    ]
    if len(ancestors) != 1:
        yield f"replicatedJobs: {len(ancestors)} labelled {_ANCESTOR}=trainer, expected one"
    for job in ancestors:
        names = [c.get("name") for c in job["template"]["spec"]["template"]["spec"]["containers"]]
        if "node" not in names:
            yield f"replicatedJobs[{job.get('name')}]: no container 'node' for the trainer"
    if policy.get("mpi", {}).get("runLauncherAsNode") and {j.get("name") for j in jobs} != {
        "launcher",
        "node",
    }:
        yield "an MPI runtime with runLauncherAsNode needs the jobs launcher and node"


#: The container each pod template must hold: Spark and the operator name them so.
SPARK_CONTAINERS = {"driver": "spark-kubernetes-driver", "executor": "spark-kubernetes-executor"}


def _spark_application(m: Mapping[str, Any]) -> Iterable[str]:
    """The vendored SparkApplication schema (Kubeflow Spark Operator v2.5.2), and its pod
    templates, which that CRD leaves unchecked (``x-kubernetes-preserve-unknown-fields``),
    against the Kubernetes API's own PodTemplateSpec (the oldest supported version),
    each holding the container Spark fills in."""
    from modules.k8s.versions import SUPPORTED_KUBERNETES_VERSIONS  # noqa: PLC0415
    from tests.support.k8s_schema import schema_errors  # noqa: PLC0415

    yield from vendored_crd_errors(m)
    name = m.get("metadata", {}).get("name", "?")
    for role, container in SPARK_CONTAINERS.items():
        template = m.get("spec", {}).get(role, {}).get("template")
        if template is None:
            continue
        pod_template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"{name}-{role}"},
            "template": template,
        }
        for error in schema_errors([pod_template], SUPPORTED_KUBERNETES_VERSIONS[0]):
            yield f"spec.{role}.template: {error.split(': ', 1)[1]}"
        names = [c.get("name") for c in template.get("spec", {}).get("containers", [])]
        if container not in names:
            yield f"spec.{role}.template: no container {container!r} for Spark to fill in"


def _llm_inference_service(m: Mapping[str, Any]) -> Iterable[str]:
    """The vendored CRD strictly, and the model server pods it describes (template, and
    worker for a LeaderWorkerSet group) as PodTemplates of the oldest supported version
    (the CRD embeds PodSpec without its required fields: the containers' images)."""
    from modules.k8s.versions import SUPPORTED_KUBERNETES_VERSIONS  # noqa: PLC0415
    from tests.support.k8s_schema import schema_errors  # noqa: PLC0415

    yield from vendored_crd_errors(m)
    name = m.get("metadata", {}).get("name", "?")
    for role in ("template", "worker"):
        pod = m.get("spec", {}).get(role)
        if pod is None:
            continue
        pod_template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"{name}-{role}"},
            "template": {"spec": pod},
        }
        for error in schema_errors([pod_template], SUPPORTED_KUBERNETES_VERSIONS[0]):
            yield f"spec.{role}: {error.split(': ', 1)[1]}"


CHECKS: dict[str, Callable[[Mapping[str, Any]], Iterable[str]]] = {
    "ServiceMonitor": _service_monitor,
    "Cluster": _vendored_crd,
    "ScheduledBackup": _scheduled_backup,
    "Backup": vendored_crd_errors,
    "MultiKueueConfig": _vendored_kueue_schema,
    "MultiKueueCluster": _vendored_kueue_schema,
    "AdmissionCheck": _vendored_kueue_schema,
    "ResourceFlavor": _resource_flavor,
    "ClusterQueue": _cluster_queue,
    "LocalQueue": _local_queue,
    "PodMonitor": _pod_monitor,
    "PrometheusRule": _prometheus_rule,
    "NicClusterPolicy": _nic_cluster_policy,
    "IPPool": _ip_pool,
    "IPoIBNetwork": _ipoib_network,
    # KServe and cert-manager: the vendored CRDs' schemas, strictly (vendored_crds.py).
    "InferenceService": vendored_crd_errors,
    "ServingRuntime": vendored_crd_errors,
    "ClusterServingRuntime": vendored_crd_errors,
    "Certificate": vendored_crd_errors,
    "ClusterIssuer": vendored_crd_errors,
    # Kubeflow Trainer: the vendored CRDs strictly, and their creation-time CEL rules.
    "TrainJob": _train_job,
    "ClusterTrainingRuntime": _cluster_training_runtime,
    # Kubeflow Spark Operator: the vendored CRD strictly, and the pod templates.
    "SparkApplication": _spark_application,
    # LLM serving: KServe's LLM objects, KEDA's, the vendored CRDs strictly.
    "LLMInferenceService": _llm_inference_service,
    "LLMInferenceServiceConfig": vendored_crd_errors,
    "ScaledObject": vendored_crd_errors,
    "TriggerAuthentication": vendored_crd_errors,
    "HTTPScaledObject": vendored_crd_errors,
}

# The LLM gateway's kinds: their vendored CRDs, strictly (tests/k8s/vendor/llm-gateway).
CHECKS.update(
    dict.fromkeys(
        (
            "GatewayClass",
            "Gateway",
            "ReferenceGrant",
            "InferencePool",
            "SecurityPolicy",
            "BackendTrafficPolicy",
            "ClientTrafficPolicy",
            "EnvoyProxy",
            "Backend",
            "AIGatewayRoute",
            "AIServiceBackend",
        ),
        vendored_crd_errors,
    )
)


def crd_errors(manifests: Iterable[Mapping[str, Any]]) -> list[str]:
    """Problems of every CRD object, one line each; an unknown CRD kind is a problem too
    (add its checks here before registering it)."""
    errors: list[str] = []
    for manifest in manifests:
        check = CHECKS.get(manifest["kind"])
        if check is None:
            errors.append(f"{_name(manifest)}: no checks for this CRD kind")
            continue
        if not DNS_NAME.match(manifest.get("metadata", {}).get("name", "")):
            errors.append(f"{_name(manifest)}: metadata.name is not a DNS name")
        errors += [f"{_name(manifest)}: {e}" for e in check(manifest)]
    return errors
