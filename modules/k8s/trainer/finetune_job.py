"""A LoRA fine-tune (`make finetune`, docs/finetune.md) as a Kubeflow Trainer ``TrainJob``
on the platform's torch runtime, reading its base model and data only from in-region
storage.

The job is a `TrainingJob` of one node on a ``cpu-training`` pool (the fine-tuning loop
runs on CPUs, in fp32, one process: a GPU pool's GPUs would sit idle), so it takes the
runtime, queue label, suspension, ServiceAccount and checkpoint-claim patch exactly as
training does (`modules.k8s.trainer.training_job.manifests.train_job_manifest`); what
differs is the trainer step: the fine-tuning image running ``python -m
workloads.finetune --base-model <base> --data <data> --out <out>``.

Base, data and output are ``pvc://<claim>/<path>`` on the team's checkpoint claim, the
volume the runtime mounts at ``/checkpoints`` (the FSx for Lustre file system or the gp3
volume of the stack's region; `modules.k8s.trainer.pods`). Nothing is fetched from a
hub: ``HF_HUB_OFFLINE=1``, and a hub id, an ``hf://`` URI, a hub address or any other
scheme is refused here; the policy pack's ``uae-llm-model-residency`` rule refuses the
same in any TrainJob of a plan (the base after ``--base-model``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from modules.k8s.trainer.pods import DEFAULT_CHECKPOINT_MOUNT
from modules.k8s.trainer.training_job.manifests import train_job_manifest
from modules.k8s.trainer.training_job.spec import TrainingJobSpec
from modules.pools import NodePoolProfile
from modules.validation import Checker

#: The module the trainer step runs (workloads/finetune/Dockerfile's image).
FINETUNE_MODULE = "workloads.finetune"
#: The flag the base is named with: the residency rule reads a model after it.
BASE_FLAG = "--base-model"
#: Offline Hugging Face libraries, their caches on the writable /tmp.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": "/tmp/hf"}
#: ``pvc://<claim>/<path>``: a claim name (a DNS subdomain) and a relative path.
_PVC_URI = re.compile(r"^pvc://(?P<claim>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)/(?P<path>.+)$")


@dataclass(frozen=True)
class FinetuneJobSpec:
    """One LoRA fine-tune on the cluster.

    Args:
        name: the TrainJob's name (an RFC 1035 label of at most 40 characters).
        namespace: the team's namespace.
        pool: a ``cpu-training`` pool (the loop runs on CPUs).
        local_queue: the team's Kueue LocalQueue.
        priority_class: one of the platform's PriorityClasses (selects the runtime).
        service_account: the team's pod-identity ServiceAccount.
        image: the fine-tuning image (workloads/finetune/Dockerfile) in the stack's
            in-region registry, with a fixed tag or digest.
        checkpoint_claim: the team's checkpoint PersistentVolumeClaim (mounted at
            ``/checkpoints``): base, data and output live on it.
        base: the base model's folder, ``pvc://<checkpoint_claim>/<path>``.
        data: the dataset directory or JSONL file, ``pvc://<checkpoint_claim>/<path>``.
        out: the output directory, ``pvc://<checkpoint_claim>/<path>``.
        extra_args: more ``workloads.finetune`` options (``--steps 200`` ...).
        hold: created suspended and out of the queue until a user releases it.
    """

    name: str
    namespace: str
    pool: NodePoolProfile
    local_queue: str
    priority_class: str
    service_account: str
    image: str
    checkpoint_claim: str
    base: str
    data: str
    out: str
    extra_args: tuple[str, ...] = ()
    hold: bool = True

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            self.pool.role == "cpu-training" and not self.pool.has_gpus,
            "pool",
            self.pool.name,
            "a cpu-training pool: the fine-tune runs on CPUs (fp32, one process), and a "
            "GPU pool's GPUs would sit idle",
        )
        paths = {}
        for field in ("base", "data", "out"):
            value = getattr(self, field)
            paths[field] = self._volume_path(check, field, value)
        out, sources = paths["out"], [p for p in (paths["base"], paths["data"]) if p]
        if out is not None:
            check.require(
                not any(out == p or p in out.parents or out in p.parents for p in sources),
                "out",
                self.out,
                "a path outside base and data (and not containing them): the base is only read",
            )
        bad = [a for a in self.extra_args if a.split("=")[0] in ("--base-model", "--data", "--out")]
        check.require(
            not bad,
            "extra_args",
            bad,
            "other options than --base-model, --data, --out (base, data and out set them)",
        )
        check.done()
        # Then the TrainJob's own checks (name, image, queue, runtime).
        _ = self.training_job

    def _volume_path(self, check: Checker, field: str, value: str) -> PurePosixPath | None:
        """The file's path in the pod, or None (the problem noted) when ``value`` is not
        ``pvc://<checkpoint_claim>/<relative path>``."""
        found = _PVC_URI.match(value)
        expected = (
            f"pvc://{self.checkpoint_claim}/<path>: the team's checkpoint volume (in the "
            "stack's region); a hub id, hf://, https:// or another claim is refused, and "
            "an s3:// model is first copied onto the volume"
        )
        if not found or found["claim"] != self.checkpoint_claim:
            check.require(False, field, value, expected)
            return None
        relative = PurePosixPath(found["path"])
        ok = not relative.is_absolute() and ".." not in relative.parts and str(relative) != "."
        check.require(ok, field, value, "a path below the claim's root, without '..'")
        return PurePosixPath(DEFAULT_CHECKPOINT_MOUNT) / relative if ok else None

    @property
    def training_job(self) -> TrainingJobSpec:
        """The job as the platform's training job on the torch runtime (one node)."""
        return TrainingJobSpec(
            name=self.name,
            namespace=self.namespace,
            pool=self.pool,
            local_queue=self.local_queue,
            priority_class=self.priority_class,
            service_account=self.service_account,
            image=self.image,
            checkpoint_claim=self.checkpoint_claim,
            nodes=1,
            cpu_training=True,
            hold=self.hold,
            launcher="trainer",
            framework="torch",
        )

    def pod_path(self, uri: str) -> str:
        """Where ``pvc://<claim>/<path>`` is in the trainer's container."""
        found = _PVC_URI.match(uri)
        assert found is not None  # checked in __post_init__
        return str(PurePosixPath(DEFAULT_CHECKPOINT_MOUNT) / found["path"])


def finetune_job_manifest(spec: FinetuneJobSpec) -> dict[str, Any]:
    """The fine-tune as a TrainJob (``trainer.kubeflow.org/v1alpha1``): the training
    job's TrainJob with the fine-tuning step as its trainer."""
    manifest = train_job_manifest(spec.training_job)
    trainer = manifest["spec"]["trainer"]
    trainer["command"] = ["python", "-m", FINETUNE_MODULE]
    trainer["args"] = [
        BASE_FLAG,
        spec.pod_path(spec.base),
        "--data",
        spec.pod_path(spec.data),
        "--out",
        spec.pod_path(spec.out),
        *spec.extra_args,
    ]
    trainer["numProcPerNode"] = 1
    env = {item["name"]: item["value"] for item in trainer.get("env", [])} | OFFLINE_ENV
    trainer["env"] = [{"name": k, "value": v} for k, v in sorted(env.items())]
    return manifest
