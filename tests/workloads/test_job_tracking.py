"""A cluster training job is tracked: its trainer gets the tracking server's URI, the
team's credentials (from the team's Secret, never inline) and the cluster CA, whether it
runs as a Kubeflow Trainer TrainJob (the platform's runtime carries the wiring, so every
TrainJob a team submits gets it) or as the platform's Indexed Job (fleet burst jobs, a
stack without the trainer); the training image installs MLflow's client; the images and
the pods agree on a non-root UID of 10000 or more; a pod without a cloud identity mounts
no service-account token."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from modules.k8s.features.spec import RUN_AS as FEATURES_UID
from modules.k8s.names import TRAINER_UID, TrackingAccess
from modules.k8s.serving.manifests import RUNTIME_UID
from modules.k8s.trainer.runtimes import RuntimeSite, cluster_training_runtime
from modules.k8s.trainer.spec import TrainerSpec
from modules.k8s.trainer.tracking import (
    TRACKING_CA_DIR,
    TRACKING_CREDENTIALS_DIR,
    tracking_wiring,
)
from modules.k8s.trainer.training_job.manifests import trainer_inputs, training_job_manifests
from tests.k8s.crd_checks import crd_errors
from tests.support.k8s_schema import schema_errors
from tests.workloads.test_deploy import CPU_POOL, EFA_POOL, IB_POOL, IMAGE, make_spec

ROOT = Path(__file__).resolve().parents[2]
ACCESS = TrackingAccess(
    uri="https://mlflow.mlflow.svc.cluster.local",
    credentials_secret="mlflow-credentials",
    ca_secret="gpuplatform-ca",
)
MLFLOW_ENV = {
    "MLFLOW_TRACKING_URI",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_SERVER_CERT_PATH",
}


def _pod(**changes: Any) -> dict[str, Any]:
    """The Indexed Job's pod (the launcher that keeps the platform's own Job)."""
    spec = make_spec(**{"launcher": "indexed-job", **changes})
    (job,) = [m for m in training_job_manifests(spec) if m["kind"] == "Job"]
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def _trainer(pod: dict[str, Any], name: str = "trainer") -> dict[str, Any]:
    (trainer,) = [c for c in pod["containers"] if c["name"] == name]
    return trainer


def _runtime(
    framework: str = "torch", site: RuntimeSite | None = None, pool: Any = EFA_POOL
) -> Any:
    inputs = trainer_inputs([pool], IMAGE)
    return cluster_training_runtime(
        framework,  # type: ignore[arg-type]
        pool,
        "research",
        inputs,
        TrainerSpec(),
        site=site,
    )


def _runtime_pods(runtime: dict[str, Any]) -> dict[str, dict[str, Any]]:
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return {j["name"]: j["template"]["spec"]["template"]["spec"] for j in jobs}


def _assert_wired(pod: dict[str, Any], container: dict[str, Any]) -> None:
    """The URI as given; the login as MLflow's credentials file from the team Secret,
    mounted read-only where MLflow's client looks (``$HOME/.mlflow``, HOME being /tmp),
    readable by the pod's group only, never an environment variable; the CA file mounted
    read-only from the CA Secret (the trainer's use of MLFLOW_TRACKING_URI is tested in
    the training environment, tests/workloads/test_tracking_client.py; the file with a
    real server in tests/workloads/test_tracking_users.py)."""
    env = {e["name"]: e for e in container["env"]}
    assert env["MLFLOW_TRACKING_URI"]["value"] == ACCESS.uri
    assert not {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"} & set(env)
    assert not [e for e in env.values() if "secretKeyRef" in e.get("valueFrom", {})]
    ca_path = env["MLFLOW_TRACKING_SERVER_CERT_PATH"]["value"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert env.get("HOME", {"value": "/tmp"})["value"] == "/tmp"  # the image's HOME else
    assert "/tmp" in mounts  # a writable emptyDir, the credentials' folder inside it
    login = mounts[f"{TRACKING_CREDENTIALS_DIR}"]
    assert TRACKING_CREDENTIALS_DIR == "/tmp/.mlflow" and login["readOnly"] is True
    login_secret = volumes[login["name"]]["secret"]
    assert login_secret["secretName"] == "mlflow-credentials"
    assert login_secret["items"] == [{"key": "credentials", "path": "credentials"}]
    assert login_secret["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == container["securityContext"]["runAsGroup"]
    mount = mounts[TRACKING_CA_DIR]
    assert mount["readOnly"] is True
    secret = volumes[mount["name"]]["secret"]
    assert secret["secretName"] == "gpuplatform-ca"
    assert f"{TRACKING_CA_DIR}/{secret['items'][0]['path']}" == ca_path
    assert secret["items"][0]["key"] == "ca.crt"


# -- the Indexed Job -------------------------------------------------------------------


def test_the_indexed_job_trainer_gets_the_uri_the_team_credentials_and_the_ca() -> None:
    pod = _pod(tracking=ACCESS)
    _assert_wired(pod, _trainer(pod))
    manifests = training_job_manifests(make_spec(launcher="indexed-job", tracking=ACCESS))
    assert schema_errors(manifests, "1.33") == []


def test_without_a_tracking_server_the_job_has_no_tracking_settings() -> None:
    assert tracking_wiring(None) == ([], [], [])
    names = {e["name"] for e in _trainer(_pod())["env"]}
    assert not {n for n in names if n.startswith("MLFLOW_")}
    # A fabric check is not a training run: nothing to track.
    check = _pod(tracking=ACCESS, workload="fabric-check", checkpoint_claim=None, min_busbw_gbps=1)
    assert not [e for e in _trainer(check)["env"] if e["name"].startswith("MLFLOW_")]


def test_no_api_token_is_mounted() -> None:
    """Nothing in a training pod calls the Kubernetes API; EKS Pod Identity projects its
    own token (modules.k8s.rbac)."""
    assert _pod()["automountServiceAccountToken"] is False
    cpu = _pod(pool=CPU_POOL, nodes=1, cpu_training=True)
    assert cpu["automountServiceAccountToken"] is False


# -- the TrainJob: the runtime carries the wiring ---------------------------------------


@pytest.mark.parametrize("framework", ["torch", "deepspeed"])
def test_the_runtime_wires_every_trainjob_to_its_teams_mlflow_user(framework: str) -> None:
    runtime = _runtime(framework, RuntimeSite(tracking=ACCESS))
    (pod,) = _runtime_pods(runtime).values()
    _assert_wired(pod, _trainer(pod, "node"))
    assert crd_errors([runtime]) == []
    # The TrainJob adds nothing of it: the credentials are the runtime's references,
    # resolved in the TrainJob's namespace (each team's own Secret).
    job = training_job_manifests(make_spec(framework=framework, tracking=ACCESS))[0]
    assert "MLFLOW" not in str(job) and "mlflow-credentials" not in str(job)


def test_the_preflight_and_the_mpi_runtime_get_no_credentials() -> None:
    """Only the trainer logs runs: the preflight init container, and the MPI runtime's
    Horovod example (which logs nothing to MLflow), are given no credentials."""
    torch = _runtime("torch", RuntimeSite(tracking=ACCESS))
    (pod,) = _runtime_pods(torch).values()
    for init in pod["initContainers"]:
        assert not {e["name"] for e in init.get("env", [])} & MLFLOW_ENV
        assert not _mounts_login(init)
    mpi = _runtime("mpi", RuntimeSite(tracking=ACCESS))
    for pod in _runtime_pods(mpi).values():
        assert "tracking-credentials" not in {v["name"] for v in pod["volumes"]}
        for container in pod["containers"]:
            assert not {e["name"] for e in container.get("env", [])} & MLFLOW_ENV
            assert not _mounts_login(container)
    assert crd_errors([mpi]) == []


def _mounts_login(container: dict[str, Any]) -> bool:
    mounts = container.get("volumeMounts", [])
    return any(m["mountPath"] == TRACKING_CREDENTIALS_DIR for m in mounts)


def test_without_a_tracking_server_the_runtime_has_no_tracking_settings() -> None:
    for site in (None, RuntimeSite()):
        (pod,) = _runtime_pods(_runtime("torch", site)).values()
        names = {e["name"] for e in _trainer(pod, "node")["env"]}
        assert not names & MLFLOW_ENV
        assert not {"tracking-ca", "tracking-credentials"} & {v["name"] for v in pod["volumes"]}


@pytest.mark.parametrize("framework", ["torch", "deepspeed", "mpi"])
def test_runtimes_mount_no_api_token(framework: str) -> None:
    for site in (None, RuntimeSite(tracking=ACCESS)):
        runtime = _runtime(framework, site, IB_POOL)
        for pod in _runtime_pods(runtime).values():
            assert pod["automountServiceAccountToken"] is False
        assert crd_errors([runtime]) == []


# -- images and users -----------------------------------------------------------------


def _user(dockerfile: str) -> tuple[int, int]:
    text = (ROOT / dockerfile).read_text()
    match = re.search(r"^USER (\d+):(\d+)$", text, re.MULTILINE)
    assert match, dockerfile
    uid, gid = int(match.group(1)), int(match.group(2))
    return uid, gid


def _creates(dockerfile: str, uid: int) -> bool:
    text = (ROOT / dockerfile).read_text()
    return f"--uid {uid} --gid {uid}" in text


def test_images_and_pods_run_as_the_same_high_uid() -> None:
    """checkov CKV_K8S_40: a container user of 10000 or more is no user of the node."""
    assert _user("workloads/Dockerfile") == (TRAINER_UID, TRAINER_UID)
    assert _creates("workloads/Dockerfile", TRAINER_UID)
    # The Horovod image is built on the training image and keeps its user.
    assert _user("workloads/horovod/Dockerfile") == (TRAINER_UID, TRAINER_UID)
    assert _user("workloads/serving/Dockerfile") == (RUNTIME_UID, RUNTIME_UID)
    assert _creates("workloads/serving/Dockerfile", RUNTIME_UID)
    assert _user("workloads/features/Dockerfile") == (FEATURES_UID, FEATURES_UID)
    assert _creates("workloads/features/Dockerfile", FEATURES_UID)
    assert min(TRAINER_UID, RUNTIME_UID, FEATURES_UID) >= 10000
    for container in _pod()["containers"] + _pod()["initContainers"]:
        assert container["securityContext"]["runAsUser"] == TRAINER_UID
    for framework in ("torch", "mpi"):
        for pod in _runtime_pods(_runtime(framework)).values():
            assert pod["securityContext"]["runAsUser"] == TRAINER_UID
            for container in pod["containers"] + pod.get("initContainers", []):
                assert container["securityContext"]["runAsUser"] == TRAINER_UID


def test_the_training_image_installs_the_tracking_client() -> None:
    """MLflow's client in the trainer's environment: installed by the Dockerfile, or
    from the training lock it installs (after the environment split)."""
    text = (ROOT / "workloads" / "Dockerfile").read_text()
    direct = re.search(r"pip install[^\n]*(\n\s+[^\n]*)*\"mlflow-skinny[><=~!]", text)
    locked = re.search(r"COPY (locks/\S+)", text)
    lock_pins = locked and "mlflow-skinny==" in (ROOT / locked.group(1)).read_text()
    assert direct or lock_pins, "the training image installs no MLflow client"
