"""The retrain trigger serving HTTPS, run for real (``python -m
workloads.pipelines.trigger`` in a subprocess on 127.0.0.1) with a certificate from a
throwaway cluster CA (`tests.support.certs`), mounted the way the kubelet mounts a
Secret (`kubelet_secret`), in front of the stand-in KFP over TLS: Alertmanager's
notification over TLS 1.3 verified with the CA starts a run; TLS 1.2, plain HTTP and
clients that do not trust it are refused without stopping it; a renewed certificate is
served without a restart; bad certificates at start are exit 2 and one line."""

from __future__ import annotations

import itertools
import json
import os
import queue
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from tests.pipelines.fake_kfp import State, fake_kfp
from tests.pipelines.test_loop_clients import PARAMETERS, notification, post, publish
from tests.support.certs import Authority, authority, server_secret
from workloads.pipelines import trigger as retrain
from workloads.pipelines.kfp_api import client

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["localhost"]
#: How long the trigger may take to start (the KFP SDK's import is slow).
START_S = 120.0
_versions = itertools.count()


def kubelet_secret(mount: Path, ca: Authority, dns_names: Sequence[str] = NAMES) -> Path:
    """A new version of the certificate's Secret in ``mount``, written as the kubelet
    updates a Secret volume (its atomic writer): the files in a fresh ``..<version>``
    directory, then the ``..data`` link swapped to it in one rename; ``tls.crt``,
    ``tls.key`` and ``ca.crt`` are links through ``..data``."""
    mount.mkdir(parents=True, exist_ok=True)
    version = f"..{next(_versions)}_{time.monotonic_ns()}"
    server_secret(mount / version, ca, dns_names)
    swap = mount / "..data_tmp"
    swap.symlink_to(version)
    os.replace(swap, mount / "..data")
    for name in ("tls.crt", "tls.key", "ca.crt"):
        if not (mount / name).is_symlink():
            (mount / name).symlink_to(f"..data/{name}")
    return mount


@dataclass
class Running:
    """A trigger process: its base URL, the lines it printed, the process."""

    base: str
    port: int
    lines: queue.Queue[str]
    process: subprocess.Popen[str]

    def __post_init__(self) -> None:
        self.seen: list[str] = []

    def printed(self, wanted: str, count: int = 1, within_s: float = 10.0) -> list[str]:
        """The lines printed so far that contain ``wanted``, waiting (bounded) for at
        least ``count`` of them."""
        deadline = time.monotonic() + within_s
        while True:
            found = [line for line in self.seen if wanted in line]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            with suppress(queue.Empty):
                self.seen.append(self.lines.get(timeout=0.1))


def argv(kfp_url: str, kfp_ca: Path, parameters: Path, mount: Path, port: int = 0) -> list[str]:
    return ["--host", kfp_url, "--ca-cert", str(kfp_ca),
            "--tls-cert", str(mount / "tls.crt"), "--tls-key", str(mount / "tls.key"),
            "--bind", "127.0.0.1", "--port", str(port), "--path", "/alerts",
            "--pipeline", "data-to-model", "--parameters", str(parameters),
            "--experiment", "data-to-model-drift", "--alert", "ModelInputDrift",
            "--cooldown-hours", "24"]  # fmt: skip


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore::FutureWarning", "PYTHONUNBUFFERED": "1"}


@contextmanager
def trigger_process(arguments: list[str]) -> Iterator[Running]:
    """``python -m workloads.pipelines.trigger`` with ``arguments``, once it listens;
    stopped on exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", "workloads.pipelines.trigger", *arguments],
        cwd=ROOT,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"the trigger did not start within {START_S}s")
            prefix = "trigger: listening on https://127.0.0.1:"
            if line.startswith(prefix):
                port = int(line[len(prefix) :].split("/")[0])
                break
            assert process.poll() is None, line
        yield Running(f"https://localhost:{port}", port, lines, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def verifying(ca: Path) -> ssl.SSLContext:
    """A client as Alertmanager is configured: trusts only ``ca``, checks the name."""
    return ssl.create_default_context(cafile=str(ca))


def handshake(port: int, context: ssl.SSLContext) -> tuple[str | None, bytes | None]:
    """(TLS version, the served certificate, DER) of one handshake with the trigger."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return tls.version(), tls.getpeercert(binary_form=True)


def der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def healthy(base: str, context: ssl.SSLContext) -> bool:
    with urllib.request.urlopen(base + "/healthz", timeout=30, context=context) as answer:
        return bool(answer.status == 200 and json.loads(answer.read()) == {"ok": True})


@pytest.fixture
def kfp_tls(tmp_path: Path) -> Iterator[tuple[str, State, Path]]:
    """(URL, state, CA file) of the stand-in KFP over TLS, the pipeline published."""
    secret = server_secret(tmp_path / "kfp-api-tls", authority("kfp CA"), NAMES)
    with fake_kfp(tls=secret) as (url, state):
        publish(url, ca=secret / "ca.crt")
        yield url, state, secret / "ca.crt"
        assert state.refused == []


@pytest.fixture
def parameters(tmp_path: Path) -> Path:
    path = tmp_path / "parameters.json"
    path.write_text(json.dumps(PARAMETERS))
    return path


@pytest.fixture
def served(
    kfp_tls: tuple[str, State, Path], parameters: Path, tmp_path: Path
) -> Iterator[tuple[Running, State, Authority, Path]]:
    """(the running trigger, KFP's state, the cluster CA, the certificate's mount)."""
    url, state, kfp_ca = kfp_tls
    ca = authority()
    mount = kubelet_secret(tmp_path / "retrain-trigger-tls", ca)
    with trigger_process(argv(url, kfp_ca, parameters, mount)) as running:
        yield running, state, ca, mount


def test_an_alert_over_tls_13_verified_with_the_cluster_ca_starts_a_run(
    served: tuple[Running, State, Authority, Path],
) -> None:
    running, state, _, mount = served
    context = verifying(mount / "ca.crt")
    version, certificate = handshake(running.port, context)
    assert version == "TLSv1.3" and certificate == der(mount / "tls.crt")
    assert healthy(running.base, context)
    status, body = post(running.base, notification(), context=context)
    assert status == 200, body
    assert body["started"] in state.runs and body["alerts"] == ["uae-gpt v3 token_js"]
    status, body = post(running.base, notification(), context=context)
    assert status == 200 and "still" in body["skipped"]  # the existing behaviours hold
    status, body = post(running.base, b"not json", context=context)
    assert status == 400


def test_tls_12_plain_http_and_untrusting_clients_are_refused_and_it_keeps_serving(
    served: tuple[Running, State, Authority, Path],
) -> None:
    running, _, _, mount = served
    old = verifying(mount / "ca.crt")
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        handshake(running.port, old)
    with pytest.raises((OSError, urllib.error.URLError)):
        urllib.request.urlopen(f"http://127.0.0.1:{running.port}/healthz", timeout=30)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(running.port, verifying(server_secret(mount.parent / "x", authority(), NAMES)
                                          / "ca.crt"))  # fmt: skip
    with socket.create_connection(("127.0.0.1", running.port), timeout=30) as raw:
        raw.sendall(b"\x00" * 64)  # not TLS at all
        try:
            answer = raw.recv(1024)
        except ConnectionResetError:
            answer = b""
        assert b"HTTP" not in answer
    assert running.process.poll() is None
    assert healthy(running.base, verifying(mount / "ca.crt"))
    failures = running.printed("handshake_failed", count=4)
    assert len(failures) == 4 and all(json.loads(f)["client"] == "127.0.0.1" for f in failures)


def test_a_renewed_certificate_is_served_without_a_restart(
    served: tuple[Running, State, Authority, Path],
) -> None:
    running, _, ca, mount = served
    context = verifying(mount / "ca.crt")
    first = der(mount / "tls.crt")
    assert handshake(running.port, context)[1] == first
    kubelet_secret(mount, ca)  # cert-manager renews: a new key and certificate
    second = der(mount / "tls.crt")
    assert second != first
    assert handshake(running.port, context)[1] == second
    assert healthy(running.base, context)
    # A pair that does not load (here: a key of another certificate) keeps the one served.
    broken = mount / "..broken"
    server_secret(broken, ca, NAMES)
    (mount / "tls.key").unlink()
    (mount / "tls.key").symlink_to("..broken/tls.key")
    assert handshake(running.port, context)[1] == second
    assert running.printed("kept the previous one")
    kubelet_secret(mount, ca)
    (mount / "tls.key").unlink()
    (mount / "tls.key").symlink_to("..data/tls.key")
    third = der(mount / "tls.crt")
    assert handshake(running.port, context)[1] == third != second
    assert running.process.poll() is None


@pytest.mark.parametrize("problem", ["missing-cert", "missing-key", "not-pem", "foreign-key"])
def test_a_certificate_that_cannot_be_served_at_start_is_exit_2_and_one_line(
    problem: str, parameters: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = authority()
    mount = kubelet_secret(tmp_path / "tls", ca)
    other = server_secret(tmp_path / "other", ca, NAMES)
    cert, key = mount / "tls.crt", mount / "tls.key"
    if problem == "missing-cert":
        cert = tmp_path / "none.crt"
    elif problem == "missing-key":
        key = tmp_path / "none.key"
    elif problem == "not-pem":
        cert = tmp_path / "garbage.crt"
        cert.write_text("not a certificate\n")
    else:
        key = other / "tls.key"
    arguments = argv("https://localhost:9", mount / "ca.crt", parameters, mount)
    arguments[arguments.index("--tls-cert") + 1] = str(cert)
    arguments[arguments.index("--tls-key") + 1] = str(key)
    assert retrain.main(arguments) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("trigger: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert str(cert if problem != "missing-key" else key) in err


def test_the_module_exits_2_with_one_line_on_a_missing_key_and_a_busy_port(
    parameters: Path, tmp_path: Path
) -> None:
    mount = kubelet_secret(tmp_path / "tls", authority())
    arguments = argv("https://localhost:9", mount / "ca.crt", parameters, mount)
    missing = [*arguments]
    missing[missing.index("--tls-key") + 1] = str(tmp_path / "none.key")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = argv("https://localhost:9", mount / "ca.crt", parameters, mount,
                     port=busy.getsockname()[1])  # fmt: skip
        for case, expected in ((missing, "none.key"), (taken, "cannot listen on 127.0.0.1:")):
            done = subprocess.run(
                [sys.executable, "-m", "workloads.pipelines.trigger", *case],
                cwd=ROOT, env=_environment(), capture_output=True, text=True,
                timeout=START_S, check=False,
            )  # fmt: skip
            assert done.returncode == 2, done.stderr
            assert done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr


def test_a_stalled_connection_does_not_hold_the_trigger(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One request at a time: a caller that never finishes its handshake is dropped
    after `CONNECTION_TIMEOUT_S`, and the next one is served."""
    monkeypatch.setattr(retrain, "CONNECTION_TIMEOUT_S", 1.0)
    mount = kubelet_secret(tmp_path / "tls", authority())
    app = retrain.Trigger(
        api=lambda: client("https://localhost:9"), host="https://localhost:9",
        pipeline="p", experiment="e", parameters={}, alerts=frozenset({"ModelInputDrift"}),
        cooldown=timedelta(hours=1),
    )  # fmt: skip
    server = retrain.TLSServer(
        ("127.0.0.1", 0),
        retrain.handler(app, "/alerts"),
        retrain.ServingCertificate(mount / "tls.crt", mount / "tls.key"),
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30):
            time.sleep(0.2)  # accepted first; it sends nothing
            started = time.monotonic()
            assert healthy(f"https://localhost:{port}", verifying(mount / "ca.crt"))
            assert time.monotonic() - started < 10
    finally:
        server.shutdown()
        server.server_close()
