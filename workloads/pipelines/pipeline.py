"""The data-to-model pipeline, written once with the KFP SDK:

    source -> ingest -> prepare (validate, anonymise, preprocess) -> train -> evaluate
           -> export -> register -> canary

`build` makes it from a set of components: the container components
(`workloads.pipelines.components`) for the cluster, compiled to KFP's IR YAML
(`workloads/pipelines/data_to_model.yaml`, committed; tests/pipelines fails when it is
stale), or the lightweight ones (`workloads.pipelines.local_components`) that KFP's local
runner runs (`make pipeline`, `workloads.pipelines.local`). Same graph, same inputs and
outputs, same command line per step (`workloads.pipelines.steps`).

``python -m workloads.pipelines.pipeline [--out FILE]`` compiles the cluster pipeline
(`make pipeline-ir` rewrites the committed file).
"""

# No `from __future__ import annotations`: KFP reads the pipeline's annotations as types.

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from kfp import compiler, dsl
from kfp.dsl import Dataset

from workloads.pipelines.steps import TRACKED

PIPELINE_NAME = "data-to-model"
IR_FILE = Path(__file__).resolve().with_name("data_to_model.yaml")
DESCRIPTION = (
    "Raw text to a registered model: ingest, validate and anonymise and preprocess (Spark), "
    "train, evaluate against the registry's champion (stop if worse), export to ONNX, "
    "register, and the canary roll-out as stack lines."
)


def build(components: ModuleType, tracking_access: Callable[[Any], Any] | None = None) -> Any:
    """The pipeline (a KFP ``GraphComponent``) over ``components``: a module holding
    ``ingest``, ``prepare``, ``train``, ``evaluate``, ``export``, ``register`` and
    ``canary`` components. ``tracking_access`` is applied to each task of the steps that
    talk to MLflow (`workloads.pipelines.steps.TRACKED`): the cluster's credentials
    and CA (`workloads.pipelines.components.tracking_access`); None locally."""
    c = components

    @dsl.pipeline(name=PIPELINE_NAME, description=DESCRIPTION)
    def data_to_model(
        source: str,
        tracking_uri: str,
        dataset_name: str = "dataset",
        model_name: str = "",
        preset: str = "tiny",
        steps: int = 150,
        nproc: int = 1,
        spark_workers: int = 2,
        max_loss_regression: float = 0.0,
        stack: str = "<stack>",
        canary_percent: int = 25,
    ) -> str:
        """Raw text to a registered model version.

        Args:
        source: the raw .txt/.jsonl files: a local directory (local runner) or an
            object-store URI in the in-region bucket (cluster; KFP's launcher downloads it).
        tracking_uri: the MLflow tracking server every step talks to.
        dataset_name: the dataset's name in its manifest and in MLflow.
        model_name: the registered model (empty: the preset's name, as make register).
        preset: the trainer's model preset.
        steps: optimizer steps.
        nproc: torchrun processes on the training step's machine.
        spark_workers: Spark local-mode cores of the prepare step.
        max_loss_regression: how much the held-out loss may exceed the champion's.
        stack: the stack named in the canary's stack lines.
        canary_percent: the canary's share of requests.

        Returns:
            The registered model version.
        """
        raw = dsl.importer(artifact_uri=source, artifact_class=Dataset, reimport=True)
        raw.set_display_name("source")
        ingest = c.ingest(raw=raw.output)
        prepare = c.prepare(
            snapshot=ingest.outputs["snapshot"],
            dataset_name=dataset_name,
            spark_workers=spark_workers,
        )
        prepare.set_display_name("validate, anonymise, preprocess")
        dataset = prepare.outputs["dataset"]
        train = c.train(
            dataset=dataset, preset=preset, steps=steps, nproc=nproc, tracking_uri=tracking_uri
        )
        checkpoint = train.outputs["checkpoint"]
        evaluate = c.evaluate(
            checkpoint=checkpoint,
            dataset=dataset,
            tracking_uri=tracking_uri,
            model_name=model_name,
            max_loss_regression=max_loss_regression,
        )
        # Export has no input from the gate, only the order: nothing is exported (and so
        # nothing registered) unless evaluate passed.
        export = c.export(checkpoint=checkpoint, dataset=dataset).after(evaluate)
        register = c.register(
            run_id=evaluate.outputs["run_id"],
            registered_name=evaluate.outputs["registered_name"],
            tracking_uri=tracking_uri,
            onnx=export.outputs["onnx"],
            checkpoint=checkpoint,
        )
        canary = c.canary(
            run_id=evaluate.outputs["run_id"],
            registered_name=evaluate.outputs["registered_name"],
            tracking_uri=tracking_uri,
            stack=stack,
            canary_percent=canary_percent,
        ).after(register)
        # Every step reads or writes something outside its inputs (the source, the
        # tracking server, the registry): a cached result would be a stale one.
        tasks = {
            "ingest": ingest,
            "prepare": prepare,
            "train": train,
            "evaluate": evaluate,
            "export": export,
            "register": register,
            "canary": canary,
        }
        for task in tasks.values():
            task.set_caching_options(False)
        if tracking_access is not None:
            for name in TRACKED:
                tracking_access(tasks[name])
        version: str = canary.outputs["version"]  # a KFP channel: the output, once run
        return version

    return data_to_model


def cluster_pipeline() -> Any:
    """The pipeline of container components (what the IR file holds)."""
    from workloads.pipelines import components  # noqa: PLC0415

    return build(components, components.tracking_access)


def local_pipeline() -> Any:
    """The pipeline of lightweight components (what `make pipeline` runs)."""
    from workloads.pipelines import local_components  # noqa: PLC0415

    return build(local_components)


def compile_ir(path: Path) -> Path:
    """Compile the cluster pipeline to KFP's IR YAML at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(cluster_pipeline(), str(path))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.pipelines.pipeline",
        description="Compile the data-to-model pipeline to KFP's IR YAML.",
    )
    parser.add_argument("--out", type=Path, default=IR_FILE, help=f"default {IR_FILE.name}")
    args = parser.parse_args(argv)
    print(f"pipeline: {PIPELINE_NAME} compiled to {compile_ir(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
