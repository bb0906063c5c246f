"""The retrain trigger run for real (``python -m workloads.pipelines.trigger`` in a
subprocess, `tests.support.model_server`), in front of the stand-in KFP over TLS: it
listens in plain HTTP on the loopback only (on the cluster the platform's TLS proxy is in
front of it: tests/k8s/test_pipelines_tls.py checks what the proxy is given), an
Alertmanager notification starts a run, a stalled connection does not hold it, and a
busy port or an unreadable parameters file is exit 2 and one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import timedelta
from http.server import HTTPServer
from pathlib import Path

import pytest

from tests.pipelines.fake_kfp import fake_kfp
from tests.pipelines.test_loop_clients import PARAMETERS, notification, post, publish
from tests.support.certs import authority, server_secret
from tests.support.model_server import model_server
from workloads.pipelines import trigger as retrain
from workloads.pipelines.kfp_api import client

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

ROOT = Path(__file__).resolve().parents[2]
#: How long the trigger may take to start (the KFP SDK's import is slow).
START_S = 120.0


def argv(kfp_url: str, kfp_ca: Path, parameters: Path, port: int = 0) -> list[str]:
    return ["--host", kfp_url, "--ca-cert", str(kfp_ca), "--port", str(port),
            "--path", "/alerts", "--pipeline", "data-to-model", "--parameters", str(parameters),
            "--experiment", "data-to-model-drift", "--alert", "ModelInputDrift",
            "--cooldown-hours", "24"]  # fmt: skip


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore::FutureWarning"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def parameters(tmp_path: Path) -> Path:
    path = tmp_path / "parameters.json"
    path.write_text(json.dumps(PARAMETERS))
    return path


def healthy(base: str) -> bool:
    with urllib.request.urlopen(base + "/healthz", timeout=30) as answer:
        return bool(answer.status == 200 and json.loads(answer.read()) == {"ok": True})


def test_on_the_loopback_in_plain_http_a_notification_starts_a_run(
    parameters: Path, tmp_path: Path
) -> None:
    secret = server_secret(tmp_path / "kfp-api-tls", authority("kfp CA"), ["localhost"])
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "trigger.log"
    with fake_kfp(tls=secret) as (url, state):
        publish(url, ca=secret / "ca.crt")
        command = [sys.executable, "-m", "workloads.pipelines.trigger",
                   *argv(url, secret / "ca.crt", parameters, port)]  # fmt: skip
        with model_server(command, lambda: healthy(base), log, deadline_s=START_S):
            # The default address: only the pod's own TLS proxy reaches it.
            assert f"trigger: listening on {base}/alerts" in log.read_text()
            status, body = post(base, notification())
            assert status == 200, body
            assert body["started"] in state.runs and body["alerts"] == ["uae-gpt v3 token_js"]
            status, body = post(base, notification())
            assert status == 200 and "still" in body["skipped"]
            status, body = post(base, b"not json")
            assert status == 400
        assert state.refused == []


def test_the_module_exits_2_with_one_line_on_a_busy_port_or_unreadable_parameters(
    parameters: Path, tmp_path: Path
) -> None:
    ca = server_secret(tmp_path / "ca", authority(), ["localhost"]) / "ca.crt"
    missing = argv("https://localhost:9", ca, tmp_path / "none.json")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = argv("https://localhost:9", ca, parameters, port=busy.getsockname()[1])
        for case, expected in ((missing, "none.json"), (taken, "cannot listen on 127.0.0.1:")):
            done = subprocess.run(
                [sys.executable, "-m", "workloads.pipelines.trigger", *case],
                cwd=ROOT, env=_environment(), capture_output=True, text=True,
                timeout=START_S, check=False,
            )  # fmt: skip
            assert done.returncode == 2, done.stderr
            assert done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
            assert "Traceback" not in done.stderr


def test_a_stalled_connection_does_not_hold_the_trigger(monkeypatch: pytest.MonkeyPatch) -> None:
    """One request at a time: a caller that never sends its request is dropped after
    `CONNECTION_TIMEOUT_S`, and the next one is served."""
    monkeypatch.setattr(retrain, "CONNECTION_TIMEOUT_S", 1.0)
    app = retrain.Trigger(
        api=lambda: client("https://localhost:9"), host="https://localhost:9",
        pipeline="p", experiment="e", parameters={}, alerts=frozenset({"ModelInputDrift"}),
        cooldown=timedelta(hours=1),
    )  # fmt: skip
    server = HTTPServer(("127.0.0.1", 0), retrain.handler(app, "/alerts"))
    # shutdown() waits for serve_forever's next poll: 0.05 s, not the default 0.5 s per test
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30):
            time.sleep(0.2)  # accepted first; it sends nothing
            started = time.monotonic()
            assert healthy(f"http://127.0.0.1:{port}")
            assert time.monotonic() - started < 10
    finally:
        server.shutdown()
        server.server_close()
