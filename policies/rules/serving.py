"""Model serving: inference services, their runtimes and their model storage stay in the
UAE (KServe ``InferenceService``, ``ServingRuntime``, ``ClusterServingRuntime``).

* Model storage: every storage URI an InferenceService names (stable and canary
  predictors, transformers, explainers) is ``s3://`` of a bucket this stack creates (in
  the allowed region, by the AWS rules) or ``pvc://`` of a claim in the cluster (whose
  site the site rule pins to the UAE). Anything else (another bucket, ``gs://``,
  ``https://``, ``hf://``) would load the model from, or reveal it to, a store the stack
  does not control.
* Images: every container of a runtime or an InferenceService, and every model server
  image override (``predictor.model.image``), comes from the in-region registry or a
  configured UAE registry.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from policies.catalogue import resource_rule, stack_rule
from policies.k8s import containers, kind_of, metadata, parse_image
from policies.model import ResourceView, StackFindings, StackView
from policies.rules.checks import not_a_stack_bucket, stack_buckets, uri_bucket
from policies.rules.residency import registry_allowed
from policies.settings import Settings
from policies.values import Deferred, known

ISVC_TYPE = "kubernetes:serving.kserve.io/v1beta1:InferenceService"
#: Components of an InferenceService that may load a model, and the predictor's
#: framework-specific implementations (each may carry ``storageUri`` and ``image``).
COMPONENTS = ("predictor", "transformer", "explainer")
IMPLEMENTATIONS = (
    "model",
    "sklearn",
    "xgboost",
    "tensorflow",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
)


def _components(spec: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, component) for the stable components and each canary's predictor."""
    if not isinstance(spec, Mapping):
        return
    for name in COMPONENTS:
        component = spec.get(name)
        if isinstance(component, Mapping):
            yield f"spec.{name}", component
    canaries = spec.get("canary")
    if isinstance(canaries, list):
        for index, canary in enumerate(canaries):
            predictor = canary.get("predictor") if isinstance(canary, Mapping) else None
            if isinstance(predictor, Mapping):
                yield f"spec.canary[{index}].predictor", predictor


def storage_uris(resource: ResourceView) -> Iterator[tuple[str, Any]]:
    """(path, value) of every storage URI of an InferenceService (values may be unknown)."""
    for path, component in _components(resource.props.get("spec")):
        if "storageUri" in component:
            yield f"{path}.storageUri", component["storageUri"]
        uris = component.get("storageUris")
        if isinstance(uris, list):
            for index, item in enumerate(uris):
                if isinstance(item, Mapping):
                    yield f"{path}.storageUris[{index}].uri", item.get("uri")
        for implementation in IMPLEMENTATIONS:
            body = component.get(implementation)
            if isinstance(body, Mapping) and "storageUri" in body:
                yield f"{path}.{implementation}.storageUri", body["storageUri"]


def model_images(resource: ResourceView) -> Iterator[tuple[str, Any]]:
    """(path, image) of the model server image overrides of an InferenceService."""
    for path, component in _components(resource.props.get("spec")):
        for implementation in IMPLEMENTATIONS:
            body = component.get(implementation)
            if isinstance(body, Mapping) and "image" in body:
                yield f"{path}.{implementation}.image", body["image"]


def storage_problem(uri: Any, buckets: Collection[str]) -> str | None:
    """Why a storage URI is not in the stack's stores (None when it is)."""
    if not isinstance(uri, str) or not uri:
        return "names no storage URI"
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return f"storage {uri!r} is not a URI"
    if scheme == "pvc":
        return None if rest.split("/", 1)[0] else f"storage {uri!r} names no volume claim"
    if scheme == "s3":
        bucket = uri_bucket(uri)
        return None if bucket in buckets else not_a_stack_bucket(f"storage {uri}", bucket, buckets)
    return f"storage {uri} uses {scheme}://, outside the stack's stores (s3 of its buckets, pvc)"


@stack_rule("uae-serving-model-storage")
def serving_model_storage(stack: StackView, settings: Settings) -> StackFindings:
    buckets = stack_buckets(stack)
    deferred = Deferred()
    for isvc in stack.of_type(ISVC_TYPE):
        name = metadata(isvc).get("name", isvc.name)
        found = list(storage_uris(isvc))
        if not found:
            yield isvc.urn, f"InferenceService {name} names no storage URI for its model"
        for path, value in found:
            with deferred.each():
                problem = storage_problem(known(value, path), buckets)
                if problem:
                    yield isvc.urn, f"InferenceService {name} {path}: {problem}"
    deferred.finish()


@resource_rule("uae-serving-images")
def serving_images(resource: ResourceView, settings: Settings) -> Iterator[str]:
    kind = kind_of(resource)
    images = [(f"{c.path} ({c.name})", c.spec.get("image")) for c in containers(resource)]
    images += list(model_images(resource))
    if kind != "InferenceService" and not images:
        yield f"{kind} declares no container, so its image cannot be checked"
    for path, value in images:
        image = known(value, path)
        if not isinstance(image, str) or not image:
            yield f"{path} names no image"
        elif not registry_allowed(image, settings):
            yield f"{path} runs {image} from {parse_image(image).registry}, outside the UAE"
