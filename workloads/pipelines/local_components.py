"""The pipeline's steps as lightweight components, for KFP's local runner.

KFP's `SubprocessRunner` runs only lightweight Python components: each function below
is run by KFP's executor in a process of the pipelines environment, with its inputs'
values and its artifacts' local paths. Each body hands them to `run_step`, which runs the
step's module in its stage's own environment with the command line that the container
component of the same name runs on the cluster (`workloads.pipelines.components`).

Each function's source is what KFP runs (it serialises it), so the bodies import what
they use; the repository is on the executor's ``PYTHONPATH`` (the local driver puts it
there). The signatures are the container components' own (tests/pipelines compares the
two). ``base_image`` is unused by the local runner (it runs the current interpreter);
the KFP SDK is not installed into it either (``install_kfp_package=False``): these
components are never compiled for a cluster.
"""

# No `from __future__ import annotations`: KFP reads the annotations as types.

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output, OutputPath

#: Named only because KFP needs an image name; the local runner runs no image.
LOCAL_IMAGE = "python:3.11-slim-bookworm"


@dsl.component(base_image=LOCAL_IMAGE, install_kfp_package=False)
def ingest(raw: Input[Dataset], snapshot: Output[Dataset]) -> None:
    """Copy the raw .txt/.jsonl files with their listing (sizes, SHA-256)."""
    from workloads.pipelines.runner import run_step

    run_step("ingest", raw=raw.path, snapshot=snapshot.path)


@dsl.component(base_image=LOCAL_IMAGE, install_kfp_package=False)
def prepare(
    snapshot: Input[Dataset],
    dataset: Output[Dataset],
    dataset_name: str,
    spark_workers: int,
) -> None:
    """Validate, deduplicate, anonymise and tokenise (one Spark job) into a versioned
    dataset; a dataset that fails validation stops the pipeline."""
    from workloads.pipelines.runner import run_step

    run_step(
        "prepare",
        snapshot=snapshot.path,
        dataset=dataset.path,
        dataset_name=dataset_name,
        spark_workers=spark_workers,
    )


@dsl.component(base_image=LOCAL_IMAGE, install_kfp_package=False)
def train(
    dataset: Input[Dataset],
    checkpoint: Output[Model],
    preset: str,
    steps: int,
    nproc: int,
    tracking_uri: str,
) -> None:
    """Train on the dataset (its manifest verified first), tracked in MLflow with the
    dataset as the run's input."""
    from workloads.pipelines.runner import run_step

    run_step(
        "train",
        dataset=dataset.path,
        checkpoint=checkpoint.path,
        preset=preset,
        steps=steps,
        nproc=nproc,
        tracking_uri=tracking_uri,
    )


@dsl.component(base_image=LOCAL_IMAGE, install_kfp_package=False)
def evaluate(
    checkpoint: Input[Model],
    dataset: Input[Dataset],
    tracking_uri: str,
    model_name: str,
    max_loss_regression: float,
    evaluation: Output[Artifact],
    run_id: OutputPath(str),  # type: ignore[valid-type]
    registered_name: OutputPath(str),  # type: ignore[valid-type]
) -> None:
    """The gate: held-out loss no worse than the champion's, else the pipeline stops."""
    from workloads.pipelines.runner import run_step

    run_step(
        "evaluate",
        checkpoint=checkpoint.path,
        dataset=dataset.path,
        tracking_uri=tracking_uri,
        model_name=model_name,
        max_loss_regression=max_loss_regression,
        evaluation=evaluation.path,
        run_id=run_id,
        registered_name=registered_name,
    )


@dsl.component(base_image=LOCAL_IMAGE, install_kfp_package=False)
def export(checkpoint: Input[Model], dataset: Input[Dataset], onnx: Output[Model]) -> None:
    """ONNX fp32 and int8 with the model card, parity checked, and the Triton repository."""
    from workloads.pipelines.runner import run_step

    run_step("export", checkpoint=checkpoint.path, dataset=dataset.path, onnx=onnx.path)


@dsl.component(base_image=LOCAL_IMAGE, install_kfp_package=False)
def register(
    run_id: str,
    registered_name: str,
    tracking_uri: str,
    onnx: Input[Model],
    checkpoint: Input[Model],
) -> None:
    """Register the run's export as a model version (champion if first, else challenger)."""
    from workloads.pipelines.runner import run_step

    del checkpoint  # read by registration from the path the run recorded
    run_step(
        "register",
        run_id=run_id,
        registered_name=registered_name,
        tracking_uri=tracking_uri,
        onnx=onnx.path,
    )


@dsl.component(base_image=LOCAL_IMAGE, install_kfp_package=False)
def canary(
    run_id: str,
    registered_name: str,
    tracking_uri: str,
    stack: str,
    canary_percent: int,
    plan: Output[Artifact],
    version: OutputPath(str),  # type: ignore[valid-type]
) -> None:
    """The registered version's roll-out as stack lines; printed and written, not applied."""
    from workloads.pipelines.runner import run_step

    run_step(
        "canary",
        run_id=run_id,
        registered_name=registered_name,
        tracking_uri=tracking_uri,
        stack=stack,
        canary_percent=canary_percent,
        plan=plan.path,
        version=version,
    )
