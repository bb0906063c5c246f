"""Helpers of the model-lifecycle tests: a trained tiny checkpoint, PyTorch greedy
decoding as the reference, a local MLflow server that stops by itself, file digests of
a directory tree, and Triton's own ``ModelConfig`` message class."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from google.protobuf import descriptor_pool, message_factory

from tests.workloads.helpers import free_port, sigterm_restored
from workloads.tracking.server import server_command, server_environment
from workloads.training import train
from workloads.training.config import TrainConfig, override, preset
from workloads.training.distributed import Topology
from workloads.training.model import GPT

#: How often the health check of a starting server is retried.
POLL_S = 0.2


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


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """PyTorch on one thread inside the block. The tests' models are tiny (0.12M
    parameters): a second OpenMP thread adds no speed there, and on a busy machine its
    spin-waiting costs some twenty times the CPU of the training itself."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train_tiny(config: TrainConfig) -> None:
    with sigterm_restored(), one_torch_thread():
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
    # Its own process group, killed whole: `mlflow server` runs uvicorn as a child that
    # a SIGTERM to the CLI left to shut down in its own time (20 s of every teardown).
    process = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=server_environment(os.environ),
        start_new_session=True,
    )
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
                time.sleep(POLL_S)
        yield uri
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # a test server: nothing to flush
        process.wait(timeout=20)
        log.close()


def tree_digests(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` (``"dir"`` for each
    directory): equal before and after means nothing was added, removed or changed."""
    digests = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        digests[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def model_config_class() -> Any:
    """Triton's ``inference.ModelConfig`` message class, as shipped in tritonclient.

    ``tritonclient.grpc.model_config_pb2`` is generated for protobuf 6; where protobuf 5
    or 7 is installed (the lifecycle environment has 7) its version check refuses to import.
    The message is then built from the very descriptor that module carries (the
    serialized ``model_config.proto`` it passes to ``AddSerializedFile``), so the schema
    is Triton's either way. tritonclient itself must be installed (the ``lifecycle``
    extra).
    """
    spec = importlib.util.find_spec("tritonclient")
    assert spec is not None and spec.origin is not None, (
        "tritonclient is not installed; install the lifecycle extra (pip install -e .[lifecycle])"
    )
    try:
        from tritonclient.grpc import model_config_pb2  # noqa: PLC0415

        return model_config_pb2.ModelConfig
    except Exception:  # protobuf's VersionError (gencode 6.x on a 5.x runtime), no grpcio
        pass
    source = Path(spec.origin).parent / "grpc" / "model_config_pb2.py"
    serialized = [
        node.args[0].value
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "AddSerializedFile"
        and isinstance(node.args[0], ast.Constant)
    ]
    assert len(serialized) == 1, f"{source}: expected one serialized model_config.proto"
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(serialized[0])
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("inference.ModelConfig"))
