"""The other environments, for tests that need what only another image's environment can
make: a checkpoint (training), an ONNX export (lifecycle, the only one with torch and
onnx together), or the cluster's manifests (plan, the only one with Pulumi).

`make test` creates every environment before any test runs (Makefile, TEST_DEPS); a test
run by hand in one environment needs the others to exist (`make setup`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The virtual environment of each environment (the Makefile's VENV_<env>;
#: tests/test_environments.py checks they agree).
VENVS = {
    "plan": ".venv",
    "training": ".venv-training",
    "lifecycle": ".venv-lifecycle",
    "serving": ".venv-serving",
    "features": ".venv-features",
    "data": ".venv-data",
    "pipelines": ".venv-pipelines",
    "finetune": ".venv-finetune",
    "llm": ".venv-llm",
}


def python(environment: str) -> Path:
    """The Python of `environment`; fails the test, naming what to run, if it is missing."""
    path = ROOT / VENVS[environment] / "bin" / "python"
    if not path.exists():
        pytest.fail(
            f"this test needs the {environment} environment ({VENVS[environment]}); "
            "`make setup` creates every environment",
            pytrace=False,
        )
    return path


def run_in(environment: str, *args: str, timeout: float = 900) -> str:
    """Run `python *args` in `environment` from the repository root; its stdout, or a
    failed test with its output."""
    result = subprocess.run(
        [str(python(environment)), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"python {' '.join(args)} in the {environment} environment exited "
            f"{result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}",
            pytrace=False,
        )
    return result.stdout


def tiny_checkpoint(tmp: Path, steps: int = 20) -> Path:
    """A tiny model trained for `steps` steps by the trainer's environment: `tmp/ckpt`."""
    run_in(
        "training", "-m", "workloads.training.train", "--preset", "tiny", "--steps", str(steps),
        "--log-every", "10", "--metrics-port", "0", "--async-ckpt", "off",
        "--data-dir", str(tmp / "data"), "--ckpt-dir", str(tmp / "ckpt"),
    )  # fmt: skip
    return tmp / "ckpt"


def tiny_export(tmp: Path, steps: int = 20) -> Path:
    """`tiny_checkpoint` exported to ONNX by the lifecycle environment, as the images do
    it: `tmp/export/tiny`."""
    checkpoint = tiny_checkpoint(tmp, steps)
    out = tmp / "export" / "tiny"
    run_in("lifecycle", "-m", "workloads.inference.export", str(checkpoint), "--out", str(out))
    return out


def tiny_hf_export(tmp: Path, steps: int = 20) -> Path:
    """`tiny_checkpoint` as `make export-hf` writes it (a Hugging Face GPT-2 folder with the
    byte tokenizer and the chat template), by the lifecycle environment: `tmp/hf/tiny`."""
    checkpoint = tiny_checkpoint(tmp, steps)
    out = tmp / "hf" / "tiny"
    run_in("lifecycle", "-m", "workloads.inference.hf_export", str(checkpoint), "--out", str(out))
    return out
