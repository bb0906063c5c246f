"""Helpers of the model-lifecycle tests: a trained tiny checkpoint, PyTorch greedy
decoding as the reference, and a local MLflow server that stops by itself."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from tests.workloads.helpers import free_port, sigterm_restored
from workloads.tracking.server import server_command
from workloads.training import train
from workloads.training.config import TrainConfig, override, preset
from workloads.training.distributed import Topology
from workloads.training.model import GPT


def tiny_config(tmp: Path, **values: str) -> TrainConfig:
    base = {
        "data_dir": str(tmp / "data"),
        "metrics_port": "0",
        "ckpt_dir": str(tmp / "ckpt"),
        "async_ckpt": "off",
        "steps": "30",
        "log_every": "10",
    }
    return override(preset("tiny"), base | values)


def train_tiny(config: TrainConfig) -> None:
    with sigterm_restored():
        assert train.run(config, Topology()) == train.EXIT_OK


def torch_greedy(model: GPT, prompt: Sequence[int], new_tokens: int, vocab: int) -> list[int]:
    """Greedy decoding with the PyTorch model: the reference for the ONNX library."""
    ids = torch.tensor([list(prompt)])
    out: list[int] = []
    with torch.no_grad():
        for _ in range(new_tokens):
            token = int(model.logits(ids)[0, -1, :vocab].argmax())
            out.append(token)
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return out


@contextmanager
def mlflow_server(
    root: Path, startup_s: float = 240.0, mlflow: Path | None = None
) -> Iterator[str]:
    """A local MLflow server on 127.0.0.1 (this environment's `mlflow`, or `mlflow`);
    killed on exit, and by `timeout` after 15 minutes whatever happens to the test
    process."""
    port = free_port()
    mlflow = mlflow or Path(sys.executable).with_name("mlflow")
    command = ["timeout", "900", *server_command(root, port, str(mlflow))]
    log = (root.parent / "mlflow-server.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    output = (root.parent / "mlflow-server.log").read_text()[-2000:]
                    raise RuntimeError(f"mlflow server did not start: {output}") from None
                time.sleep(1)
        yield uri
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)
        log.close()
