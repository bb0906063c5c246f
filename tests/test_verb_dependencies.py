"""`make plan`, `make review` and `make audit` install only the `plan` set (Makefile):
their commands must run with the workloads' and the test tools' packages missing. Each
runs here in a subprocess where importing any of those packages fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Top-level packages of the workloads and dev sets that the plan set does not install.
NOT_IN_PLAN_SET = ("torch", "prometheus_client", "pynvml", "numpy", "pytest", "jsonschema")

BLOCKER = f"""
import importlib.abc, runpy, sys
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {NOT_IN_PLAN_SET!r}:
            raise ImportError(f"{{name}} is not in the plan set")
        return None
sys.meta_path.insert(0, Blocker())
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def run_without_other_sets(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_plan_and_review_need_only_the_plan_set(tmp_path: Path) -> None:
    plan = run_without_other_sets(
        "stacks.offline_plan", "--quiet", "--out", str(tmp_path), "smb-cpu"
    )
    assert plan.returncode == 0, plan.stderr[-3000:]
    review = run_without_other_sets(
        "policies.review", "--plan", str(tmp_path / "smb-cpu.json"), "--out", str(tmp_path / "r")
    )
    assert review.returncode == 0, review.stdout[-2000:] + review.stderr[-3000:]


def test_audit_needs_only_the_plan_set() -> None:
    audit = run_without_other_sets("policies.audit", "--help")
    assert audit.returncode == 0, audit.stderr[-3000:]


def test_the_blocker_really_blocks() -> None:
    result = run_without_other_sets("workloads.training.bench", "--help")
    assert result.returncode != 0
    assert "is not in the plan set" in result.stderr
