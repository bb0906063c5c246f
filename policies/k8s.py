"""What the Kubernetes rules need: pod specs inside any workload, containers, images."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from policies.model import ResourceView
from policies.values import dig, is_unknown

K8S_PROVIDER_TYPE = "pulumi:providers:kubernetes"
HELM_RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
CONFIGMAP_TYPE = "kubernetes:core/v1:ConfigMap"
CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"

# The annotation a system component uses to opt out of one k8s-* rule, with its reason:
#   policy-exception.gpuplatform.ae/k8s-no-host-path: "device plugins register through
#   the kubelet socket in /var/lib/kubelet/device-plugins"
EXCEPTION_ANNOTATION_PREFIX = "policy-exception.gpuplatform.ae/"

# Kinds that have no namespace (built-in ones and the CRDs this platform installs).
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "StorageClass",
        "VolumeAttachment",
        "CSIDriver",
        "CSINode",
        "PriorityClass",
        "RuntimeClass",
        "IngressClass",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "APIService",
        "CertificateSigningRequest",
        "FlowSchema",
        "PriorityLevelConfiguration",
        "DeviceClass",
        # Kueue
        "ClusterQueue",
        "ResourceFlavor",
        "Cohort",
        "WorkloadPriorityClass",
        "Topology",
        "AdmissionCheck",
        "MultiKueueConfig",
        "MultiKueueCluster",
        "ProvisioningRequestConfig",
        # Karpenter, NVIDIA GPU operator, node feature discovery
        "NodePool",
        "EC2NodeClass",
        "NodeClaim",
        "ClusterPolicy",
        "NVIDIADriver",
        "NodeFeatureRule",
        # Kubeflow Trainer
        "ClusterTrainingRuntime",
        # KServe, cert-manager
        "ClusterServingRuntime",
        "ClusterStorageContainer",
        "ClusterIssuer",
        # NVIDIA network operator (InfiniBand / RDMA)
        "NicClusterPolicy",
        "IPoIBNetwork",
        "MacvlanNetwork",
        "HostDeviceNetwork",
        # Gateway API (the LLM gateway)
        "GatewayClass",
    }
)


def is_kubernetes_object(resource: ResourceView) -> bool:
    """A Kubernetes object registered from a manifest (not a Helm release or provider)."""
    return resource.type.startswith("kubernetes:") and resource.type != HELM_RELEASE_TYPE


def kind_of(resource: ResourceView) -> str:
    return resource.type.rsplit(":", 1)[-1]


def metadata(resource: ResourceView) -> Mapping[str, Any]:
    value = resource.props.get("metadata")
    return value if isinstance(value, Mapping) else {}


def object_annotations(resource: ResourceView) -> Mapping[str, Any]:
    value = metadata(resource).get("annotations")
    return value if isinstance(value, Mapping) else {}


def exception_reason(resource: ResourceView, rule_id: str) -> str | None:
    """The reason of the object's exception annotation for ``rule_id``, if any."""
    value = object_annotations(resource).get(EXCEPTION_ANNOTATION_PREFIX + rule_id)
    return value.strip() if isinstance(value, str) and not is_unknown(value) else None


_SCALARS = frozenset({str, int, float, bool, type(None)})


@dataclass(frozen=True)
class PodSpec:
    """A pod spec found inside an object, with where it was found."""

    path: str
    spec: Mapping[str, Any]


def pod_specs(resource: ResourceView) -> tuple[PodSpec, ...]:
    """Every pod spec inside a Kubernetes object: a Pod's spec, a template's spec, and
    those nested in CronJobs or CRDs (JobSet, PyTorchJob ...): any mapping holding a
    ``containers`` list. Found once per view: a dozen rules ask, and the search walks
    the whole object (a CRD's schema too)."""
    found = resource.derived.get("pod_specs")
    if found is None:
        found = resource.derived["pod_specs"] = _find_pod_specs(resource)
    return found


def _find_pod_specs(resource: ResourceView) -> tuple[PodSpec, ...]:
    # A CustomResourceDefinition runs nothing: a `containers` list in its schema (a
    # default, an example) is no workload's. Its schema is most of a plan's size.
    if not is_kubernetes_object(resource) or resource.type == CRD_TYPE:
        return ()
    found: list[PodSpec] = []

    def visit(node: Any, path: str) -> None:
        kind = type(node)  # plain dicts and lists first: the ABCs' checks are slow
        if kind is dict or (kind is not list and isinstance(node, Mapping)):
            if isinstance(node.get("containers"), list):
                found.append(PodSpec(path, node))
                return
            for key, value in node.items():
                # Scalars hold no pod spec: not visited (most of a large object).
                if key != "metadata" and type(value) not in _SCALARS:
                    visit(value, f"{path}.{key}" if path else str(key))
        elif kind is list or isinstance(node, list):
            for index, value in enumerate(node):
                if type(value) not in _SCALARS:
                    visit(value, f"{path}[{index}]")

    visit(resource.props.get("spec"), "spec")
    return tuple(found)


def has_pod_spec(resource: ResourceView) -> bool:
    return bool(pod_specs(resource))


def job_images(resource: ResourceView) -> list[tuple[str, Any]]:
    """(path, image) of the images an object names outside any pod spec: a Kubeflow
    Trainer ``TrainJob``'s ``spec.trainer.image``, which Trainer puts into the trainer
    container of its runtime's pods (the runtime's own pods are ordinary pod specs), and
    a CloudNativePG ``Cluster``'s ``spec.imageName``, the PostgreSQL image its operator
    runs every instance of the database in."""
    if not is_kubernetes_object(resource):
        return []
    kind, spec = kind_of(resource), resource.props.get("spec")
    if kind == "TrainJob":
        trainer = dig(spec, "trainer")
        if isinstance(trainer, Mapping) and "image" in trainer:
            return [("spec.trainer.image", trainer["image"])]
    elif (
        kind == "Cluster"
        and str(resource.props.get("apiVersion", "")).startswith("postgresql.cnpg.io/")
        and isinstance(spec, Mapping)
        and "imageName" in spec
    ):
        return [("spec.imageName", spec["imageName"])]
    return []


def images(resource: ResourceView) -> list[tuple[str, Any, str]]:
    """(who, image, path) of every image the object runs: each container's (who:
    ``container <name>``) and each job image's (`job_images`; who: its path)."""
    named = [
        (f"container {c.name}", c.spec.get("image"), f"{c.path}.image")
        for c in containers(resource)
    ]
    return named + [(f"`{path}`", value, path) for path, value in job_images(resource)]


def names_images(resource: ResourceView) -> bool:
    """The object runs images: it has a pod spec, or names a job image (`job_images`)."""
    return has_pod_spec(resource) or bool(job_images(resource))


@dataclass(frozen=True)
class Container:
    """One container of a pod spec, with the pod-level security context beside it."""

    path: str
    spec: Mapping[str, Any]
    pod: Mapping[str, Any]

    @property
    def name(self) -> str:
        name = self.spec.get("name")
        return name if isinstance(name, str) else self.path

    def security(self, key: str) -> Any:
        """A security setting: the container's own, else the pod's (where both exist)."""
        own = dig(self.spec, "securityContext", key)
        if own is not None:
            return own
        return dig(self.pod, "securityContext", key)


def containers(resource: ResourceView) -> Iterator[Container]:
    """Every container, init container and ephemeral container of the object."""
    for pod in pod_specs(resource):
        for group in ("initContainers", "containers", "ephemeralContainers"):
            items = pod.spec.get(group)
            if not isinstance(items, list):
                continue
            for index, item in enumerate(items):
                if isinstance(item, Mapping):
                    yield Container(f"{pod.path}.{group}[{index}]", item, pod.spec)


@dataclass(frozen=True)
class ImageRef:
    """A container image reference split into registry, repository, tag and digest."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None


def parse_image(image: str) -> ImageRef:
    """Split an image reference the way container runtimes do (Docker Hub by default)."""
    rest, _, digest = image.partition("@")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = "docker.io", rest
    name, colon, tag = path.rpartition(":")
    if not colon or "/" in tag:
        name, tag = path, ""
    return ImageRef(registry, name, tag or None, digest or None)
