"""The teams' MLflow users against a real MLflow server with the basic-auth app, over
TLS from a CA as the cluster's: the sync script (the tracking server's sidecar) creates
each team's user and resets its password as the admin, and MLflow's own client,
configured the way a cluster job's trainer is (the job's environment), logs a run as
the team and is refused with a wrong password or an unknown CA."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

mlflow = pytest.importorskip("mlflow")
# The basic-auth app's CSRF check needs Flask-WTF (`mlflow[auth]`), as the tracking
# server's image has it; an environment without it cannot start the server.
pytest.importorskip("flask_wtf", reason="the basic-auth app needs mlflow[auth] (Flask-WTF)")
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

from modules.k8s.names import TrackingAccess  # noqa: E402
from modules.k8s.tracking.users import (  # noqa: E402
    PIPELINES_USERNAME,
    service_password,
    team_password,
    team_username,
    users_json,
)
from modules.k8s.trainer.tracking import (  # noqa: E402
    CREDENTIALS_FILE_KEY,
    mlflow_credentials_file,
    tracking_wiring,
)
from tests.workloads.helpers import free_port  # noqa: E402
from tests.workloads.mlflow_forks import Forks  # noqa: E402
from workloads.tracking import sync_users  # noqa: E402
from workloads.tracking.server import server_environment  # noqa: E402

ADMIN, ADMIN_PASSWORD = "admin", "an admin password for this test only"
#: How often the health check of the starting server is retried.
POLL_S = 0.2


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pki(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 (ECDSA P-256, as cert-manager's)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("test cluster CA"))
        .issuer_name(_name("test cluster CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``mlflow server --app-name basic-auth`` on 127.0.0.1 behind TLS (uvicorn's)."""
    root = tmp_path_factory.mktemp("mlflow")
    ca, cert, key = _pki(root)
    ini = root / "basic_auth.ini"
    ini.write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = sqlite:///{root / 'auth.db'}\n"
        f"admin_username = {ADMIN}\nadmin_password = {ADMIN_PASSWORD}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    port = free_port()
    command = [
        "timeout",
        "900",
        str(Path(sys.executable).with_name("mlflow")),
        "server",
        "--app-name=basic-auth",
        "--host=127.0.0.1",
        f"--port={port}",
        f"--backend-store-uri=sqlite:///{root / 'mlflow.db'}",
        f"--artifacts-destination={root / 'artifacts'}",
        "--workers=1",
        f"--uvicorn-opts=--ssl-keyfile={key} --ssl-certfile={cert}",
    ]
    # The chart sets a static key the same way (its flask-server-secret-key Secret).
    env = {
        **server_environment(os.environ),
        "MLFLOW_AUTH_CONFIG_PATH": str(ini),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "csrf key of this test server",
    }
    log = (root / "server.log").open("wb")
    # Its own process group: `mlflow server` runs uvicorn as a child, which SIGTERM to the
    # CLI left to shut down gracefully (the teardown waited out its 20 s every run).
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    uri = f"https://127.0.0.1:{port}"
    context = __import__("ssl").create_default_context(cafile=str(ca))
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2, context=context):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    output = (root / "server.log").read_text()[-3000:]
                    raise RuntimeError(f"mlflow server did not start: {output}") from None
                time.sleep(POLL_S)
        clean = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        forks = Forks(clean)
        try:
            homes = root / "homes"
            homes.mkdir()
            yield {"uri": uri, "ca": ca, "root": root, "forks": forks, "home_root": homes}
        finally:
            forks.close()
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # a test server: nothing to flush
        process.wait(timeout=20)
        log.close()


def _sync(
    server: dict[str, Any], passwords: dict[str, str], services: dict[str, str] | None = None
) -> int:
    users = server["root"] / "users.json"
    users.write_text(users_json(passwords, services))
    return sync_users.main(
        {
            "MLFLOW_TRACKING_URI": server["uri"],
            "MLFLOW_TRACKING_USERNAME": ADMIN,
            "MLFLOW_TRACKING_PASSWORD": ADMIN_PASSWORD,
            "MLFLOW_TRACKING_SERVER_CERT_PATH": str(server["ca"]),
            "USERS_FILE": str(users),
        },
        once=True,
    )


def _job_environment(server: dict[str, Any], team: str, password: str) -> dict[str, str]:
    """The environment a cluster job's trainer gets (`tracking_wiring`), the CA's path,
    and a HOME holding the team Secret's MLflow credentials file where the pod mounts it
    (`TRACKING_CREDENTIALS_DIR` under HOME=/tmp), written as the Secret holds it
    (`mlflow_credentials_file`): MLflow's client reads the login from that file."""
    access = TrackingAccess(server["uri"], "mlflow-credentials", "gpuplatform-ca")
    env_entries, _, mounts = tracking_wiring(access)
    env = {entry["name"]: entry["value"] for entry in env_entries}
    env["MLFLOW_TRACKING_SERVER_CERT_PATH"] = str(server["ca"])
    home = Path(tempfile.mkdtemp(prefix="home-", dir=server["home_root"]))
    (login_mount,) = [m for m in mounts if m["mountPath"].startswith("/tmp/")]
    folder = home / Path(login_mount["mountPath"]).relative_to("/tmp")
    folder.mkdir()
    (folder / CREDENTIALS_FILE_KEY).write_text(
        mlflow_credentials_file(team_username(team), password), encoding="utf-8"
    )
    env["HOME"] = str(home)
    return env


def _log_run(server: dict[str, Any], env: dict[str, str], experiment: str) -> str:
    """Log a run with MLflow's client in a fresh process, configured only by ``env``."""
    return _as(
        server,
        env,
        f"mlflow.set_experiment({experiment!r})\n"
        "with mlflow.start_run() as run:\n"
        "    mlflow.log_metric('loss', 1.5)\n"
        "print(run.info.run_id)\n",
    )


def _user(server: dict[str, Any], username: str) -> dict[str, Any]:
    from mlflow.server.auth.client import AuthServiceClient  # noqa: PLC0415

    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
    os.environ.update(
        {
            "MLFLOW_TRACKING_USERNAME": ADMIN,
            "MLFLOW_TRACKING_PASSWORD": ADMIN_PASSWORD,
            "MLFLOW_TRACKING_SERVER_CERT_PATH": str(server["ca"]),
        }
    )
    try:
        user = AuthServiceClient(server["uri"]).get_user(username)
        return {"username": user.username, "is_admin": user.is_admin}
    finally:
        os.environ.pop("MLFLOW_TRACKING_SERVER_CERT_PATH", None)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_sync_creates_each_team_user_and_the_job_logs_a_run_as_its_team(
    server: dict[str, Any],
) -> None:
    passwords = {t: team_password(ADMIN_PASSWORD, t) for t in ("nlp", "vision")}
    assert _sync(server, passwords) == 0
    for team in passwords:
        assert _user(server, team_username(team)) == {
            "username": team_username(team),
            "is_admin": False,
        }
    env = _job_environment(server, "nlp", passwords["nlp"])
    run_id = _log_run(server, env, "nlp-tracked-job")
    assert len(run_id) == 32
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        run = mlflow.MlflowClient(server["uri"]).get_run(run_id)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert run.info.user_id == team_username("nlp")
    assert run.data.metrics == {"loss": 1.5}


def test_a_wrong_password_or_an_unknown_ca_is_refused(server: dict[str, Any]) -> None:
    passwords = {"nlp": team_password(ADMIN_PASSWORD, "nlp")}
    assert _sync(server, passwords) == 0
    wrong = _job_environment(server, "nlp", "not-the-team-password")
    with pytest.raises(PermissionError, match=r"401|Unauthorized|credentials"):
        _log_run(server, wrong, "nlp-refused")
    unknown_ca = {**_job_environment(server, "nlp", passwords["nlp"])}
    unknown_ca.pop("MLFLOW_TRACKING_SERVER_CERT_PATH")  # system CAs do not know ours
    with pytest.raises(PermissionError, match=r"CERTIFICATE_VERIFY_FAILED|SSL"):
        _log_run(server, unknown_ca, "nlp-unverified")


def test_a_rotated_password_replaces_the_old_one(server: dict[str, Any]) -> None:
    old = team_password(ADMIN_PASSWORD, "speech")
    new = team_password("the rotated admin password", "speech")
    assert _sync(server, {"speech": old}) == 0
    assert _log_run(server, _job_environment(server, "speech", old), "speech-before")
    assert _sync(server, {"speech": new}) == 0  # the user exists: its password is reset
    with pytest.raises(PermissionError):
        _log_run(server, _job_environment(server, "speech", old), "speech-old-password")
    assert _log_run(server, _job_environment(server, "speech", new), "speech-after")


def test_the_script_reports_a_server_that_refuses_the_admin(server: dict[str, Any]) -> None:
    users = server["root"] / "refused.json"
    users.write_text(json.dumps({"team-x": "pw-pw-pw-pw"}))
    status = sync_users.main(
        {
            "MLFLOW_TRACKING_URI": server["uri"],
            "MLFLOW_TRACKING_USERNAME": ADMIN,
            "MLFLOW_TRACKING_PASSWORD": "wrong",
            "MLFLOW_TRACKING_SERVER_CERT_PATH": str(server["ca"]),
            "USERS_FILE": str(users),
        },
        once=True,
    )
    assert status == 1
    assert sync_users.main({"USERS_FILE": str(users)}, once=True) == 2


IR_FILE = Path(__file__).resolve().parents[2] / "workloads/pipelines/data_to_model.yaml"


def _pipeline_step_environment(server: dict[str, Any], step: str, password: str) -> dict[str, str]:
    """The environment the compiled pipeline gives a step's container on the cluster
    (its IR: the container's env and the kfp-kubernetes Secret references, resolved as
    the kubelet resolves them against ``kubeflow``'s ``mlflow-credentials``), with the
    server's URI as the ``tracking_uri`` input and the CA's local path for the
    mounted one."""
    import yaml  # noqa: PLC0415 - MLflow's own dependency

    spec, platform = list(yaml.safe_load_all(IR_FILE.read_text()))
    label = spec["components"][spec["root"]["dag"]["tasks"][step]["componentRef"]["name"]][
        "executorLabel"
    ]
    container = spec["deploymentSpec"]["executors"][label]["container"]
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    settings = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][label]
    secrets = {"mlflow-credentials": {"username": PIPELINES_USERNAME, "password": password}}
    for reference in settings["secretAsEnv"]:
        secret = secrets[reference["secretNameParameter"]["runtimeValue"]["constant"]]
        for entry in reference["keyToEnv"]:
            env[entry["envVar"]] = secret[entry["secretKey"]]
    (mount,) = settings["secretAsVolume"]
    assert env["MLFLOW_TRACKING_SERVER_CERT_PATH"].startswith(mount["mountPath"] + "/")
    env["MLFLOW_TRACKING_SERVER_CERT_PATH"] = str(server["ca"])
    env["MLFLOW_TRACKING_URI"] = server["uri"]
    return env


def _as(server: dict[str, Any], env: dict[str, str], code: str) -> str:
    """Run ``code`` with MLflow's client in a fresh process configured only by ``env``
    (a fork of the module's MLflow process: tests/workloads/mlflow_forks.py); its last
    line of output, or PermissionError with the server's answer."""
    forks: Forks = server["forks"]
    env = {**env, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    returncode, stdout, stderr = forks.run(env, "import os, mlflow\n" + code)
    if returncode < 0:  # killed (the time limit): not an answer of the server
        raise RuntimeError(f"the MLflow client did not finish (status {returncode}): {stderr}")
    if returncode != 0:
        raise PermissionError(stderr[-1500:])
    return stdout.strip().splitlines()[-1]


def test_the_pipelines_user_writes_its_own_and_only_reads_the_teams(
    server: dict[str, Any],
) -> None:
    """The compiled pipeline's steps, configured as the cluster configures them, log
    and register as ``pipelines`` under its own experiment; a team's experiment is
    readable to them (``READ``, the default permission) and not writable."""
    team = team_password(ADMIN_PASSWORD, "nlp")
    own = service_password(ADMIN_PASSWORD, PIPELINES_USERNAME)
    assert _sync(server, {"nlp": team}, {PIPELINES_USERNAME: own}) == 0
    assert _user(server, PIPELINES_USERNAME) == {"username": "pipelines", "is_admin": False}
    assert _log_run(server, _job_environment(server, "nlp", team), "nlp-owned")
    # The train step's environment: its runs go to the pipeline's own experiment.
    train = _pipeline_step_environment(server, "train", own)
    assert train["MLFLOW_EXPERIMENT_NAME"] == "data-to-model"
    run_id = _as(
        server,
        train,
        "mlflow.set_experiment(os.environ['MLFLOW_EXPERIMENT_NAME'])\n"
        "with mlflow.start_run() as run:\n"
        "    mlflow.log_metric('loss', 2.0)\n"
        "print(run.info.run_id, mlflow.get_run(run.info.run_id).info.user_id)\n",
    )
    assert run_id.split()[1] == PIPELINES_USERNAME
    # The register step's: a model it registers is its own (it creates it, it manages it).
    register = _pipeline_step_environment(server, "register", own)
    version = _as(
        server,
        register,
        "c = mlflow.MlflowClient()\n"
        "c.create_registered_model('pipelines-model')\n"
        f"v = c.create_model_version('pipelines-model', 'runs:/{run_id.split()[0]}/m', "
        f"run_id='{run_id.split()[0]}')\n"
        "print(v.version)\n",
    )
    assert version == "1"
    # The evaluate step's reads a team's experiment but cannot write to it.
    evaluate = _pipeline_step_environment(server, "evaluate", own)
    assert (
        _as(server, evaluate, "print(mlflow.get_experiment_by_name('nlp-owned').name)")
        == "nlp-owned"
    )
    with pytest.raises(PermissionError, match=r"PERMISSION_DENIED|403|Permission denied"):
        _as(
            server,
            evaluate,
            "mlflow.set_experiment('nlp-owned')\n"
            "with mlflow.start_run():\n"
            "    mlflow.log_metric('loss', 9.0)\n",
        )
    # Without the Secret's password the server refuses the step.
    with pytest.raises(PermissionError, match=r"401|Unauthorized|credentials"):
        _as(
            server,
            _pipeline_step_environment(server, "evaluate", "wrong"),
            "mlflow.search_experiments()",
        )
