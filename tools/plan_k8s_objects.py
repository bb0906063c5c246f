"""Every Kubernetes object of offline plans, as YAML files a Kubernetes scanner reads
(``make checkov``).

A plan (``build/plan/<stack>.json``, the shape of ``pulumi preview --json``) holds each
Kubernetes object as a step's inputs. Most are written out as they are. Pods that a
controller makes from a custom resource are written out as the pods (or Jobs) it
makes, so that a scanner which knows only the built-in kinds checks them too:

* a ``ClusterTrainingRuntime`` or ``TrainingRuntime``: one Job per replicated job
  (its ``template``, as JobSet creates it; a cluster-scoped runtime's in the stand-in
  namespace `TRAINJOB_NAMESPACE`, since its pods run in each TrainJob's);
* a ``TrainJob``: the Jobs of the runtime it names (from the same plan), with the
  TrainJob's ``trainer`` (image, command, args, env merged by name, resources per node)
  on the trainer's container, as Kubeflow Trainer applies them;
* a ``SparkApplication``: the driver's and the executors' pod templates as Pods, with
  the application's ServiceAccount where the template names none;
* an ``InferenceService``: each component (``predictor``, ``transformer``...) as a Pod:
  its pod fields and containers, and its ``model`` merged into the serving runtime's
  ``kserve-container`` (from the same plan), as KServe does; KServe's own additions
  (the storage initializer, the queue proxy) come from its install, not the plan. A
  serving runtime itself is written as it is: its containers are checked in the
  InferenceServices that use it.

Each made object carries the annotations its controller gives it (a pod template's, a
KServe component's): that is where an object's documented scanner exceptions
(``checkov.io/skip<n>``) reach the pods.

Helm releases are left out: their objects are rendered only by Helm, against the real
charts.

    python -m tools.plan_k8s_objects build/plan/uae-prod.json ... --out build/checkov

writes ``<out>/<stack>/objects.yaml`` per plan and prints how many objects each has;

    python -m tools.plan_k8s_objects --counts build/checkov/uae-prod.json ...

prints, from checkov's JSON reports (``checkov -o json``, one per stack), how many
objects fail each check, per stack and in all, and then how many skip a check by a
documented exception. Standard library and PyYAML only;
nothing of the project is imported.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

Manifest = dict[str, Any]

#: Fields of a KServe component that are not pod fields (kserve's ComponentExtensionSpec
#: and the model), dropped when the component is written as a Pod.
KSERVE_COMPONENT_FIELDS = frozenset(
    {
        "model", "minReplicas", "maxReplicas", "scaleTarget", "scaleMetric",
        "scaleMetricType", "containerConcurrency", "timeout", "canaryTrafficPercent",
        "logger", "batcher", "labels", "annotations", "deploymentStrategy",
        "autoScaling", "workerSpec", "storageUri", "name",
    }
)  # fmt: skip
#: Fields of a serving runtime's spec that are not pod fields.
RUNTIME_FIELDS = frozenset(
    {
        "annotations", "builtInAdapter", "disabled", "grpcDataEndpoint", "grpcEndpoint",
        "httpDataEndpoint", "labels", "multiModel", "protocolVersions", "replicas",
        "storageHelper", "supportedModelFormats", "workerSpec",
    }
)  # fmt: skip
#: The model's fields that are not container fields.
MODEL_FIELDS = frozenset({"modelFormat", "runtime", "storageUri", "protocolVersion", "storage"})
#: The trainer's container in a training runtime's ``node`` job (Kubeflow Trainer).
TRAINER_CONTAINER = "node"
#: A cluster-scoped runtime's pods run in the namespace of each TrainJob that names it
#: (a team's), never in ``default``: its Jobs are written in this stand-in namespace.
TRAINJOB_NAMESPACE = "trainjob-namespace"


def kubernetes_objects(plan: Mapping[str, Any]) -> list[Manifest]:
    """The Kubernetes objects a plan registers (Helm releases left out), in plan order."""
    found = []
    for step in plan.get("steps", []):
        state = step.get("newState") or {}
        inputs = state.get("inputs") or {}
        if str(state.get("type", "")).startswith("kubernetes:") and "kind" in inputs:
            found.append(inputs)
    return found


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _meta(
    obj: Mapping[str, Any], suffix: str, annotations: Mapping[str, Any] | None = None
) -> Manifest:
    """Metadata of an object made from ``obj``: its name with ``suffix``, its namespace
    and labels, where it came from, and the ``annotations`` the controller gives the
    object it makes (a pod template's, a component's)."""
    meta = obj.get("metadata", {})
    made: Manifest = {
        "name": f"{_name(obj)}-{suffix}",
        "annotations": {
            **(annotations or {}),
            "gpuplatform.ae/made-from": f"{obj['kind']}/{_name(obj)}",
        },
    }
    if meta.get("namespace"):
        made["namespace"] = meta["namespace"]
    elif obj["kind"] == "ClusterTrainingRuntime":
        made["namespace"] = TRAINJOB_NAMESPACE
    if meta.get("labels"):
        made["labels"] = dict(meta["labels"])
    return made


def _job(
    obj: Mapping[str, Any], suffix: str, job_spec: Manifest, annotations: Mapping[str, Any]
) -> Manifest:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _meta(obj, suffix, annotations), "spec": job_spec}  # fmt: skip


def _pod(
    obj: Mapping[str, Any], suffix: str, pod_spec: Manifest, annotations: Mapping[str, Any]
) -> Manifest:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(obj, suffix, annotations),
            "spec": pod_spec}  # fmt: skip


def _annotations(template: Mapping[str, Any]) -> Mapping[str, Any]:
    return template.get("metadata", {}).get("annotations") or {}


def runtime_jobs(runtime: Mapping[str, Any]) -> Iterator[Manifest]:
    """A training runtime's Jobs, one per replicated job (with its template's annotations,
    which JobSet gives the Job)."""
    for job in runtime["spec"]["template"]["spec"].get("replicatedJobs", []):
        template = job["template"]
        yield _job(runtime, job["name"], copy.deepcopy(template["spec"]), _annotations(template))


def trainjob_jobs(
    trainjob: Mapping[str, Any], runtimes: Mapping[str, Manifest]
) -> Iterator[Manifest]:
    """A TrainJob's Jobs: its runtime's, with its ``trainer`` on the trainer container."""
    ref = trainjob["spec"]["runtimeRef"]
    runtime = runtimes.get(str(ref["name"]))
    if runtime is None:
        raise SystemExit(
            f"plan_k8s_objects: TrainJob {_name(trainjob)} names runtime {ref['name']}, "
            "which the plan does not hold"
        )
    trainer = trainjob["spec"].get("trainer", {})
    for job in runtime_jobs(runtime):
        part = str(job["metadata"]["name"]).removeprefix(_name(runtime) + "-")
        made = job["metadata"]["annotations"]
        job["metadata"] = _meta(trainjob, part, made)
        for container in job["spec"]["template"]["spec"].get("containers", []):
            if container.get("name") != TRAINER_CONTAINER:
                continue
            for field in ("image", "command", "args"):
                if field in trainer:
                    container[field] = trainer[field]
            if "env" in trainer:  # merged by name, the TrainJob's winning
                names = {e["name"] for e in trainer["env"]}
                kept = [e for e in container.get("env", []) if e["name"] not in names]
                container["env"] = [*kept, *trainer["env"]]
            if "resourcesPerNode" in trainer:
                container["resources"] = trainer["resourcesPerNode"]
        yield job


def spark_pods(app: Mapping[str, Any]) -> Iterator[Manifest]:
    """A SparkApplication's driver and executor pods (their templates, with the role's
    and its template's annotations, which the operator gives the pods)."""
    for role in ("driver", "executor"):
        part = app["spec"].get(role, {})
        template = part.get("template", {})
        spec = copy.deepcopy(template.get("spec", {}))
        if part.get("serviceAccount") and "serviceAccountName" not in spec:
            spec["serviceAccountName"] = part["serviceAccount"]
        yield _pod(app, role, spec, {**_annotations(template), **(part.get("annotations") or {})})


def _runtime_pod_spec(runtime: Mapping[str, Any]) -> Manifest:
    return {k: copy.deepcopy(v) for k, v in runtime["spec"].items() if k not in RUNTIME_FIELDS}


def serving_pods(isvc: Mapping[str, Any], runtimes: Mapping[str, Manifest]) -> Iterator[Manifest]:
    """An InferenceService's components as Pods, each model in its runtime's container."""
    for part, component in isvc["spec"].items():
        if not isinstance(component, dict):
            continue
        spec = {k: copy.deepcopy(v) for k, v in component.items()
                if k not in KSERVE_COMPONENT_FIELDS}  # fmt: skip
        model = component.get("model")
        if model is not None:
            runtime = runtimes.get(str(model.get("runtime", "")))
            base = _runtime_pod_spec(runtime) if runtime is not None else {}
            containers = base.pop("containers", [])
            runtime_container: Manifest = next(
                (c for c in containers if c.get("name") == "kserve-container"), {}
            )
            own = {k: v for k, v in model.items() if k not in MODEL_FIELDS}
            served: Manifest = {**runtime_container, **own}
            for key, value in base.items():
                spec.setdefault(key, value)
            spec["containers"] = [served, *spec.get("containers", [])]
        yield _pod(isvc, part, spec, component.get("annotations") or {})


def expanded(objects: list[Manifest]) -> list[Manifest]:
    """``objects`` with each custom resource that makes pods replaced by those pods."""
    training = {_name(o): o for o in objects
                if o["kind"] in ("ClusterTrainingRuntime", "TrainingRuntime")}  # fmt: skip
    serving = {_name(o): o for o in objects
               if o["kind"] in ("ClusterServingRuntime", "ServingRuntime")}  # fmt: skip
    out: list[Manifest] = []
    for obj in objects:
        kind = obj["kind"]
        if kind in ("ClusterTrainingRuntime", "TrainingRuntime"):
            out += runtime_jobs(obj)
        elif kind == "TrainJob":
            out += trainjob_jobs(obj, training)
        elif kind == "SparkApplication":
            out += spark_pods(obj)
        elif kind == "InferenceService":
            out += serving_pods(obj, serving)
        else:
            out.append(obj)
    return out


def check_counts(report: Any, outcome: str = "failed") -> Counter[tuple[str, str]]:
    """(check id, check name) -> how many objects fail it, in one checkov JSON report (a
    report, or a list of them: one per framework); with ``outcome="skipped"``, how many
    objects document it as an exception (``checkov.io/skip<n>`` with the reason)."""
    counts: Counter[tuple[str, str]] = Counter()
    for part in report if isinstance(report, list) else [report]:
        for failed in part.get("results", {}).get(f"{outcome}_checks", []):
            counts[(str(failed["check_id"]), str(failed.get("check_name", "")))] += 1
    return counts


def print_counts(reports: dict[str, Counter[tuple[str, str]]]) -> None:
    """A table: each failed check, its count per stack and in all, most frequent first."""
    total: Counter[tuple[str, str]] = Counter()
    for counts in reports.values():
        total.update(counts)
    stacks = list(reports)
    print("\t".join(["check", *stacks, "all", "name"]))
    for check, count in sorted(total.items(), key=lambda item: (-item[1], item[0])):
        row = [check[0], *(str(reports[s][check]) for s in stacks), str(count), check[1]]
        print("\t".join(row))
    print("\t".join(["total", *(str(sum(reports[s].values())) for s in stacks),
                     str(sum(total.values())), ""]))  # fmt: skip


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SystemExit(f"plan_k8s_objects: cannot read {path}: {error}; {what}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "files", nargs="+", type=Path, help="build/plan/<stack>.json (--counts: checkov reports)"
    )
    parser.add_argument("--out", type=Path, help="folder of <stack>/objects.yaml")
    parser.add_argument(
        "--counts", action="store_true", help="print the failed checks of checkov's reports"
    )
    args = parser.parse_args(argv)
    if args.counts:
        read = {f.stem: _read_json(f, "run make checkov") for f in args.files}
        print_counts({stack: check_counts(report) for stack, report in read.items()})
        skipped = {stack: check_counts(report, "skipped") for stack, report in read.items()}
        if any(skipped.values()):
            print("\ndocumented exceptions (checkov.io/skip annotations, each with its reason):")
            print_counts(skipped)
        return 0
    if args.out is None:
        parser.error("--out is needed to write the objects")
    for plan_file in args.files:
        plan = _read_json(plan_file, "run make plan-all")
        objects = expanded(kubernetes_objects(plan))
        folder = args.out / plan_file.stem
        folder.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump_all(objects, sort_keys=False)
        (folder / "objects.yaml").write_text(text, encoding="utf-8")
        print(f"{plan_file.stem}: {len(objects)} objects")
    return 0


if __name__ == "__main__":
    sys.exit(main())
