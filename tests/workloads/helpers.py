"""Shared helpers of the workload tests: running training in-process and under torchrun."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).with_name("torchrun")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def torchrun_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO_ROOT),
            # See modules/k8s/trainer/training_job/manifests.py: restarts must not reuse
            # the old store.
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        }
    )
    return env


def torchrun_command(
    module: str, args: Sequence[str], nproc: int = 2, max_restarts: int = 0
) -> list[str]:
    return [
        str(TORCHRUN),
        "--standalone",
        f"--nproc_per_node={nproc}",
        f"--max_restarts={max_restarts}",
        "-m",
        module,
        *args,
    ]


def run_in_repo(command: Sequence[str], timeout_s: int = 180) -> subprocess.CompletedProcess[str]:
    """``command`` run from the repository root in the workers' environment
    (`torchrun_env`), its output captured."""
    return subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=torchrun_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def run_torchrun(
    module: str, args: Sequence[str], *, nproc: int = 2, max_restarts: int = 0, timeout_s: int = 180
) -> subprocess.CompletedProcess[str]:
    return run_in_repo(torchrun_command(module, args, nproc, max_restarts), timeout_s)


def tiny_args(data_dir: Path, log_jsonl: Path, *extra: str) -> list[str]:
    """The trainer's arguments every multi-process test starts from: the tiny preset on
    ``data_dir``, JSON-lines log at ``log_jsonl``, no metrics port; then ``extra``."""
    return [
        "--preset",
        "tiny",
        "--data-dir",
        str(data_dir),
        "--log-jsonl",
        str(log_jsonl),
        "--metrics-port",
        "0",
        *extra,
    ]


def read_log(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def losses_by_step(path: Path) -> dict[int, float]:
    """The last logged loss of every step (a resumed run logs re-run steps again)."""
    return {int(str(r["step"])): float(str(r["loss"])) for r in read_log(path)}


@contextmanager
def sigterm_restored() -> Iterator[None]:
    """In-process training installs SIGTERM and SIGINT handlers (and puts the previous
    ones back when it returns); put pytest's back after, whatever happens."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
