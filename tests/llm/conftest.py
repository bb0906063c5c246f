"""Fixtures of the LLM serving tests: one tiny model in Hugging Face format and ONE vLLM
server for the whole session (vLLM takes 20-60 s to start here), started with the
command `make serve-llm` runs, with an API key.

The model is what users serve: the trainer's tiny preset, trained a few steps and
exported by `make export-hf` (workloads/inference/hf_export.py).
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.environments import tiny_hf_export
from tests.workloads.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
NAME = "tiny"
#: Enough for the tiny model (2 layers x 2 heads x 32 x 2 x 4 bytes = 1 KiB a token).
KV_CACHE_GIB = "0.25"
STARTUP_S = 300
READY = "serve-llm: ready on "


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_hf_export(tmp_path_factory.mktemp("llm"))


def make_serve_llm_command(model: Path | str, port: int, *extra: str) -> list[str]:
    """The command `make serve-llm MODEL= PORT=` runs (read with `make -n`, so a change to
    the recipe changes what the tests start), with this test run's Python (the llm
    environment's)."""
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "serve-llm", f"MODEL={model}", f"PORT={port}",
         f"KV_CACHE_GIB={KV_CACHE_GIB}", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    lines = [line for line in dry.stdout.splitlines() if "-m workloads.llm.serve" in line]
    assert len(lines) == 1, dry.stdout
    command = shlex.split(lines[0].split(" || ")[0])
    assert command[0].endswith(".venv-llm/bin/python"), command
    return [sys.executable, *command[1:]]


@dataclass
class Server:
    """The running server: its base URL, API key, model name and output."""

    url: str
    key: str
    name: str
    model: Path
    log: Path
    process: subprocess.Popen[bytes]

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="session")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = free_port()
    log = tmp_path_factory.mktemp("llm-server") / "serve-llm.log"
    key = secrets.token_urlsafe(16)
    env = {**os.environ, "VLLM_API_KEY": key}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            make_serve_llm_command(tiny_model, port, f"ARGS=--name {NAME}"),
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    running = Server(f"http://127.0.0.1:{port}/v1", key, NAME, tiny_model, log, process)
    deadline = time.monotonic() + STARTUP_S
    while READY not in running.output():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"serve-llm did not start:\n{running.output()[-4000:]}", pytrace=False)
        time.sleep(0.5)
    yield running
    # Ctrl-C: vLLM and its workers stop, and the server says so in one line.
    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=90)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("serve-llm did not stop within 90 s of Ctrl-C", pytrace=False)
    tail = running.output().rstrip().splitlines()[-1]
    assert (code, tail) == (130, "serve-llm: stopped"), running.output()[-3000:]
