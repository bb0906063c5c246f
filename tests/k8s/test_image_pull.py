"""Every container the shipped plans declare pulls its image on each start
(``imagePullPolicy: Always``, checkov CKV_K8S_15): the kubelet then asks the in-region
registry for the image at every start, with the credentials that pod's pull uses, so no
pod starts from a cached image without that check, and a tag moved in the registry is
noticed at the next start. Pulling an image the node already has costs one manifest
request: the layers stay cached. Containers in any object count: workloads, the pod
templates of Trainer runtimes, TrainJobs and InferenceServices, SparkApplications (whose
policy is one field for the driver and executors)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import SHIPPED_STACKS, shipped_plan

CONTAINER_LISTS = ("containers", "initContainers")


def _containers(value: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, container) for each container (a dict with an ``image``) under ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in CONTAINER_LISTS and isinstance(item, list):
                for c in item:
                    if isinstance(c, dict) and "image" in c:
                        yield f"{path}.{key}[{c.get('name')}]", c
            yield from _containers(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _containers(item, f"{path}[{index}]")


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_container_of_a_shipped_plan_pulls_always(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    found, wrong = 0, []
    for record in registrations.values():
        if not record.type.startswith("kubernetes:") or "helm" in record.type:
            continue
        for path, container in _containers(record.inputs):
            found += 1
            if container.get("imagePullPolicy") != "Always":
                wrong.append(f"{record.name}{path}: {container.get('imagePullPolicy')}")
        spec = record.inputs.get("spec")
        if record.inputs.get("kind") == "SparkApplication" and isinstance(spec, dict):
            found += 1
            if spec.get("imagePullPolicy") != "Always":
                wrong.append(f"{record.name}.spec.imagePullPolicy: {spec.get('imagePullPolicy')}")
    assert found > 20
    assert wrong == []
