"""Each make verb installs and runs in its own image's environment (Makefile): the plan,
review, audit, bootstrap and cost verbs in the plan environment, train and bench in the
training one, the lifecycle verbs in the lifecycle one, serve and bench-serve in the
serving one. `make plan`, `make review` and `make audit` install only `locks/plan.txt`
(not the plan environment's test tools): their commands run here in a subprocess where
importing any package that only `locks/plan-test.txt` brings fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = (ROOT / "Makefile").read_text()

VERBS = {
    "plan": ["plan", "plan-all", "review", "review-all", "audit", "bootstrap", "cost",
             "prices-refresh", "pin-images", "bench-review"],
    "training": ["train", "bench"],
    "lifecycle": ["track", "register", "export", "bench-infer"],
    "serving": ["serve", "bench-serve"],
}  # fmt: skip


def rule(verb: str) -> tuple[str, str]:
    """(prerequisites, recipe) of a verb's rule in the Makefile."""
    match = re.search(
        rf"^{re.escape(verb)}:([^\n#]*)(?:##[^\n]*)?\n((?:\t[^\n]*\n)*)", MAKEFILE, re.MULTILINE
    )
    assert match, f"no rule for {verb!r} in the Makefile"
    return match[1].split(), match[2]


@pytest.mark.parametrize(
    ("env", "verb"), [(env, verb) for env, verbs in VERBS.items() for verb in verbs]
)
def test_each_verb_installs_and_runs_its_own_environment(env: str, verb: str) -> None:
    prerequisites, recipe = rule(verb)
    assert prerequisites == [f"$(DEPS_{env})"], (verb, prerequisites)
    pythons = set(re.findall(r"\$\((PY(?:_\w+)?)\)", recipe))
    expected = "PY" if env == "plan" else f"PY_{env}"
    assert pythons <= {expected}, (verb, pythons)
    if verb != "review-all":  # it runs `make review` for each stack
        assert pythons == {expected}, (verb, recipe)


# Run in the plan environment (where `make test` runs this file): what plan-test.txt adds.
BLOCKER = """
import importlib.abc, importlib.metadata, re, runpy, sys
pin = re.compile(r"^([A-Za-z0-9_.-]+)(?:\\[[^]]*\\])?==", re.M)
def names(path):
    return {re.sub(r"[-_.]+", "-", n).lower() for n in pin.findall(open(path).read())}
test_only = names("locks/plan-test.txt") - names("locks/plan.txt")
blocked = {
    module for module, dists in importlib.metadata.packages_distributions().items()
    if {re.sub(r"[-_.]+", "-", d).lower() for d in dists} <= test_only
}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} is not in the plan set")
        return None
sys.meta_path.insert(0, Blocker())
print("blocked:", " ".join(sorted(blocked)), file=sys.stderr)
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def run_with_the_plan_set_only(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_plan_and_review_need_only_the_plan_set(tmp_path: Path) -> None:
    plan = run_with_the_plan_set_only(
        "stacks.offline_plan", "--quiet", "--out", str(tmp_path), "smb-cpu"
    )
    assert plan.returncode == 0, plan.stderr[-3000:]
    review = run_with_the_plan_set_only(
        "policies.review", "--plan", str(tmp_path / "smb-cpu.json"), "--out", str(tmp_path / "r")
    )
    assert review.returncode == 0, review.stdout[-2000:] + review.stderr[-3000:]


def test_audit_needs_only_the_plan_set() -> None:
    audit = run_with_the_plan_set_only("policies.audit", "--help")
    assert audit.returncode == 0, audit.stderr[-3000:]


def test_the_blocker_really_blocks() -> None:
    result = run_with_the_plan_set_only("pytest", "--version")
    assert result.returncode != 0
    assert "pytest is not in the plan set" in result.stderr
    blocked = result.stderr.split("blocked:", 1)[1].split("\n", 1)[0].split()
    # The test tools and moto's server extras; never what plan.txt itself installs.
    assert {"pytest", "jsonschema", "kubernetes_validate", "mypy", "flask"} <= set(blocked)
    assert not {"pulumi", "pulumi_aws", "moto", "boto3", "yaml"} & set(blocked)


def test_a_test_job_hands_its_tests_neither_makes_flags_nor_args() -> None:
    """make puts command-line variables in its recipes' environment: a test that runs a verb
    (`make serve`, `make export`) would read `make test ARGS=...`'s ARGS as its own."""
    printed = subprocess.run(
        ["make", "-n", "--no-print-directory", "pytest-serving", "ARGS=--durations=3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("MAKE")},
    ).stdout
    command = next(line for line in printed.splitlines() if "bin/pytest" in line)
    unset = set(re.findall(r"-u (\w+)", command.split("bin/pytest")[0]))
    assert {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARGS"} <= unset, command
