"""What each image can import: the data image has no torch, the training image has no
Spark, pandas, pandera or Presidio. Each command runs here in a subprocess where
importing the other image's packages fails (the data set is not needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_IN_DATA_IMAGE = ("torch", "mlflow")
NOT_IN_TRAINING_IMAGE = ("pyspark", "pandas", "pandera", "presidio_analyzer", "spacy")

BLOCKER = """
import importlib.abc, runpy, sys
blocked = set(sys.argv[1].split(","))
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} is blocked")
        return None
sys.meta_path.insert(0, Blocker())
if sys.argv[2] == "-c":
    exec(sys.argv[3])
else:
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def run_blocking(blocked: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, ",".join(blocked), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_data_job_imports_no_torch() -> None:
    result = run_blocking(NOT_IN_DATA_IMAGE, "workloads.data.prepare", "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--no-anonymise" in result.stdout
    for module in ("workloads.data.pii_eval", "workloads.data.make_pii_sample"):
        assert run_blocking(NOT_IN_DATA_IMAGE, module, "--help").returncode == 0


def test_the_trainers_manifest_check_needs_no_data_set() -> None:
    pytest.importorskip("torch", reason="the trainer's environment (torch)")
    code = (
        "import workloads.data.manifest, workloads.data.shard_format; "
        "import workloads.training.train"
    )
    result = run_blocking(NOT_IN_TRAINING_IMAGE, "-c", code)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_blocker_blocks() -> None:
    result = run_blocking(("torch",), "-c", "import workloads.data.shards")
    assert result.returncode != 0 and "torch is blocked" in result.stderr
