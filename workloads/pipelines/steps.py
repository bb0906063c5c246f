"""The steps of the data-to-model pipeline as data: which stage's environment runs each,
which module (``python -m workloads.<stage>...``) and with which arguments.

One table serves both places a step runs:

* on the cluster, each step is a KFP container component (`workloads.pipelines.components`)
  whose container is the stage's image running ``python -m <module> <args>``, the
  arguments' KFP placeholders filled in by KFP's launcher;
* locally, each step is a lightweight component that KFP's `SubprocessRunner` runs,
  which starts the stage's own interpreter (its virtual environment's ``python``) on the
  same module and the same arguments, filled in with the run's values
  (`workloads.pipelines.local`).

So the two cannot drift apart in what they run. Pure standard library: the pipeline's
own environment (KFP's SDK) imports it, and so do the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: The registry host of the stage images the compiled pipeline names. ``.invalid`` is
#: reserved (RFC 2606): an image reference that still carries it can never be pulled by
#: mistake. The cluster install replaces it with the stack's in-region registry
#: (`rebase_images`).
IMAGE_REGISTRY_PLACEHOLDER = "pipeline-images.invalid"
#: The image tag the compiled pipeline names (the project's version; the stacks refuse
#: ``latest``).
IMAGE_TAG = "0.1.0"

#: On the cluster, how the steps that talk to MLflow (`TRACKED`) reach it as the
#: ``pipelines`` user (names the Kubernetes side creates in ``kubeflow``:
#: `modules.k8s.pipelines`; tests/k8s checks the compiled pipeline against them):
#: its credentials Secret (keys ``username``, ``password``), the Secret whose ``ca.crt``
#: is the cluster CA (cert-manager's, as in every team namespace) and where it is
#: mounted, the experiment the runs are filed under (the pipelines user creates and so
#: manages it; MLflow's default permission leaves it only reading the teams'), and the
#: pod label the NetworkPolicies to the tracking server select.
TRACKING_CREDENTIALS_SECRET = "mlflow-credentials"
TRACKING_CA_SECRET = "gpuplatform-ca"
TRACKING_CA_KEY = "ca.crt"
TRACKING_CA_DIR = "/etc/gpuplatform/ca"
TRACKING_EXPERIMENT = "data-to-model"
TRACKING_CLIENT_LABEL = "gpuplatform.ae/mlflow-client"

#: Each stage: its virtual environment here (the Makefile's VENV_<env>) and its image's
#: repository name on the cluster.
STAGE_VENVS = {
    "data": ".venv-data",
    "training": ".venv-training",
    "lifecycle": ".venv-lifecycle",
}
STAGE_IMAGES = {
    "data": "data",
    "training": "training",
    "lifecycle": "lifecycle",
}


@dataclass(frozen=True)
class Ref:
    """An argument filled in per run: a component input or output named ``name``
    (its value, or its path for an artifact or an output parameter)."""

    name: str


@dataclass(frozen=True)
class Step:
    """One step of the pipeline.

    Args:
        name: the task's name in the pipeline (and the component's).
        stage: whose environment and image run it (a key of `STAGE_VENVS`).
        module: what ``python -m`` runs.
        args: the command line after the module: literal strings and `Ref` s.
    """

    name: str
    stage: str
    module: str
    args: tuple[str | Ref, ...]

    @property
    def refs(self) -> tuple[str, ...]:
        """The names of the per-run values the step's command line takes."""
        return tuple(a.name for a in self.args if isinstance(a, Ref))


def _r(name: str) -> Ref:
    return Ref(name)


INGEST = Step(
    "ingest",
    "data",
    "workloads.data.ingest",
    (_r("raw"), "--out", _r("snapshot")),
)
# Validation, anonymisation and tokenisation are one Spark job (workloads.data.prepare):
# the records are validated, deduplicated and anonymised in the same pass that tokenises
# them, so no anonymised-but-untokenised copy of the text is ever written between steps.
PREPARE = Step(
    "prepare",
    "data",
    "workloads.data.prepare",
    (
        _r("snapshot"),
        "--out", _r("dataset"),
        "--name", _r("dataset_name"),
        "--workers", _r("spark_workers"),
    ),
)  # fmt: skip
TRAIN = Step(
    "train",
    "training",
    "workloads.training.launch",
    (
        "--nproc", _r("nproc"),
        "--",
        "--preset", _r("preset"),
        "--steps", _r("steps"),
        "--data-dir", _r("dataset"),
        "--ckpt-dir", _r("checkpoint"),
        "--tracking-uri", _r("tracking_uri"),
        # No Prometheus endpoint for a pipeline step: nothing scrapes a step's pod, and
        # two local runs would compete for the port.
        "--metrics-port", "0",
    ),
)  # fmt: skip
EVALUATE = Step(
    "evaluate",
    "lifecycle",
    "workloads.tracking.evaluate",
    (
        _r("checkpoint"),
        "--data-dir", _r("dataset"),
        "--tracking-uri", _r("tracking_uri"),
        "--name", _r("model_name"),
        "--max-regression", _r("max_loss_regression"),
        "--result", _r("evaluation"),
        "--run-id-out", _r("run_id"),
        "--name-out", _r("registered_name"),
    ),
)  # fmt: skip
EXPORT = Step(
    "export",
    "lifecycle",
    "workloads.inference.export",
    (_r("checkpoint"), "--out", _r("onnx"), "--data-dir", _r("dataset")),
)
REGISTER = Step(
    "register",
    "lifecycle",
    "workloads.tracking.register",
    (
        _r("run_id"),
        "--tracking-uri", _r("tracking_uri"),
        "--name", _r("registered_name"),
        "--export-dir", _r("onnx"),
    ),
)  # fmt: skip
CANARY = Step(
    "canary",
    "lifecycle",
    "workloads.tracking.canary",
    (
        "--run-id", _r("run_id"),
        "--name", _r("registered_name"),
        "--tracking-uri", _r("tracking_uri"),
        "--stack", _r("stack"),
        "--percent", _r("canary_percent"),
        "--plan", _r("plan"),
        "--version-out", _r("version"),
    ),
)  # fmt: skip

#: The steps in the order the pipeline runs them.
STEPS = (INGEST, PREPARE, TRAIN, EVALUATE, EXPORT, REGISTER, CANARY)
BY_NAME = {step.name: step for step in STEPS}
#: The steps that talk to the tracking server (they take its URI): on the cluster only
#: these get the MLflow credentials, the CA and the way through the fences.
TRACKED = tuple(step.name for step in STEPS if "tracking_uri" in step.refs)


def render(step: Step, values: Mapping[str, object]) -> list[object]:
    """The step's command line after the module, each `Ref` replaced by its value in
    ``values`` (a KFP placeholder on the cluster, a string or number locally).

    Raises:
        KeyError: ``values`` lacks one of the step's refs or has one it does not take.
    """
    missing = [name for name in step.refs if name not in values]
    extra = sorted(set(values) - set(step.refs))
    if missing or extra:
        raise KeyError(f"step {step.name}: missing values {missing}, unexpected {extra}")
    return [values[a.name] if isinstance(a, Ref) else a for a in step.args]


def command(step: Step, python: str = "python") -> list[str]:
    """What the step's container (or local process) starts before its arguments."""
    return [python, "-m", step.module]


def image(stage: str, registry: str = IMAGE_REGISTRY_PLACEHOLDER, tag: str = IMAGE_TAG) -> str:
    """The image a stage's steps run in on the cluster."""
    return f"{registry}/{STAGE_IMAGES[stage]}:{tag}"


def rebase_images(spec: dict[str, object], registry: str) -> dict[str, object]:
    """The compiled pipeline (its IR as loaded from YAML) with every executor's image
    moved from `IMAGE_REGISTRY_PLACEHOLDER` to ``registry`` (the stack's in-region
    registry, e.g. ``<account>.dkr.ecr.me-central-1.amazonaws.com/<prefix>``); a new
    dict, ``spec`` is not changed.

    Raises:
        ValueError: an executor names an image outside the placeholder registry.
    """
    import copy  # noqa: PLC0415 - only the cluster side calls this

    out = copy.deepcopy(spec)
    deployment = out.get("deploymentSpec")
    executors = deployment.get("executors", {}) if isinstance(deployment, dict) else {}
    prefix = f"{IMAGE_REGISTRY_PLACEHOLDER}/"
    for name, executor in executors.items():
        container = executor.get("container") if isinstance(executor, dict) else None
        if not isinstance(container, dict):
            continue  # the importer has no container
        current = str(container.get("image", ""))
        if not current.startswith(prefix):
            raise ValueError(f"executor {name} runs {current!r}, not a stage image")
        container["image"] = f"{registry.rstrip('/')}/{current.removeprefix(prefix)}"
    return out
