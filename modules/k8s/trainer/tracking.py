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


def tracking_wiring(
    tracking: TrackingAccess | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The trainer's MLflow settings: environment entries, pod volumes and container
    mounts. The trainer (`workloads.training.tracking`) and MLflow's client read
    ``MLFLOW_TRACKING_URI``, ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` (from the team's
    Secret, never in the manifest) and ``MLFLOW_TRACKING_SERVER_CERT_PATH`` (the cluster
    CA, mounted read-only). The Secrets have the same names in every team namespace, so
    one cluster-wide runtime wires every team to its own user. Nothing where the cluster
    has no tracking server."""
    if tracking is None:
        return [], [], []
    credentials: list[dict[str, Any]] = [
        {
            "name": f"MLFLOW_TRACKING_{key.upper()}",
            "valueFrom": {"secretKeyRef": {"name": tracking.credentials_secret, "key": key}},
        }
        for key in ("username", "password")
    ]
    env: list[dict[str, Any]] = [
        {"name": "MLFLOW_TRACKING_URI", "value": tracking.uri},
        *credentials,
        {
            "name": "MLFLOW_TRACKING_SERVER_CERT_PATH",
            "value": f"{TRACKING_CA_DIR}/{tracking.ca_key}",
        },
    ]
    volume: dict[str, Any] = {
        "name": TRACKING_CA_VOLUME,
        "secret": {
            "secretName": tracking.ca_secret,
            "items": [{"key": tracking.ca_key, "path": tracking.ca_key}],
        },
    }
    mount: dict[str, Any] = {
        "name": TRACKING_CA_VOLUME,
        "mountPath": TRACKING_CA_DIR,
        "readOnly": True,
    }
    return env, [volume], [mount]
