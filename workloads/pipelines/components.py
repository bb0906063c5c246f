"""The pipeline's steps as KFP container components: what the compiled pipeline runs on
the cluster.

Each is its stage's image running ``python -m workloads.<stage>...`` with the command
line `workloads.pipelines.steps` holds, its per-run values KFP placeholders (an input's
value, an artifact's or output parameter's local path, filled in by KFP's launcher,
which downloads input artifacts from the artifact store and uploads outputs to it). The
images have no KFP SDK in them: a container component needs none.

`workloads.pipelines.local_components` has the same components, with the same
signatures, for KFP's local runner (tests/pipelines check that the two agree).

`tracking_access` is the cluster's side of talking to MLflow: the compiled pipeline's
Kubernetes platform settings (the ``kfp-kubernetes`` extension of the SDK) for the steps
that do. The local pipeline has none: its steps use the caller's own MLflow settings.
"""

# No `from __future__ import annotations`: KFP reads the annotations as types.

from kfp import dsl, kubernetes
from kfp.dsl import Artifact, Dataset, Input, Model, Output, OutputPath

from workloads.pipelines.steps import (
    CANARY,
    EVALUATE,
    EXPORT,
    INGEST,
    PREPARE,
    REGISTER,
    TRACKING_CA_DIR,
    TRACKING_CA_KEY,
    TRACKING_CA_SECRET,
    TRACKING_CLIENT_LABEL,
    TRACKING_CREDENTIALS_SECRET,
    TRACKING_EXPERIMENT,
    TRAIN,
    Step,
    command,
    image,
    render,
)


def tracking_access(task: dsl.PipelineTask) -> dsl.PipelineTask:
    """A step that talks to MLflow, as the cluster runs it: MLflow's client reads
    ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` from the ``pipelines`` user's Secret in
    ``kubeflow`` (a reference: the value never enters the pipeline) and verifies the
    server with the cluster CA (``MLFLOW_TRACKING_SERVER_CERT_PATH``, the CA Secret
    mounted read-only), the trainers' convention (`modules.k8s.trainer.tracking`). Its
    runs go to their own experiment, and its pod carries the label that the fences
    between ``kubeflow`` and the tracking server admit (no other step's pod reaches
    it). KFP's launcher applies this on the cluster only; the local runner never sees
    it (the local pipeline is built without it)."""
    kubernetes.use_secret_as_env(
        task,
        secret_name=TRACKING_CREDENTIALS_SECRET,
        secret_key_to_env={
            "username": "MLFLOW_TRACKING_USERNAME",
            "password": "MLFLOW_TRACKING_PASSWORD",
        },
    )
    kubernetes.use_secret_as_volume(
        task, secret_name=TRACKING_CA_SECRET, mount_path=TRACKING_CA_DIR
    )
    task.set_env_variable(
        "MLFLOW_TRACKING_SERVER_CERT_PATH", f"{TRACKING_CA_DIR}/{TRACKING_CA_KEY}"
    )
    task.set_env_variable("MLFLOW_EXPERIMENT_NAME", TRACKING_EXPERIMENT)
    kubernetes.add_pod_label(task, TRACKING_CLIENT_LABEL, "true")
    return task


def _spec(step: Step, **values: object) -> dsl.ContainerSpec:
    return dsl.ContainerSpec(
        image=image(step.stage), command=command(step), args=render(step, values)
    )


@dsl.container_component
def ingest(raw: Input[Dataset], snapshot: Output[Dataset]) -> dsl.ContainerSpec:
    """Copy the raw .txt/.jsonl files with their listing (sizes, SHA-256).

    Args:
        raw: the source files (on the cluster, imported from the in-region bucket).
        snapshot: the copy the later steps read, with ingest.json.
    """
    return _spec(INGEST, raw=raw.path, snapshot=snapshot.path)


@dsl.container_component
def prepare(
    snapshot: Input[Dataset],
    dataset: Output[Dataset],
    dataset_name: str,
    spark_workers: int,
) -> dsl.ContainerSpec:
    """Validate, deduplicate, anonymise and tokenise (one Spark job) into a versioned
    dataset; a dataset that fails validation stops the pipeline.

    Args:
        snapshot: the ingested files.
        dataset: shards, manifest.json (its digest is the version) and report.json.
        dataset_name: the dataset's name in the manifest and in MLflow.
        spark_workers: Spark local-mode cores.
    """
    return _spec(
        PREPARE,
        snapshot=snapshot.path,
        dataset=dataset.path,
        dataset_name=dataset_name,
        spark_workers=spark_workers,
    )


@dsl.container_component
def train(
    dataset: Input[Dataset],
    checkpoint: Output[Model],
    preset: str,
    steps: int,
    nproc: int,
    tracking_uri: str,
) -> dsl.ContainerSpec:
    """Train on the dataset (its manifest verified first), tracked in MLflow with the
    dataset as the run's input.

    Args:
        dataset: the versioned dataset.
        checkpoint: the run's checkpoint directory (with run.json).
        preset: the model preset.
        steps: optimizer steps.
        nproc: torchrun processes.
        tracking_uri: the MLflow tracking server.
    """
    return _spec(
        TRAIN,
        dataset=dataset.path,
        checkpoint=checkpoint.path,
        preset=preset,
        steps=steps,
        nproc=nproc,
        tracking_uri=tracking_uri,
    )


@dsl.container_component
def evaluate(
    checkpoint: Input[Model],
    dataset: Input[Dataset],
    tracking_uri: str,
    model_name: str,
    max_loss_regression: float,
    evaluation: Output[Artifact],
    run_id: OutputPath(str),  # type: ignore[valid-type]
    registered_name: OutputPath(str),  # type: ignore[valid-type]
) -> dsl.ContainerSpec:
    """The gate: held-out loss no worse than the champion's, else the pipeline stops.

    Args:
        checkpoint: the new model.
        dataset: its dataset (the held-out split is measured).
        tracking_uri: the MLflow tracking server.
        model_name: the registered model (empty: the preset).
        max_loss_regression: allowed excess over the champion's loss (nats/token).
        evaluation: the figures as JSON.
        run_id: the new model's MLflow run.
        registered_name: the registered model's name as resolved.
    """
    return _spec(
        EVALUATE,
        checkpoint=checkpoint.path,
        dataset=dataset.path,
        tracking_uri=tracking_uri,
        model_name=model_name,
        max_loss_regression=max_loss_regression,
        evaluation=evaluation.path,
        run_id=run_id,
        registered_name=registered_name,
    )


@dsl.container_component
def export(
    checkpoint: Input[Model], dataset: Input[Dataset], onnx: Output[Model]
) -> dsl.ContainerSpec:
    """ONNX fp32 and int8 with the model card, parity checked, and the Triton repository.

    Args:
        checkpoint: the model to export.
        dataset: its dataset (held-out parity tokens and the drift reference).
        onnx: the export directory.
    """
    return _spec(EXPORT, checkpoint=checkpoint.path, dataset=dataset.path, onnx=onnx.path)


@dsl.container_component
def register(
    run_id: str,
    registered_name: str,
    tracking_uri: str,
    onnx: Input[Model],
    checkpoint: Input[Model],
) -> dsl.ContainerSpec:
    """Register the run's export as a model version (champion if first, else challenger).

    Args:
        run_id: the run whose checkpoint is registered.
        registered_name: the registered model.
        tracking_uri: the MLflow tracking server.
        onnx: the export of the run's final checkpoint.
        checkpoint: the checkpoint itself: registration logs it to the run from the path
            the run recorded, so it must be present in this step too.
    """
    del checkpoint  # not on the command line; an input so that it is downloaded
    return _spec(
        REGISTER,
        run_id=run_id,
        registered_name=registered_name,
        tracking_uri=tracking_uri,
        onnx=onnx.path,
    )


@dsl.container_component
def canary(
    run_id: str,
    registered_name: str,
    tracking_uri: str,
    stack: str,
    canary_percent: int,
    plan: Output[Artifact],
    version: OutputPath(str),  # type: ignore[valid-type]
) -> dsl.ContainerSpec:
    """The registered version's roll-out as stack lines (canary beside the champion, or
    stable for a first version); printed and written, not applied.

    Args:
        run_id: the run the version came from.
        registered_name: the registered model.
        tracking_uri: the MLflow tracking server.
        stack: the stack named in the printed lines.
        canary_percent: the canary's share of requests.
        plan: the roll-out as JSON.
        version: the registered version.
    """
    return _spec(
        CANARY,
        run_id=run_id,
        registered_name=registered_name,
        tracking_uri=tracking_uri,
        stack=stack,
        canary_percent=canary_percent,
        plan=plan.path,
        version=version,
    )
