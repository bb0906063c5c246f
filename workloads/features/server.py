"""The example's model server as a subprocess, for `run` and `bench`; the one error type
its commands raise for the user (a one-line message, exit 2)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The server binds to loopback only.
HOST = "127.0.0.1"


class UsageError(RuntimeError):
    """A problem the user can fix; the message says how."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def check_port(port: int, host: str = HOST, *, free_one: bool = False) -> None:
    """`UsageError` unless a server can listen on ``host:port`` now (``port`` 0 means a
    free one where ``free_one``). Checked before any work, so that a taken port is one
    message at once, not after training; the bind test allows what the server's own
    socket allows (``SO_REUSEADDR``: a port with connections in TIME_WAIT is usable)."""
    if port == 0 and free_one:
        return
    low = 0 if free_one else 1
    if not low <= port < 65536:
        raise UsageError(
            f"--port must be in 1-65535{' (0: a free one)' if free_one else ''}, got {port}"
        )
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            raise UsageError(
                f"cannot listen on {host}:{port} ({err.strerror}); free the port or choose "
                "another (--port, make's PORT=)"
            ) from err


def http_json(url: str, body: dict[str, Any] | None = None, timeout: float = 30) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        headers={"content-type": "application/json"},
        method="POST" if data else "GET",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


@contextlib.contextmanager
def running_server(
    model_dir: Path, feature_repo: Path, port: int, name: str, log_path: Path
) -> Iterator[str]:
    """A ``serve`` subprocess on ``HOST:port``; stopped (SIGTERM, then SIGKILL) on exit."""
    command = [
        sys.executable, "-m", "workloads.features", "serve",
        "--model-dir", str(model_dir), "--feature-repo", str(feature_repo),
        "--model-name", name, "--port", str(port),
    ]  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    with log_path.open("wb") as sink:
        process = subprocess.Popen(command, cwd=root, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(OSError, ValueError):
                if http_json(f"{url}/v2/models/{name}/ready", timeout=5).get("ready"):
                    break
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-1500:]
                raise UsageError(f"the model server exited with {process.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                raise UsageError(f"the model server was not ready within 180 s (log: {log_path})")
            time.sleep(0.5)
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
