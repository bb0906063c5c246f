"""The loop from served model back to training: ``data-to-model`` uploaded to Kubeflow
Pipelines, run on a schedule, and run again when the served model's inputs drift.

* **The pipeline** is the KFP SDK's compiled IR YAML that ``workloads/pipelines``
  commits (`spec.PIPELINE_FILE`). The composition reads it at plan time
  (`read_pipeline`); its content goes into a ConfigMap, so the plan shows (and a
  change to it replaces) exactly what runs. Without the file the loop is left out.
* **Upload and schedule**: a Job (``python -m workloads.pipelines.publish``, the KFP SDK
  in the platform's ``pipelines`` image) uploads the IR as a version named by its
  digest and keeps one recurring run (KFP's RecurringRun, created through the API:
  KFP 2.17 has no CRD for it; its ``ScheduledWorkflow`` CRD holds the Argo workflow
  the API server compiles, not the IR) on the version with `PipelinesSpec.schedule`.
* **Drift**: the serving layer's ``ModelInputDrift`` alert (`DRIFT_ALERT`) is routed by
  an AlertmanagerConfig to an in-cluster webhook, the retrain trigger
  (``python -m workloads.pipelines.trigger``), which starts a run of the pipeline's
  latest version unless one is still running or one started within the cooldown.
  Written here because no maintained component turns an Alertmanager notification
  into a KFP run: Alertmanager posts its own JSON and KFP's API wants a run request,
  and Argo Events would add an event bus and a controller for one translation.

The objects are ``loop.yaml`` (with what each does and why), filled in here with what
differs per stack and per pipeline (`loop_objects`). Everything stays in the cluster and
is TLS: Alertmanager to the trigger through the platform's TLS sidecar, ghostunnel
(TLS 1.3, the certificate `trigger_certificate` from the cluster CA; the trigger keeps
no TLS of its own and listens on the pod's loopback), the trigger and the Job to KFP's
API server; every client verifies with the cluster CA, the namespace's bundle of
`modules.k8s.pki.spec.ca_bundle`. NetworkPolicies admit only those paths.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from modules.k8s.common import Manifest, metadata
from modules.k8s.pipelines.manifests import mirrors, objects_in, substituted
from modules.k8s.pipelines.spec import (
    NAMESPACE,
    PUBLISHER_ACCOUNT,
    TRIGGER_ACCOUNT,
    PipelinesPlacement,
    PipelinesSpec,
    labels,
)
from modules.k8s.pki.spec import CA_KEY, service_dns_names, serving_certificate

LOOP_FILE = Path(__file__).resolve().parent / "loop.yaml"
#: KFP's API server (single-user mode: no token; only this namespace's pods reach it),
#: over TLS (`manifests.tls_objects`: its certificate holds this name), and the cluster
#: CA the publisher and the trigger verify it with (as ``loop.yaml`` passes them).
API_SERVER_URL = f"https://ml-pipeline.{NAMESPACE}.svc.cluster.local:8888"
CA_MOUNT = "/etc/gpuplatform-ca"
CA_FILE = f"{CA_MOUNT}/{CA_KEY}"
#: The serving layer's input drift alert (`modules.k8s.serving.observability`).
DRIFT_ALERT = "ModelInputDrift"
PIPELINE_CONFIGMAP = "data-to-model-pipeline"
TRIGGER = "retrain-trigger"
#: The trigger's serving certificate (`trigger_certificate`), served by its TLS proxy.
TRIGGER_TLS_SECRET = f"{TRIGGER}-tls"
#: Where Alertmanager posts: the Service's first name, which the certificate holds.
TRIGGER_URL = f"https://{TRIGGER}.{NAMESPACE}.svc.cluster.local/alerts"
ALERTMANAGER_CONFIG = "retrain-on-drift"
#: A ConfigMap holds at most 1 MiB; the IR and its parameters must fit.
CONFIGMAP_LIMIT_BYTES = 1024 * 1024
#: KFP's parameter types (pipeline_spec.proto ParameterType) and how a stack-file
#: string becomes each.
PARAMETER_TYPES = ("STRING", "NUMBER_INTEGER", "NUMBER_DOUBLE", "BOOLEAN", "LIST", "STRUCT")


@dataclass(frozen=True)
class InputParameter:
    """One root input of the pipeline, as the IR declares it."""

    parameter_type: str
    has_default: bool
    optional: bool


@dataclass(frozen=True)
class PipelineIR:
    """A compiled pipeline (KFP IR YAML) as the composition read it: the pipeline spec,
    then optionally its platform settings (a second YAML document).

    Args:
        text: the file's content, unchanged (both documents).
        name: ``pipelineInfo.name``.
        parameters: the root's input parameters by name.
        digest: sha256 of the content (the uploaded version's name is its first 12).
    """

    text: str
    name: str
    parameters: dict[str, InputParameter]
    digest: str

    @property
    def version(self) -> str:
        return f"{self.name}-{self.digest[:12]}"


class PipelineFileError(ValueError):
    """The pipeline file is not a KFP IR this loop can run (a one-line message)."""


def parse_pipeline(text: str) -> PipelineIR:
    """The IR's name and root inputs; `PipelineFileError` when it is not a KFP pipeline."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise PipelineFileError(f"not YAML ({err.__class__.__name__})") from None
    spec = documents[0] if documents else None
    if not isinstance(spec, dict) or "pipelineInfo" not in spec or "root" not in spec:
        raise PipelineFileError("not a compiled KFP pipeline (no pipelineInfo and root)")
    # The KFP compiler writes platform settings (kfp-kubernetes: the tracked steps'
    # Secrets and pod labels) as a second document, ``platforms:``; KFP's API server
    # reads both. Anything else after the pipeline is not something KFP would run.
    for extra in documents[1:]:
        if not isinstance(extra, dict) or set(extra) != {"platforms"}:
            raise PipelineFileError(
                "a document after the pipeline that is not its platform settings (platforms:)"
            )
    name = spec["pipelineInfo"].get("name")
    if not isinstance(name, str) or not name:
        raise PipelineFileError("pipelineInfo.name is missing")
    declared = (spec["root"].get("inputDefinitions") or {}).get("parameters") or {}
    parameters = {}
    for key, value in declared.items():
        kind = value.get("parameterType")
        if kind not in PARAMETER_TYPES:
            raise PipelineFileError(f"root input {key}: unknown parameterType {kind!r}")
        parameters[key] = InputParameter(
            kind, "defaultValue" in value, bool(value.get("isOptional", False))
        )
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return PipelineIR(text=text, name=name, parameters=parameters, digest=digest)


def read_pipeline(path: Path) -> PipelineIR | None:
    """The pipeline at ``path``, or None where it does not exist (yet)."""
    if not path.is_file():
        return None
    return parse_pipeline(path.read_text(encoding="utf-8"))


def _convert(value: str, kind: str) -> Any:
    if kind == "STRING":
        return value
    if kind == "NUMBER_INTEGER":
        return int(value)
    if kind == "NUMBER_DOUBLE":
        return float(value)
    if kind == "BOOLEAN":
        if value.lower() not in ("true", "false"):
            raise ValueError(value)
        return value.lower() == "true"
    parsed = json.loads(value)
    if not isinstance(parsed, list if kind == "LIST" else dict):
        raise ValueError(value)
    return parsed


def run_parameters(
    ir: PipelineIR, given: dict[str, str]
) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """The run parameters, typed as the IR declares them, and the problems as
    (parameter, value, what is expected): unknown names, values of the wrong type,
    required inputs without a value."""
    values: dict[str, Any] = {}
    problems = []
    for name in sorted(given):
        declared = ir.parameters.get(name)
        if declared is None:
            allowed = ", ".join(sorted(ir.parameters)) or "(none)"
            problems.append((name, given[name], f"not an input of {ir.name}; inputs: {allowed}"))
            continue
        try:
            values[name] = _convert(given[name], declared.parameter_type)
        except ValueError:
            problems.append((name, given[name], f"{ir.name} declares it {declared.parameter_type}"))
    for name, declared in sorted(ir.parameters.items()):
        if name not in given and not (declared.has_default or declared.optional):
            problems.append(
                (name, "", f"{ir.name} requires it ({declared.parameter_type}, no default)")
            )
    return values, problems


def pipeline_configmap(ir: PipelineIR, parameters: dict[str, Any]) -> Manifest:
    """The compiled pipeline and its typed run parameters, for the Job and the trigger."""
    data = {
        "pipeline.yaml": ir.text,
        "parameters.json": json.dumps(parameters, sort_keys=True),
    }
    size = sum(len(v.encode("utf-8")) for v in data.values())
    if size > CONFIGMAP_LIMIT_BYTES:
        raise PipelineFileError(
            f"{size} bytes: more than a ConfigMap holds ({CONFIGMAP_LIMIT_BYTES})"
        )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            PIPELINE_CONFIGMAP,
            NAMESPACE,
            labels=labels("pipeline"),
            annotations={"gpuplatform.ae/pipeline-version": ir.version},
        ),
        "data": data,
    }


def _objects(
    spec: PipelinesSpec, placement: PipelinesPlacement, ir: PipelineIR, *names: str
) -> list[Manifest]:
    """The objects of ``loop.yaml`` with these names (in its order), filled in."""
    values = {
        **mirrors(placement),
        "${image}": placement.pipelines_image(spec.image_tag),
        "${node-selector}": dict(placement.node_selector),
        "${pipeline}": ir.name,
        "${version}": ir.version,
        "${schedule}": spec.schedule,
        "${cooldown-hours}": str(spec.retrain_cooldown_hours),
    }
    chosen = [o for o in objects_in(LOOP_FILE) if o["metadata"]["name"] in names]
    return [substituted(o, values) for o in chosen]


def publish_job(spec: PipelinesSpec, placement: PipelinesPlacement, ir: PipelineIR) -> Manifest:
    """The Job that uploads the pipeline's version and sets its recurring run
    (``publish-<version>``)."""
    (job,) = _objects(spec, placement, ir, "publish-${version}")
    return job


def trigger_certificate() -> Manifest:
    """The trigger's serving certificate, from the cluster CA, for the names of its
    Service (`TRIGGER_URL` uses the first). cert-manager renews it into the same Secret;
    the trigger's TLS proxy re-reads it."""
    return serving_certificate(TRIGGER_TLS_SECRET, NAMESPACE, service_dns_names(TRIGGER, NAMESPACE))


def trigger_objects(
    spec: PipelinesSpec, placement: PipelinesPlacement, ir: PipelineIR
) -> list[Manifest]:
    """The retrain trigger: its ServiceAccount, certificate, Deployment (the trigger and
    its TLS proxy), Service and fence (only Alertmanager's pods may call it)."""
    account, *served = _objects(
        spec, placement, ir, TRIGGER_ACCOUNT, TRIGGER, "allow-alertmanager-to-trigger"
    )
    return [account, trigger_certificate(), *served]


def alertmanager_config(spec: PipelinesSpec) -> Manifest:
    """Routes the drift alert to the trigger (``loop.yaml`` says how), repeated after the
    cooldown."""
    (config,) = [o for o in objects_in(LOOP_FILE) if o["metadata"]["name"] == ALERTMANAGER_CONFIG]
    return substituted(config, {"${cooldown-hours}": str(spec.retrain_cooldown_hours)})  # type: ignore[no-any-return]


def loop_objects(
    spec: PipelinesSpec, placement: PipelinesPlacement, ir: PipelineIR, parameters: dict[str, Any]
) -> list[Manifest]:
    """Everything of the loop, in the order it can be applied."""
    publisher = _objects(spec, placement, ir, PUBLISHER_ACCOUNT, "publish-${version}")
    objects = [pipeline_configmap(ir, parameters), *publisher]
    if spec.retrain_on_drift:
        objects += [*trigger_objects(spec, placement, ir), alertmanager_config(spec)]
    return objects
