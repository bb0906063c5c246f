"""``make track``: a local MLflow tracking server and model registry for a laptop.

It runs MLflow's own server (``mlflow server``) with the run and registry store in a
SQLite file and artifacts in a local directory, both under ``build/mlflow/``, bound
to 127.0.0.1 only. Then ``make train ARGS="--tracking-uri http://127.0.0.1:5000"``
records the run and ``make register RUN=<id>`` registers its model here.

Usage::

    python -m workloads.tracking.server [--port 5000] [--root build/mlflow]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

DEFAULT_PORT = 5000
DEFAULT_ROOT = Path("build/mlflow")
HOST = "127.0.0.1"  # never a public interface: the store holds every run's lineage
#: MLflow's server starts, beside its web server, a job runner with seven huey consumer
#: processes for MLflow's own background jobs (GenAI scorers, prompt optimisation, trace
#: roll-ups), each an interpreter importing MLflow and polling for work. The platform uses
#: none of them (tracking, artifacts and the model registry do not run jobs), so the local
#: server starts without them: two processes instead of nine.
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def server_command(root: Path, port: int, mlflow: str = "mlflow") -> list[str]:
    """The ``mlflow server`` command line for a store under ``root``."""
    root = root.resolve()
    return [
        mlflow,
        "server",
        "--backend-store-uri",
        f"sqlite:///{root / 'mlflow.db'}",
        # Artifacts are proxied by the server (mlflow-artifacts:/ URIs), so clients
        # need no access to the directory itself.
        "--serve-artifacts",
        "--artifacts-destination",
        str(root / "artifacts"),
        "--host",
        HOST,
        "--port",
        str(port),
        "--workers",
        "1",
    ]


def server_environment(base: Mapping[str, str]) -> dict[str, str]:
    """The environment ``mlflow server`` runs in: ``base`` (the caller's) with `SERVER_ENV`."""
    return {**base, **SERVER_ENV}


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((HOST, port)) == 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.tracking.server",
        description="Run a local MLflow tracking server (SQLite store, local artifacts).",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default 5000)")
    parser.add_argument(
        "--root", type=Path, default=DEFAULT_ROOT, help="store directory (default build/mlflow)"
    )
    args = parser.parse_args(argv)
    if not 1024 <= args.port <= 65535:
        print(f"track: --port must be in 1024-65535, got {args.port}", file=sys.stderr)
        return 2
    if port_in_use(args.port):
        print(
            f"track: port {args.port} on {HOST} is already in use (a tracking server already "
            "running?); stop it or choose another with `make track TRACK_PORT=5001`",
            file=sys.stderr,
        )
        return 2
    mlflow = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or shutil.which("mlflow")
    if mlflow is None:
        print("track: the mlflow server is not installed; run `make setup`", file=sys.stderr)
        return 2
    try:
        (args.root / "artifacts").mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"track: cannot create {args.root} ({err.strerror})", file=sys.stderr)
        return 2
    print(f"track: MLflow on http://{HOST}:{args.port} (store {args.root}); Ctrl-C stops it")
    print(f'track: make train ARGS="--tracking-uri http://{HOST}:{args.port}"', flush=True)
    command = server_command(args.root, args.port, mlflow)
    # The server replaces this process: Ctrl-C reaches it.
    os.execve(command[0], command, server_environment(os.environ))


if __name__ == "__main__":
    sys.exit(main())
