"""A cluster training job is tracked: its trainer gets the tracking server's URI, the
team's credentials (from the team's Secret, never inline) and the cluster CA; the
training image installs MLflow's client; the images and the pods agree on a non-root
UID of 10000 or more; a job without a cloud identity mounts no service-account token."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from modules.k8s.names import TRAINER_UID, TrackingAccess
from modules.k8s.serving.manifests import RUNTIME_UID
from tests.support.k8s_schema import schema_errors
from tests.workloads.test_deploy import CPU_POOL, make_spec
from workloads.deploy.manifests import TRACKING_CA_DIR, tracking_wiring, training_job_manifests
from workloads.training.config import preset
from workloads.training.tracking import resolve_tracking_uri

ROOT = Path(__file__).resolve().parents[2]
ACCESS = TrackingAccess(
    uri="https://mlflow.mlflow.svc.cluster.local",
    credentials_secret="mlflow-credentials",
    ca_secret="gpuplatform-ca",
)


def _pod(**changes: Any) -> dict[str, Any]:
    (job,) = [m for m in training_job_manifests(make_spec(**changes)) if m["kind"] == "Job"]
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def _trainer(pod: dict[str, Any]) -> dict[str, Any]:
    (trainer,) = [c for c in pod["containers"] if c["name"] == "trainer"]
    return trainer


def test_the_trainer_gets_the_uri_the_team_credentials_and_the_ca() -> None:
    pod = _pod(tracking=ACCESS)
    env = {e["name"]: e for e in _trainer(pod)["env"]}
    assert env["MLFLOW_TRACKING_URI"]["value"] == ACCESS.uri
    for key in ("username", "password"):
        ref = env[f"MLFLOW_TRACKING_{key.upper()}"]
        assert "value" not in ref  # never in the manifest
        assert ref["valueFrom"]["secretKeyRef"] == {"name": "mlflow-credentials", "key": key}
    ca_path = env["MLFLOW_TRACKING_SERVER_CERT_PATH"]["value"]
    mounts = {m["mountPath"]: m for m in _trainer(pod)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = mounts[TRACKING_CA_DIR]
    assert mount["readOnly"] is True
    secret = volumes[mount["name"]]["secret"]
    assert secret["secretName"] == "gpuplatform-ca"
    assert f"{TRACKING_CA_DIR}/{secret['items'][0]['path']}" == ca_path
    assert secret["items"][0]["key"] == "ca.crt"
    assert schema_errors(training_job_manifests(make_spec(tracking=ACCESS)), "1.33") == []


def test_the_trainer_reads_the_uri_the_job_sets() -> None:
    """The trainer's client takes MLFLOW_TRACKING_URI when its config names none."""
    env = {e["name"]: e.get("value") for e in tracking_wiring(ACCESS)[0]}
    import os  # noqa: PLC0415 - only this test touches the environment

    saved = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = str(env["MLFLOW_TRACKING_URI"])
    try:
        assert resolve_tracking_uri(preset("tiny")) == ACCESS.uri
    finally:
        if saved is None:
            del os.environ["MLFLOW_TRACKING_URI"]
        else:
            os.environ["MLFLOW_TRACKING_URI"] = saved


def test_without_a_tracking_server_the_job_has_no_tracking_settings() -> None:
    assert tracking_wiring(None) == ([], [], [])
    names = {e["name"] for e in _trainer(_pod())["env"]}
    assert not {n for n in names if n.startswith("MLFLOW_")}
    # A fabric check is not a training run: nothing to track.
    check = _pod(tracking=ACCESS, workload="fabric-check", checkpoint_claim=None, min_busbw_gbps=1)
    assert not [e for e in _trainer(check)["env"] if e["name"].startswith("MLFLOW_")]


def test_no_token_is_mounted_without_a_cloud_identity() -> None:
    assert _pod()["automountServiceAccountToken"] is True  # EKS Pod Identity uses it
    assert _pod(cloud_identity=False)["automountServiceAccountToken"] is False
    cpu = _pod(pool=CPU_POOL, nodes=1, cpu_training=True, cloud_identity=False)
    assert cpu["automountServiceAccountToken"] is False


def _user(dockerfile: str) -> tuple[int, int]:
    text = (ROOT / dockerfile).read_text()
    match = re.search(r"^USER (\d+):(\d+)$", text, re.MULTILINE)
    assert match, dockerfile
    uid, gid = int(match.group(1)), int(match.group(2))
    assert f"--uid {uid} --gid {gid}" in text, "the USER is the user the image creates"
    return uid, gid


def test_images_and_pods_run_as_the_same_high_uid() -> None:
    """checkov CKV_K8S_40: a container user of 10000 or more is no user of the node."""
    assert _user("workloads/Dockerfile") == (TRAINER_UID, TRAINER_UID)
    assert _user("workloads/serving/Dockerfile") == (RUNTIME_UID, RUNTIME_UID)
    assert TRAINER_UID >= 10000 and RUNTIME_UID >= 10000
    for container in _pod()["containers"] + _pod()["initContainers"]:
        assert container["securityContext"]["runAsUser"] == TRAINER_UID


def test_the_training_image_installs_the_tracking_client() -> None:
    """MLflow's client in the trainer's environment: installed by the Dockerfile, or
    from the training lock it installs (after the environment split)."""
    text = (ROOT / "workloads" / "Dockerfile").read_text()
    direct = re.search(r"pip install[^\n]*(\n\s+[^\n]*)*\"mlflow-skinny[><=~!]", text)
    locked = re.search(r"COPY (locks/\S+)", text)
    lock_pins = locked and "mlflow-skinny==" in (ROOT / locked.group(1)).read_text()
    assert direct or lock_pins, "the training image installs no MLflow client"
