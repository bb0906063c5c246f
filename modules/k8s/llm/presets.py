"""KServe's LLMInferenceServiceConfig presets, restricted: the platform's copies of the
three presets it uses, registered under the upstream names in the ``kserve`` namespace
in place of upstream's (the platform does not install the ``kserve-runtime-configs``
chart that ships those).

KServe's llmisvc controller merges, for each LLMInferenceService, the well-known preset
of its shape (``kserve-config-llm-template`` for one node,
``kserve-config-llm-worker-data-parallel`` for a LeaderWorkerSet group,
``kserve-config-llm-scheduler`` for the endpoint picker) under the service's own spec,
looking the preset up by name in the service's namespace, then in ``kserve``
(``getConfig`` in pkg/controller/v1alpha2/llmisvc/config_merge.go). Overriding a field
from the service (or from ``baseRefs``) cannot remove what a preset adds: the merge is a
strategic merge patch built from Go structs, in which an empty ``capabilities.add`` is
omitted and so keeps the preset's. Hence the platform replaces the presets themselves.

What changes from upstream (vendored in ``upstream/``, SOURCE there), every pod alike:

* Capabilities: upstream's data-parallel presets add ``IPC_LOCK``, ``SYS_RAWIO`` and
  ``NET_RAW`` to vLLM. None is needed on this platform's GPU nodes: NCCL over EFA or
  InfiniBand registers memory within the RLIMIT_MEMLOCK the node's container runtime
  grants every container (the training pods run NCCL the same way without ``IPC_LOCK``,
  `modules.k8s.trainer.pods.restricted_container_security`); ``SYS_RAWIO`` (raw I/O
  port and device access) and ``NET_RAW`` (raw sockets, used only by the RoCE GID
  discovery's tools) are not used by vLLM or NCCL. So ``drop: [ALL]`` and nothing added.
* Root filesystem read-only: upstream leaves vLLM's writable ("nvidia-cdi-hook requires a
  writable root filesystem"). The platform's GPU nodes run the NVIDIA container toolkit
  the GPU Operator (or the EKS AMI) configures, under which the training pods already
  run GPU containers with a read-only root; vLLM writes only to the presets' emptyDirs
  (``/home``, its caches under ``HOME``; ``/tmp``; ``/models``; ``/dev/shm``). Where a
  site's toolkit runs the CDI ldcache hook in the container, this is the setting to
  revisit (not verified on such a node).
* Pod security context: ``runAsNonRoot`` and RuntimeDefault seccomp on every pod,
  including the endpoint picker's, which upstream leaves without one.
* Images from the stack's registry (the same tags), and ``HF_HUB_OFFLINE=1`` (with
  ``TRANSFORMERS_OFFLINE``, and vLLM's and Hugging Face's telemetry off) in every
  container: nothing in these pods may reach a public hub.
* Limits on every container: upstream's model server has no resources at all and its
  tokenizer requests only; the platform's services set the model server's from the
  pool (they win in the merge), and these defaults bound any pod that would not.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from modules.k8s.common import Manifest
from modules.k8s.names import PART_OF
from modules.k8s.serving.spec import KSERVE_NAMESPACE

UPSTREAM = Path(__file__).resolve().parent / "upstream"
TEMPLATE_PRESET = "kserve-config-llm-template"
DATA_PARALLEL_PRESET = "kserve-config-llm-worker-data-parallel"
SCHEDULER_PRESET = "kserve-config-llm-scheduler"
PRESETS = (TEMPLATE_PRESET, DATA_PARALLEL_PRESET, SCHEDULER_PRESET)

#: Every model server, tokenizer and endpoint picker container gets these: the Hugging
#: Face libraries never call the hub, and nothing reports usage out of the region.
OFFLINE_ENV: tuple[tuple[str, str], ...] = (
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("HF_HUB_DISABLE_TELEMETRY", "1"),
    ("VLLM_NO_USAGE_STATS", "1"),
    ("DO_NOT_TRACK", "1"),
)


#: Requests and limits of a preset container that has none (`restricted_preset`).
DEFAULT_LIMITS = {"cpu": "2", "memory": "8Gi"}


def restricted_container_context() -> dict[str, Any]:
    """The restricted profile for one container, the image's own (non-root) user."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_pod_context() -> dict[str, Any]:
    return {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


@cache
def _upstream_text(name: str) -> str:
    return (UPSTREAM / f"{name}.yaml").read_text(encoding="utf-8")


def upstream_preset(name: str) -> Manifest:
    """The vendored upstream preset ``name`` (a fresh copy)."""
    loaded: Manifest = yaml.safe_load(_upstream_text(name))
    return loaded


def pod_specs(spec: Manifest) -> Iterator[tuple[str, Manifest]]:
    """(path, pod spec) of every pod an LLMInferenceService(Config) spec describes: the
    template, the worker, the endpoint picker's, and the same of ``prefill``."""
    for owner, path in ((spec, "spec"), (spec.get("prefill") or {}, "spec.prefill")):
        for key in ("template", "worker"):
            if isinstance(owner.get(key), dict):
                yield f"{path}.{key}", owner[key]
    scheduler = (spec.get("router") or {}).get("scheduler") or {}
    if isinstance(scheduler.get("template"), dict):
        yield "spec.router.scheduler.template", scheduler["template"]


def containers_of(pod: Manifest) -> Iterator[Manifest]:
    for key in ("initContainers", "containers"):
        yield from pod.get(key) or []


def with_env(container: Manifest, env: tuple[tuple[str, str], ...]) -> None:
    """Set each variable of ``env`` in ``container`` (replacing one of the same name)."""
    names = {name for name, _ in env}
    kept = [e for e in container.get("env") or [] if e.get("name") not in names]
    container["env"] = kept + [{"name": name, "value": value} for name, value in env]


def restricted_preset(name: str, image: Callable[[str], str]) -> Manifest:
    """The platform's copy of upstream preset ``name``: restricted, offline, and with
    each image ``repo/path:tag`` replaced by ``image(upstream reference)``."""
    preset = copy.deepcopy(upstream_preset(name))
    preset["metadata"] = {
        "name": name,
        "namespace": KSERVE_NAMESPACE,
        "labels": dict(PART_OF),
        "annotations": {
            "gpuplatform.ae/overrides": f"kserve/kserve v0.20.0 {name} (restricted, offline)"
        },
    }
    for _, pod in pod_specs(preset["spec"]):
        pod["securityContext"] = {**(pod.get("securityContext") or {}), **restricted_pod_context()}
        for container in containers_of(pod):
            container["securityContext"] = restricted_container_context()
            container["image"] = image(str(container["image"]))
            with_env(container, OFFLINE_ENV)
            resources = container.setdefault("resources", {})
            if not resources.get("limits"):
                # Upstream's requests (the tokenizer's 256m, 500Mi) lie below these.
                resources["limits"] = dict(DEFAULT_LIMITS)
                resources.setdefault("requests", dict(DEFAULT_LIMITS))
    return preset
