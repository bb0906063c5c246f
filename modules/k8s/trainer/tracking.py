"""The trainer's MLflow wiring, shared by the platform's ClusterTrainingRuntimes and the
workloads' Indexed Job path (`modules.k8s.trainer.pods`).

Standard library only (no Pulumi), so that the environment that runs a real MLflow
server in the tests configures MLflow's client from exactly these entries.
"""

from __future__ import annotations

from typing import Any

from modules.k8s.names import TrackingAccess

#: Where the trainer finds the cluster CA it verifies the tracking server with.
TRACKING_CA_DIR = "/etc/gpuplatform/ca"
TRACKING_CA_VOLUME = "tracking-ca"
#: MLflow's client reads its login from ``~/.mlflow/credentials`` (its own INI file)
#: when the environment names none. The trainer's HOME is /tmp (the training image's
#: ``ENV HOME=/tmp``, workloads/Dockerfile, and the Indexed Job's env), a writable
#: emptyDir in every training pod; the team Secret's file is mounted read-only inside it.
TRACKING_CREDENTIALS_DIR = "/tmp/.mlflow"
TRACKING_CREDENTIALS_VOLUME = "tracking-credentials"
#: The key of the team Secret (``mlflow-credentials``) that holds that file.
CREDENTIALS_FILE_KEY = "credentials"
#: Owner and group may read; the kubelet gives the files the pod's fsGroup.
CREDENTIALS_FILE_MODE = 0o440


def mlflow_credentials_file(username: str, password: str) -> str:
    """``~/.mlflow/credentials`` for ``username``: MLflow reads it with configparser, so
    ``%`` is doubled (interpolation); a value configparser cannot keep as it is (a line
    break, or spaces at either end) is refused.

    Raises:
        ValueError: such a user name or password.
    """
    for what, value in (("user name", username), ("password", password)):
        if value != value.strip() or any(c in value for c in "\r\n") or not value:
            raise ValueError(
                f"the MLflow {what} of {username!r} cannot be written into MLflow's "
                "credentials file (empty, a line break, or spaces at either end)"
            )
    escaped = {k: v.replace("%", "%%") for k, v in (("u", username), ("p", password))}
    return (
        "[mlflow]\n"
        f"mlflow_tracking_username = {escaped['u']}\n"
        f"mlflow_tracking_password = {escaped['p']}\n"
    )


def tracking_wiring(
    tracking: TrackingAccess | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The trainer's MLflow settings: environment entries, pod volumes and container
    mounts. The trainer (`workloads.training.tracking`) and MLflow's client read
    ``MLFLOW_TRACKING_URI``, ``MLFLOW_TRACKING_SERVER_CERT_PATH`` (the cluster CA,
    mounted read-only) and the login from ``~/.mlflow/credentials``: the team Secret's
    `CREDENTIALS_FILE_KEY` mounted read-only at `TRACKING_CREDENTIALS_DIR`, a file rather
    than environment variables (which every child process inherits, and which the
    kubelet does not update when the Secret changes). The Secrets have the same names in
    every team namespace, so one cluster-wide runtime wires every team to its own user.
    Nothing where the cluster has no tracking server."""
    if tracking is None:
        return [], [], []
    env: list[dict[str, Any]] = [
        {"name": "MLFLOW_TRACKING_URI", "value": tracking.uri},
        {
            "name": "MLFLOW_TRACKING_SERVER_CERT_PATH",
            "value": f"{TRACKING_CA_DIR}/{tracking.ca_key}",
        },
    ]
    volumes: list[dict[str, Any]] = [
        {
            "name": TRACKING_CA_VOLUME,
            "secret": {
                "secretName": tracking.ca_secret,
                "items": [{"key": tracking.ca_key, "path": tracking.ca_key}],
            },
        },
        {
            "name": TRACKING_CREDENTIALS_VOLUME,
            "secret": {
                "secretName": tracking.credentials_secret,
                "items": [{"key": CREDENTIALS_FILE_KEY, "path": CREDENTIALS_FILE_KEY}],
                "defaultMode": CREDENTIALS_FILE_MODE,
            },
        },
    ]
    mounts: list[dict[str, Any]] = [
        {"name": TRACKING_CA_VOLUME, "mountPath": TRACKING_CA_DIR, "readOnly": True},
        {
            "name": TRACKING_CREDENTIALS_VOLUME,
            "mountPath": TRACKING_CREDENTIALS_DIR,
            "readOnly": True,
        },
    ]
    return env, volumes, mounts
