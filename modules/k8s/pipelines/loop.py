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

Everything stays in the cluster and is TLS: Alertmanager to the trigger (HTTPS, TLS 1.3,
the trigger's certificate from the cluster CA, `trigger_certificate`), the trigger and
the Job to KFP's API server; every client verifies with the cluster CA, the namespace's
bundle of `modules.k8s.pki.spec.ca_bundle`. NetworkPolicies admit only those paths.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from modules.k8s import security
from modules.k8s.common import Manifest, metadata
from modules.k8s.monitoring.spec import ALERT_ROUTING_LABEL, ALERT_ROUTING_VALUE
from modules.k8s.names import MONITORING_NAMESPACE
from modules.k8s.pipelines.spec import (
    NAMESPACE,
    PUBLISHER_ACCOUNT,
    TRIGGER_ACCOUNT,
    PipelinesPlacement,
    PipelinesSpec,
    labels,
)
from modules.k8s.pki.spec import (
    CA_BUNDLE_SECRET,
    CA_KEY,
    ca_volume,
    service_dns_names,
    serving_certificate,
)

#: KFP's API server (single-user mode: no token; only this namespace's pods reach it),
#: over TLS (`manifests.tls_objects`: its certificate holds this name).
API_SERVER_URL = f"https://ml-pipeline.{NAMESPACE}.svc.cluster.local:8888"
#: Where the publisher and the trigger find the cluster CA they verify it with.
CA_MOUNT = "/etc/gpuplatform-ca"
CA_FILE = f"{CA_MOUNT}/{CA_KEY}"
#: The serving layer's input drift alert (`modules.k8s.serving.observability`).
DRIFT_ALERT = "ModelInputDrift"
PIPELINE_CONFIGMAP = "data-to-model-pipeline"
#: The experiments runs are filed under, and the recurring run's name.
SCHEDULE_EXPERIMENT = "data-to-model"
DRIFT_EXPERIMENT = "data-to-model-drift"
RECURRING_RUN = "data-to-model-schedule"
TRIGGER = "retrain-trigger"
TRIGGER_PORT = 8080
TRIGGER_PATH = "/alerts"
#: The trigger's serving certificate (`trigger_certificate`) and where the trigger
#: reads it (its Secret's ``tls.crt`` and ``tls.key`` only).
TRIGGER_TLS_SECRET = f"{TRIGGER}-tls"
TRIGGER_TLS_MOUNT = f"/etc/{TRIGGER}/tls"
#: Where Alertmanager posts: the Service's first name, which the certificate holds.
TRIGGER_URL = f"https://{TRIGGER}.{NAMESPACE}.svc.cluster.local:{TRIGGER_PORT}{TRIGGER_PATH}"
ALERTMANAGER_CONFIG = "retrain-on-drift"
#: Where the pods mount the pipeline ConfigMap.
PIPELINE_MOUNT = "/etc/pipeline"
#: A ConfigMap holds at most 1 MiB; the IR and its parameters must fit.
CONFIGMAP_LIMIT_BYTES = 1024 * 1024
RUN_AS = 1000
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


def _service_account(name: str) -> Manifest:
    # Neither calls the Kubernetes API; neither has a cloud identity.
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(name, NAMESPACE, labels=labels(name)),
        "automountServiceAccountToken": False,
    }


def _container_security() -> Manifest:
    """The restricted profile for the publisher and trigger containers."""
    return security.restricted_container(RUN_AS)


def _pod_security() -> Manifest:
    return security.restricted_pod(RUN_AS, fs_group=False)


def _volumes() -> list[Manifest]:
    return [
        {"name": "pipeline", "configMap": {"name": PIPELINE_CONFIGMAP}},
        # The KFP SDK keeps a context file under $HOME; the root is read-only.
        {"name": "home", "emptyDir": {"sizeLimit": "16Mi"}},
        ca_volume("cluster-ca"),
    ]


def _mounts() -> list[Manifest]:
    return [
        {"name": "pipeline", "mountPath": PIPELINE_MOUNT, "readOnly": True},
        {"name": "home", "mountPath": "/tmp"},
        {"name": "cluster-ca", "mountPath": CA_MOUNT, "readOnly": True},
    ]


def _resources(cpu: str, memory: str) -> Manifest:
    return {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": cpu, "memory": memory},
    }


def publish_job(spec: PipelinesSpec, placement: PipelinesPlacement, ir: PipelineIR) -> Manifest:
    """The Job that uploads the pipeline's version and sets its recurring run (named by
    the version, so a changed pipeline is a new Job; the publisher is idempotent)."""
    args = [
        "-m",
        "workloads.pipelines.publish",
        "--host",
        API_SERVER_URL,
        "--ca-cert",
        CA_FILE,
        "--package",
        f"{PIPELINE_MOUNT}/pipeline.yaml",
        "--parameters",
        f"{PIPELINE_MOUNT}/parameters.json",
        "--pipeline",
        ir.name,
        "--version",
        ir.version,
        "--experiment",
        SCHEDULE_EXPERIMENT,
        "--recurring-run",
        RECURRING_RUN,
        "--schedule",
        spec.schedule,
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(f"publish-{ir.version}", NAMESPACE, labels=labels("publisher")),
        "spec": {
            # The API server may still be starting on a first install.
            "backoffLimit": 10,
            "ttlSecondsAfterFinished": 7 * 86400,
            "template": {
                "metadata": {"labels": labels("publisher")},
                "spec": {
                    "serviceAccountName": PUBLISHER_ACCOUNT,
                    "automountServiceAccountToken": False,
                    "restartPolicy": "OnFailure",
                    "securityContext": _pod_security(),
                    "nodeSelector": dict(placement.node_selector),
                    "containers": [
                        {
                            "name": "publish",
                            "image": placement.pipelines_image(spec.image_tag),
                            "command": ["python"],
                            "args": args,
                            "env": [{"name": "HOME", "value": "/tmp"}],
                            "volumeMounts": _mounts(),
                            "resources": _resources("500m", "256Mi"),
                            "securityContext": _container_security(),
                        }
                    ],
                    "volumes": _volumes(),
                },
            },
        },
    }


def trigger_certificate() -> Manifest:
    """The trigger's serving certificate, from the cluster CA, for the names of its
    Service (`TRIGGER_URL` uses the first). cert-manager renews it into the same Secret;
    the trigger serves the renewed files without a restart."""
    return serving_certificate(TRIGGER_TLS_SECRET, NAMESPACE, service_dns_names(TRIGGER, NAMESPACE))


def trigger_objects(
    spec: PipelinesSpec, placement: PipelinesPlacement, ir: PipelineIR
) -> list[Manifest]:
    """The retrain trigger: its ServiceAccount, certificate, Deployment, Service and
    fence (only Alertmanager's pods may call it; it calls only KFP's API server)."""
    selector = {"app.kubernetes.io/name": TRIGGER}
    pod_labels = {**labels(TRIGGER), **selector}
    args = [
        "-m",
        "workloads.pipelines.trigger",
        "--host",
        API_SERVER_URL,
        "--ca-cert",
        CA_FILE,
        "--tls-cert",
        f"{TRIGGER_TLS_MOUNT}/tls.crt",
        "--tls-key",
        f"{TRIGGER_TLS_MOUNT}/tls.key",
        "--port",
        str(TRIGGER_PORT),
        "--path",
        TRIGGER_PATH,
        "--pipeline",
        ir.name,
        "--parameters",
        f"{PIPELINE_MOUNT}/parameters.json",
        "--experiment",
        DRIFT_EXPERIMENT,
        "--alert",
        DRIFT_ALERT,
        "--cooldown-hours",
        str(spec.retrain_cooldown_hours),
    ]
    # The trigger serves one connection at a time, and one notification may wait on
    # KFP's API for a while: an HTTP liveness probe would then time out and the kubelet
    # would restart the trigger in the middle of starting a run. Liveness is therefore a
    # TCP connect (the kernel's backlog accepts while the process is busy; a dead
    # process refuses). Readiness asks /healthz over TLS (the kubelet does not verify the
    # certificate; the TLS 1.3 handshake must succeed), with room for a slow answer: a
    # busy trigger leaves the Service's endpoints for a while and Alertmanager retries.
    liveness = {"tcpSocket": {"port": "https"}, "periodSeconds": 20, "failureThreshold": 3}
    readiness = {
        "httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(TRIGGER, NAMESPACE, labels=pod_labels),
        "spec": {
            # One replica: the cooldown is the trigger's own memory plus KFP's run list.
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "serviceAccountName": TRIGGER_ACCOUNT,
                    "automountServiceAccountToken": False,
                    # fsGroup: the key's files are root's, 0440, readable by the group.
                    "securityContext": security.restricted_pod(RUN_AS),
                    "nodeSelector": dict(placement.node_selector),
                    "containers": [
                        {
                            "name": "trigger",
                            "image": placement.pipelines_image(spec.image_tag),
                            "command": ["python"],
                            "args": args,
                            "env": [{"name": "HOME", "value": "/tmp"}],
                            "ports": [{"name": "https", "containerPort": TRIGGER_PORT}],
                            "readinessProbe": readiness,
                            "livenessProbe": liveness,
                            "volumeMounts": [
                                *_mounts(),
                                {"name": "tls", "mountPath": TRIGGER_TLS_MOUNT, "readOnly": True},
                            ],
                            "resources": _resources("500m", "256Mi"),
                            "securityContext": _container_security(),
                        }
                    ],
                    "volumes": [
                        *_volumes(),
                        {
                            # The served pair only (not the Secret's ca.crt). No subPath:
                            # the kubelet swaps the files in place on a renewal.
                            "name": "tls",
                            "secret": {
                                "secretName": TRIGGER_TLS_SECRET,
                                "items": [
                                    {"key": "tls.crt", "path": "tls.crt"},
                                    {"key": "tls.key", "path": "tls.key"},
                                ],
                                "defaultMode": 0o440,
                            },
                        },
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(TRIGGER, NAMESPACE, labels=pod_labels),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {
                    "name": "https",
                    "port": TRIGGER_PORT,
                    "targetPort": "https",
                    "appProtocol": "https",
                }
            ],
        },
    }
    fence = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata("allow-alertmanager-to-trigger", NAMESPACE),
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}
                            },
                            "podSelector": {
                                "matchLabels": {"app.kubernetes.io/name": "alertmanager"}
                            },
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": TRIGGER_PORT}],
                }
            ],
        },
    }
    return [_service_account(TRIGGER_ACCOUNT), trigger_certificate(), deployment, service, fence]


def publisher_account() -> Manifest:
    return _service_account(PUBLISHER_ACCOUNT)


def alertmanager_config(spec: PipelinesSpec) -> Manifest:
    """Routes the drift alert to the trigger (Prometheus Operator's AlertmanagerConfig,
    picked up through the platform's alert-routing label). Alerts of every model are
    grouped into one notification; Alertmanager repeats a still-firing group after the
    cooldown, and the trigger applies the cooldown itself too.

    Alertmanager posts over TLS 1.3 and verifies the trigger with the cluster CA:
    ``ca.crt`` of the namespace's bundle, a Secret in this AlertmanagerConfig's own
    namespace, as the operator requires (it copies it into Alertmanager's TLS assets).
    The name checked is the URL's host, which the trigger's certificate holds."""
    hours = spec.retrain_cooldown_hours
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": metadata(
            ALERTMANAGER_CONFIG,
            NAMESPACE,
            labels={ALERT_ROUTING_LABEL: ALERT_ROUTING_VALUE},
        ),
        "spec": {
            "route": {
                "receiver": TRIGGER,
                "matchers": [{"name": "alertname", "value": DRIFT_ALERT, "matchType": "="}],
                "groupBy": ["alertname"],
                "groupWait": "5m",
                "groupInterval": "1h",
                "repeatInterval": f"{hours}h",
            },
            "receivers": [
                {
                    "name": TRIGGER,
                    "webhookConfigs": [
                        {
                            "url": TRIGGER_URL,
                            "sendResolved": False,
                            "maxAlerts": 0,
                            "httpConfig": {
                                "tlsConfig": {
                                    "ca": {"secret": {"name": CA_BUNDLE_SECRET, "key": CA_KEY}},
                                    "minVersion": "TLS13",
                                }
                            },
                        }
                    ],
                }
            ],
        },
    }


def loop_objects(
    spec: PipelinesSpec, placement: PipelinesPlacement, ir: PipelineIR, parameters: dict[str, Any]
) -> list[Manifest]:
    """Everything of the loop, in the order it can be applied."""
    objects = [
        pipeline_configmap(ir, parameters),
        publisher_account(),
        publish_job(spec, placement, ir),
    ]
    if spec.retrain_on_drift:
        objects += [*trigger_objects(spec, placement, ir), alertmanager_config(spec)]
    return objects
