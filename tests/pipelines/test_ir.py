"""The compiled pipeline, read back with KFP's own structures: the committed IR is what
the definition compiles to today, it parses as KFP's `PipelineSpec` message, its graph
runs the steps in the pipeline's order with the gate before anything is exported, and
each step is its stage's image running its stage's module with the command line of
`workloads.pipelines.steps`. The local pipeline (KFP's local runner) is the same graph.

Run in the pipelines environment (.venv-pipelines: the KFP SDK; the Makefile's
TESTS_pipelines).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import json_format
from kfp import compiler, components
from kfp.pipeline_spec import pipeline_spec_pb2

from workloads.pipelines import steps
from workloads.pipelines.pipeline import (
    IR_FILE,
    PIPELINE_NAME,
    cluster_pipeline,
    compile_ir,
    local_pipeline,
)

ROOT = Path(__file__).resolve().parents[2]
#: The pipeline's tasks and what each must wait for: the chain of the issue, with the
#: gate (evaluate) before export, and the data each step reads.
DEPENDENCIES = {
    "importer": set(),
    "ingest": {"importer"},
    "prepare": {"ingest"},
    "train": {"prepare"},
    "evaluate": {"prepare", "train"},
    "export": {"prepare", "train", "evaluate"},
    "register": {"train", "evaluate", "export"},
    "canary": {"evaluate", "register"},
}
ORDER = ["importer", "ingest", "prepare", "train", "evaluate", "export", "register", "canary"]
REQUIRED_INPUTS = {"source", "tracking_uri"}


def documents(path: Path) -> list[dict[str, Any]]:
    """The IR's YAML documents: the pipeline spec, then its platform settings if any."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def load_spec(path: Path) -> pipeline_spec_pb2.PipelineSpec:
    """The IR as KFP's `PipelineSpec` message; an unknown field fails the parse."""
    spec = pipeline_spec_pb2.PipelineSpec()
    json_format.ParseDict(documents(path)[0], spec)
    return spec


def load_platform(path: Path) -> pipeline_spec_pb2.PlatformSpec:
    """The IR's platform settings as KFP's `PlatformSpec` message (empty where none)."""
    platform = pipeline_spec_pb2.PlatformSpec()
    rest = documents(path)[1:]
    assert len(rest) <= 1, "more than one document after the pipeline"
    if rest:
        json_format.ParseDict(rest[0], platform)
    return platform


@pytest.fixture(scope="module")
def spec() -> pipeline_spec_pb2.PipelineSpec:
    return load_spec(IR_FILE)


@pytest.fixture(scope="module")
def local_spec(tmp_path_factory: pytest.TempPathFactory) -> pipeline_spec_pb2.PipelineSpec:
    path = tmp_path_factory.mktemp("local") / "local.yaml"
    compiler.Compiler().compile(local_pipeline(), str(path))
    return load_spec(path)


def executor(spec: pipeline_spec_pb2.PipelineSpec, task: str) -> dict[str, Any]:
    component = spec.components[spec.root.dag.tasks[task].component_ref.name]
    executors = json_format.MessageToDict(spec.deployment_spec)["executors"]
    found: dict[str, Any] = executors[component.executor_label]
    return found


def topological(dependencies: dict[str, set[str]]) -> list[str]:
    """The tasks in an order that runs each after what it waits for; fails on a cycle
    or on an order that is not the only one (the pipeline is a chain)."""
    done: list[str] = []
    left = dict(dependencies)
    while left:
        ready = sorted(t for t, needs in left.items() if needs <= set(done))
        assert len(ready) == 1, f"not one next task after {done}: {ready}"
        done.append(ready[0])
        del left[ready[0]]
    return done


def test_the_committed_ir_is_what_the_pipeline_compiles_to(tmp_path: Path) -> None:
    fresh = compile_ir(tmp_path / "data_to_model.yaml").read_text()
    assert IR_FILE.read_text() == fresh, (
        f"{IR_FILE.relative_to(ROOT)} is stale: run `make pipeline-ir` and commit it"
    )


def test_the_staleness_check_notices_a_change(tmp_path: Path) -> None:
    # The check above compares text: a different pipeline must compile differently.
    fresh = compile_ir(tmp_path / "a.yaml").read_text()
    assert fresh.replace("workloads.tracking.evaluate", "workloads.tracking.other") != fresh


def test_the_ir_is_kfps_pipeline_spec_named_data_to_model(
    spec: pipeline_spec_pb2.PipelineSpec,
) -> None:
    assert spec.pipeline_info.name == PIPELINE_NAME == "data-to-model"
    assert spec.schema_version == "2.1.0"
    assert spec.sdk_version.startswith("kfp-2.17.")
    # KFP's loader (what a client uploads) reads it as one pipeline component.
    component = components.load_component_from_file(str(IR_FILE))
    assert component.name == PIPELINE_NAME
    assert set(component.component_spec.inputs) == {
        "source", "tracking_uri", "dataset_name", "model_name", "preset", "steps", "nproc",
        "spark_workers", "max_loss_regression", "stack", "canary_percent",
    }  # fmt: skip
    required = {n for n, i in component.component_spec.inputs.items() if i.default is None}
    assert required == REQUIRED_INPUTS
    assert set(component.component_spec.outputs) == {"Output"}


def test_the_dag_runs_the_steps_in_order_with_the_gate_before_export(
    spec: pipeline_spec_pb2.PipelineSpec,
) -> None:
    tasks = spec.root.dag.tasks
    found = {name: set(task.dependent_tasks) for name, task in tasks.items()}
    assert found == DEPENDENCIES
    assert topological(found) == ORDER
    # The pipeline's output is the version the canary step names.
    output = spec.root.dag.outputs.parameters["Output"].value_from_parameter
    assert (output.producer_subtask, output.output_parameter_key) == ("canary", "version")


def test_the_run_id_and_model_name_come_from_the_gate(
    spec: pipeline_spec_pb2.PipelineSpec,
) -> None:
    for task in ("register", "canary"):
        params = spec.root.dag.tasks[task].inputs.parameters
        for name, key in (("run_id", "run_id"), ("registered_name", "registered_name")):
            source = params[name].task_output_parameter
            assert (source.producer_task, source.output_parameter_key) == ("evaluate", key)


def test_no_step_is_cached(spec: pipeline_spec_pb2.PipelineSpec) -> None:
    # Each reads or writes outside its inputs (source, tracking server, registry).
    for name, task in spec.root.dag.tasks.items():
        if name != "importer":
            assert not task.caching_options.enable_cache, name


def test_the_source_is_imported_from_the_pipeline_parameter(
    spec: pipeline_spec_pb2.PipelineSpec,
) -> None:
    importer = executor(spec, "importer")["importer"]
    assert importer["artifactUri"] == {"runtimeParameter": "uri"}
    assert importer["typeSchema"]["schemaTitle"] == "system.Dataset"
    uri = spec.root.dag.tasks["importer"].inputs.parameters["uri"]
    assert uri.component_input_parameter == "source"
    assert spec.root.dag.tasks["ingest"].inputs.artifacts[
        "raw"
    ].task_output_artifact.producer_task == ("importer")


def placeholders(component: pipeline_spec_pb2.ComponentSpec) -> dict[str, str]:
    """Each input and output of a component -> the placeholder KFP's launcher fills in
    (a parameter's value, an artifact's path, an output parameter's file)."""
    found: dict[str, str] = {}
    for name in component.input_definitions.parameters:
        found[name] = f"{{{{$.inputs.parameters['{name}']}}}}"
    for name in component.input_definitions.artifacts:
        found[name] = f"{{{{$.inputs.artifacts['{name}'].path}}}}"
    for name in component.output_definitions.artifacts:
        found[name] = f"{{{{$.outputs.artifacts['{name}'].path}}}}"
    for name in component.output_definitions.parameters:
        found[name] = f"{{{{$.outputs.parameters['{name}'].output_file}}}}"
    return found


@pytest.mark.parametrize("step", steps.STEPS, ids=lambda s: s.name)
def test_each_step_runs_its_stage_module_in_its_stage_image(
    spec: pipeline_spec_pb2.PipelineSpec, step: steps.Step
) -> None:
    container = executor(spec, step.name)["container"]
    assert container["image"] == f"pipeline-images.invalid/{step.stage}:{steps.IMAGE_TAG}"
    assert container["command"] == ["python", "-m", step.module]
    component = spec.components[spec.root.dag.tasks[step.name].component_ref.name]
    filled = placeholders(component)
    expected = [filled[a.name] if isinstance(a, steps.Ref) else a for a in step.args]
    assert container["args"] == expected


def test_the_modules_the_steps_run_exist() -> None:
    for step in steps.STEPS:
        path = ROOT / (step.module.replace(".", "/") + ".py")
        assert path.is_file(), f"{step.name} runs {step.module}, which is not in the tree"
        assert re.search(r"^if __name__ == \"__main__\":", path.read_text(), re.MULTILINE), (
            f"{step.module} has no command-line entry"
        )


def test_each_step_runs_where_the_makefile_checks_its_module() -> None:
    """A step's environment is the one whose venv the Makefile names for its stage, and
    whose CODE list (what mypy checks there) holds the module the step runs."""
    listed = subprocess.run(
        ["make", "--no-print-directory", "-s", "print-environments"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    environments: dict[str, dict[str, list[str]]] = {}
    for line in listed.splitlines():
        env, key, *values = line.split()
        environments.setdefault(env, {})[key] = values
    for stage, venv in steps.STAGE_VENVS.items():
        assert environments[stage]["venv"] == [venv]
    for step in steps.STEPS:
        path = Path(step.module.replace(".", "/") + ".py")
        code = [Path(c) for c in environments[step.stage]["code"]]
        assert any(path == c or c in path.parents for c in code), (
            f"{step.name} runs {step.module} in the {step.stage} environment, whose CODE "
            f"does not hold it"
        )
    assert {s.stage for s in steps.STEPS} == set(steps.STAGE_VENVS) == set(steps.STAGE_IMAGES)
    assert environments["pipelines"]["code"] == ["workloads/pipelines"]


def interface(component: pipeline_spec_pb2.ComponentSpec) -> dict[str, Any]:
    """A component's inputs and outputs with their types (descriptions left out: the
    cluster's components carry their docstrings' argument lines)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "description"}
        return value

    body = json_format.MessageToDict(component)
    return strip({k: body.get(k) for k in ("inputDefinitions", "outputDefinitions")})


def test_the_local_pipeline_is_the_same_graph(
    spec: pipeline_spec_pb2.PipelineSpec, local_spec: pipeline_spec_pb2.PipelineSpec
) -> None:
    assert local_spec.root == spec.root
    assert set(local_spec.components) == set(spec.components)
    for name, component in spec.components.items():
        assert interface(local_spec.components[name]) == interface(component), name
    # Locally each step is KFP's executor running a function that hands the same values
    # to the step of the same name (workloads.pipelines.runner.run_step).
    for step in steps.STEPS:
        container = executor(local_spec, step.name)["container"]
        assert "kfp.dsl.executor_main" in " ".join(container["command"])
        source = container["command"][-1]
        assert f'run_step(\n        "{step.name}"' in source or f'run_step("{step.name}"' in source
        for ref in step.refs:
            assert f"{ref}=" in source, (step.name, ref)


def test_the_cluster_pipeline_builds_again_identically(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    compiler.Compiler().compile(cluster_pipeline(), str(a))
    compiler.Compiler().compile(cluster_pipeline(), str(b))
    assert a.read_text() == b.read_text()


def test_images_move_to_the_stacks_registry() -> None:
    body = documents(IR_FILE)[0]
    registry = "123456789012.dkr.ecr.me-central-1.amazonaws.com/uae-prod/"
    moved = steps.rebase_images(body, registry)
    images = {
        e["container"]["image"]
        for e in moved["deploymentSpec"]["executors"].values()
        if "container" in e
    }
    assert images == {
        f"123456789012.dkr.ecr.me-central-1.amazonaws.com/uae-prod/{stage}:{steps.IMAGE_TAG}"
        for stage in ("data", "training", "lifecycle")
    }
    assert body == documents(IR_FILE)[0], "the input must not change"
    body["deploymentSpec"]["executors"]["exec-train"]["container"]["image"] = "docker.io/x:1"
    with pytest.raises(ValueError, match=r"exec-train runs 'docker\.io/x:1'"):
        steps.rebase_images(body, registry)


def test_render_refuses_missing_and_unexpected_values() -> None:
    values = {name: name for name in steps.INGEST.refs}
    assert steps.render(steps.INGEST, values) == ["raw", "--out", "snapshot"]
    with pytest.raises(KeyError, match=r"missing values \['snapshot'\]"):
        steps.render(steps.INGEST, {"raw": "r"})
    with pytest.raises(KeyError, match=r"unexpected \['other'\]"):
        steps.render(steps.INGEST, {**values, "other": "o"})


# -- the cluster's MLflow access (kfp-kubernetes platform settings) --------------------

TRACKED = {"train", "evaluate", "register", "canary"}


def kubernetes_executors(path: Path) -> dict[str, Any]:
    """Executor label -> its Kubernetes settings, each parsed as kfp-kubernetes'
    `KubernetesExecutorConfig` (an unknown field fails the parse)."""
    from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb  # noqa: PLC0415

    platform = load_platform(path)
    if "kubernetes" not in platform.platforms:
        return {}
    executors = json_format.MessageToDict(platform.platforms["kubernetes"].deployment_spec)
    found: dict[str, Any] = {}
    for label, config in executors.get("executors", {}).items():
        json_format.ParseDict(config, k8s_pb.KubernetesExecutorConfig())
        found[label] = config
    return found


def test_exactly_the_steps_that_talk_to_mlflow_are_tracked() -> None:
    # The steps that take the tracking server's URI (training logs to it; the gate,
    # registration and the canary read and write the registry).
    assert set(steps.TRACKED) == TRACKED
    assert {s.name for s in steps.STEPS if "tracking_uri" in s.refs} == TRACKED


def test_tracked_steps_get_the_pipelines_users_secret_and_the_cluster_ca(
    spec: pipeline_spec_pb2.PipelineSpec,
) -> None:
    executors = kubernetes_executors(IR_FILE)
    labels = {
        name: spec.components[spec.root.dag.tasks[name].component_ref.name].executor_label
        for name in spec.root.dag.tasks
    }
    # Only the tracked steps have Kubernetes settings at all.
    assert set(executors) == {labels[name] for name in TRACKED}
    for name in TRACKED:
        config = executors[labels[name]]
        (env,) = config["secretAsEnv"]
        assert env["secretNameParameter"]["runtimeValue"]["constant"] == "mlflow-credentials"
        assert env["keyToEnv"] == [
            {"secretKey": "username", "envVar": "MLFLOW_TRACKING_USERNAME"},
            {"secretKey": "password", "envVar": "MLFLOW_TRACKING_PASSWORD"},
        ]
        assert not env.get("optional", False)
        (volume,) = config["secretAsVolume"]
        assert volume["secretNameParameter"]["runtimeValue"]["constant"] == "gpuplatform-ca"
        assert volume["mountPath"] == steps.TRACKING_CA_DIR
        assert config["podMetadata"]["labels"] == {steps.TRACKING_CLIENT_LABEL: "true"}
        assert set(config) == {"secretAsEnv", "secretAsVolume", "podMetadata"}
        container = executor(spec, name)["container"]
        assert {e["name"]: e["value"] for e in container["env"]} == {
            "MLFLOW_TRACKING_SERVER_CERT_PATH": f"{steps.TRACKING_CA_DIR}/ca.crt",
            "MLFLOW_EXPERIMENT_NAME": steps.TRACKING_EXPERIMENT,
        }
    for name in set(spec.root.dag.tasks) - TRACKED:
        assert "env" not in executor(spec, name).get("container", {}), name


def test_the_local_pipeline_has_no_cluster_settings(tmp_path: Path) -> None:
    # KFP's local runner gets the caller's MLflow settings, nothing of the cluster's.
    path = tmp_path / "local.yaml"
    compiler.Compiler().compile(local_pipeline(), str(path))
    assert len(documents(path)) == 1
    assert kubernetes_executors(path) == {}
    assert "mlflow-credentials" not in path.read_text()
