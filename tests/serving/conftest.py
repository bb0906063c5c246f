"""Fixtures of the serving tests: one tiny export per session (trained by the training
environment, exported by the lifecycle environment), and the model server started as
`make serve` starts it.

No test module here imports KServe into the test process: KServe's gRPC messages and
tritonclient's register the same names (``inference.ServerLiveRequest``...) in
protobuf's default pool, so the two cannot be imported together. The server runs in
its own process; what a test needs of KServe it asks a subprocess.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.environments import tiny_export
from tests.workloads.helpers import free_port
from workloads.inference import drift

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def export_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tiny_export(tmp_path_factory.mktemp("serving"), steps=20)
    # The export stores the training data's statistics with the model version.
    assert (out / drift.REFERENCE_FILE).is_file()
    return out


def make_serve_command(model: Path, port: int, grpc_port: int) -> list[str]:
    """The command `make serve MODEL= PORT= GRPC_PORT=` runs (read with `make -n`, so a
    change to the Makefile's recipe changes what the tests start), with this test run's
    Python: the serving environment's."""
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "serve", f"MODEL={model}", f"PORT={port}",
         f"GRPC_PORT={grpc_port}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    lines = [line for line in dry.stdout.splitlines() if "-m workloads.serving" in line]
    assert len(lines) == 1, dry.stdout
    command = shlex.split(lines[0])
    assert command[0].endswith(".venv-serving/bin/python"), command
    return [sys.executable, *command[1:]]


@dataclass
class Server:
    """A running model server: its addresses and its combined output."""

    http: str
    grpc: str
    log: Path
    process: subprocess.Popen[bytes]

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


@pytest.fixture(scope="session")
def start_server(
    export_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(*extra: str, env: dict[str, str] | None = None) -> Server:
        port, grpc_port = free_port(), free_port()
        while grpc_port == port:
            grpc_port = free_port()
        command = make_serve_command(export_dir, port, grpc_port)
        log = tmp_path_factory.mktemp("server-log") / "server.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                ["timeout", "900", *command, *extra], cwd=ROOT, stdout=sink,
                stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        server = Server(f"127.0.0.1:{port}", f"127.0.0.1:{grpc_port}", log, process)
        started.append(server)
        deadline = time.monotonic() + 300
        while not _ready(f"http://{server.http}/v2/health/ready"):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the model server did not start: {server.output()[-3000:]}")
            time.sleep(0.5)
        return server

    yield start
    for server in started:
        server.process.terminate()
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.process.kill()


def run_kserve_snippet(code: str, args: Sequence[str] = ()) -> str:
    """Run ``code`` in a fresh serving-environment Python (KServe may be imported
    there); its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout
