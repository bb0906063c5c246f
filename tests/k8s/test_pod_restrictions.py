"""Every pod of the shipped plans runs as restricted as its image allows: the platform's
UIDs (10000 and above), a read-only root file system, and a Kubernetes API token only
where a process in the pod calls the API.

The pods are those the plans' objects make, as `tools.plan_k8s_objects` writes them out
for ``make checkov``: the built-in workloads, and the pods of the Trainer runtimes, the
TrainJobs, the SparkApplications and the InferenceServices. The shipped plans are the
session's shared ones (`tests.conftest.shipped_plan`), so this costs a walk over them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.k8s.security import SCANNER_EXCEPTION_PREFIX
from modules.k8s.security import scanner_exceptions as exceptions
from tests.conftest import shipped_plan
from tools.plan_k8s_objects import expanded, kubernetes_objects, main

SHIPPED_STACKS = ("uae-prod", "uae-dev", "smb-cpu", "onprem-ib")
#: The platform's UIDs start here (no image's system user, nor the 1000 many base
#: images give their first user).
LOWEST_UID = 10000
READ_ONLY_EXCEPTION = "policy-exception.gpuplatform.ae/k8s-read-only-root-filesystem"
RUN_AS_ROOT_EXCEPTION = "policy-exception.gpuplatform.ae/k8s-run-as-non-root"
MADE_FROM = "gpuplatform.ae/made-from"
#: Kubeflow Pipelines' controllers and servers that call the API (their patches say
#: what for), and the feature store's endpoint (kube-rbac-proxy's reviews).
API_CALLERS = {
    ("kubeflow", "ml-pipeline"),
    ("kubeflow", "ml-pipeline-persistenceagent"),
    ("kubeflow", "ml-pipeline-scheduledworkflow"),
    ("kubeflow", "ml-pipeline-ui"),
    ("kubeflow", "workflow-controller"),
    ("feast", "feast-endpoint"),
}
WORKLOAD_KINDS = ("Pod", "Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet")

Manifest = dict[str, Any]


@cache
def _objects(stack: str) -> tuple[Manifest, ...]:
    _, plan = shipped_plan(stack)
    return tuple(expanded(kubernetes_objects(plan)))


def _pod_spec(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if obj["kind"] == "Pod":
        return obj["spec"]  # type: ignore[no-any-return]
    if obj["kind"] in WORKLOAD_KINDS:
        return obj["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return None


def pods(stack: str) -> Iterator[tuple[Manifest, Mapping[str, Any]]]:
    """(object, its pod spec) for every pod the stack's plan makes."""
    for obj in _objects(stack):
        spec = _pod_spec(obj)
        if spec is not None:
            yield obj, spec


def _where(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return str(meta.get("namespace", "")), str(meta["name"])


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations: Mapping[str, Any] = obj["metadata"].get("annotations") or {}
    return annotations


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def mounts_token(stack: str, obj: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether the pod gets its ServiceAccount's API token: its own setting, else its
    ServiceAccount's (from the plan), else Kubernetes' default (it does)."""
    if "automountServiceAccountToken" in spec:
        return bool(spec["automountServiceAccountToken"])
    namespace, _ = _where(obj)
    account = spec.get("serviceAccountName", "default")
    for sa in _objects(stack):
        if sa["kind"] == "ServiceAccount" and _where(sa) == (namespace, account):
            return bool(sa.get("automountServiceAccountToken", True))
    return True


def calls_the_api(obj: Mapping[str, Any]) -> bool:
    """The pods that call the Kubernetes API: a Spark driver (it creates its executors),
    an InferenceService's pod (kube-rbac-proxy reviews each caller), the `API_CALLERS`."""
    made_from = str(_annotations(obj).get(MADE_FROM, ""))
    if made_from.startswith("SparkApplication/"):
        return str(obj["metadata"]["name"]).endswith("-driver")
    if made_from.startswith("InferenceService/"):
        return True
    return _where(obj) in API_CALLERS


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_only_pods_that_call_the_api_mount_a_token(stack: str) -> None:
    mounting = {_where(o) for o, spec in pods(stack) if mounts_token(stack, o, spec)}
    callers = {_where(o) for o, _ in pods(stack) if calls_the_api(o)}
    assert mounting == callers


def scanner_exceptions(obj: Mapping[str, Any]) -> dict[str, str]:
    """``{check id: reason}`` from the object's ``checkov.io/skip<n>`` annotations."""
    found = {}
    for key, value in _annotations(obj).items():
        if key.startswith(SCANNER_EXCEPTION_PREFIX):
            check, _, reason = str(value).partition("=")
            found[check] = reason
    return found


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_pod_with_a_token_says_why_and_no_other_does(stack: str) -> None:
    """checkov's token check (CKV_K8S_38) is documented exactly where a token is needed."""
    for obj, spec in pods(stack):
        documented = "CKV_K8S_38" in scanner_exceptions(obj)
        assert documented == mounts_token(stack, obj, spec), _where(obj)


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_scanner_exception_has_a_reason_checkov_reads(stack: str) -> None:
    for obj in _objects(stack):
        for check, reason in scanner_exceptions(obj).items():
            assert check.startswith("CKV_K8S_") and len(reason) > 30, (_where(obj), check)
            assert "=" not in reason, (_where(obj), check)  # checkov splits on it


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_long_running_container_is_probed(stack: str) -> None:
    """Each container of a Deployment, or of a serving pod, has a readiness and a liveness
    probe, unless its object documents why not (CKV_K8S_9, CKV_K8S_8)."""
    for obj, spec in pods(stack):
        made_from = str(_annotations(obj).get(MADE_FROM, ""))
        if obj["kind"] != "Deployment" and not made_from.startswith(
            ("InferenceService/", "SparkApplication/")
        ):
            continue
        exceptions = scanner_exceptions(obj)
        for container in spec.get("containers", []):
            where = (*_where(obj), container["name"])
            assert "readinessProbe" in container or "CKV_K8S_9" in exceptions, where
            assert "livenessProbe" in container or "CKV_K8S_8" in exceptions, where


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_container_runs_as_a_platform_uid(stack: str) -> None:
    """UID 10000 or above, non-root, container by container (its own setting, else the
    pod's); root only with the run-as-root exception and its reason."""
    for obj, spec in pods(stack):
        pod = spec.get("securityContext") or {}
        for container in _containers(spec):
            own = container.get("securityContext") or {}
            uid = own.get("runAsUser", pod.get("runAsUser"))
            where = (*_where(obj), container["name"])
            if RUN_AS_ROOT_EXCEPTION in _annotations(obj):
                assert uid == 0, where
                continue
            assert own.get("runAsNonRoot", pod.get("runAsNonRoot")) is True, where
            assert isinstance(uid, int) and uid >= LOWEST_UID, (where, uid)


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_root_file_system_is_read_only(stack: str) -> None:
    """Read-only root file systems, writable emptyDir volumes where the images write; a
    pod that cannot says why in its exception annotation."""
    for obj, spec in pods(stack):
        if READ_ONLY_EXCEPTION in _annotations(obj):
            assert str(_annotations(obj)[READ_ONLY_EXCEPTION]).strip(), _where(obj)
            continue
        for container in _containers(spec):
            own = container.get("securityContext") or {}
            assert own.get("readOnlyRootFilesystem") is True, (*_where(obj), container["name"])


# -- the tool behind `make checkov` -------------------------------------------------------


def test_the_tool_writes_each_plans_objects_and_counts_checkovs_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, plan = shipped_plan("uae-dev")
    (tmp_path / "uae-dev.json").write_text(json.dumps(plan), encoding="utf-8")
    assert main([str(tmp_path / "uae-dev.json"), "--out", str(tmp_path / "out")]) == 0
    written = list(yaml.safe_load_all((tmp_path / "out" / "uae-dev" / "objects.yaml").read_text()))
    assert written == [*_objects("uae-dev")]
    # A cluster-scoped runtime's Jobs stand in the TrainJobs' namespace, not default.
    made = [o for o in written if str(_annotations(o).get(MADE_FROM, "")).startswith("Cluster")]
    assert made and {o["metadata"]["namespace"] for o in made} == {"trainjob-namespace"}
    failed = [{"check_id": "CKV_K8S_38", "check_name": "tokens"}] * 2
    skipped = [{"check_id": "CKV_K8S_8", "check_name": "liveness"}]
    results = {"failed_checks": failed, "skipped_checks": skipped}
    report = [{"check_type": "kubernetes", "results": results}]
    (tmp_path / "uae-dev-report.json").write_text(json.dumps(report), encoding="utf-8")
    capsys.readouterr()
    assert main(["--counts", str(tmp_path / "uae-dev-report.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:3] == ["CKV_K8S_38\t2\t2\ttokens", "total\t2\t2\t"]
    assert lines[4].startswith("documented exceptions")
    assert lines[6:] == ["CKV_K8S_8\t1\t1\tliveness", "total\t1\t1\t"]


def test_an_exception_reason_checkov_would_misread_is_refused() -> None:
    assert exceptions({"CKV_K8S_9": "no Service", "CKV_K8S_8": "batch"}) == {
        "checkov.io/skip1": "CKV_K8S_8=batch",
        "checkov.io/skip2": "CKV_K8S_9=no Service",
    }
    for bad in ("a=b", " "):
        with pytest.raises(ValueError, match="CKV_K8S_8"):
            exceptions({"CKV_K8S_8": bad})


def test_the_tool_says_in_one_line_what_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "missing.json"), "--out", str(tmp_path)])
    message = str(exit_info.value.code)
    assert message.startswith("plan_k8s_objects: cannot read ") and "make plan-all" in message
    assert "\n" not in message
