"""The entry-point names that images and plans run: `workloads.train`, `workloads.health`
and `workloads.fabric_check` are kept as aliases of the trainer's modules in
`workloads.training`, and run the same `main`."""

from __future__ import annotations

import importlib
import importlib.util
import re
import runpy
import sys
from collections.abc import Sequence

import pytest

from tests.workloads.helpers import REPO_ROOT

#: Old name -> the module that holds the code.
ALIASES = {
    "workloads.train": "workloads.training.train",
    "workloads.health": "workloads.training.health",
    "workloads.fabric_check": "workloads.training.fabric_check",
}

#: The files that name the modules containers run: the TrainingJob's manifests and the
#: platform's training runtimes and pod conventions (the plans' commands, the preflight)
#: and the images' default commands.
RUNNERS = (
    "modules/k8s/trainer/training_job/manifests.py",
    "modules/k8s/trainer/runtimes.py",
    "modules/k8s/trainer/pods.py",
    "workloads/Dockerfile",
    "workloads/serving/Dockerfile",
    "workloads/features/Dockerfile",
)


def modules_run_by_images_and_plans() -> set[str]:
    names: set[str] = set()
    for runner in RUNNERS:
        text = (REPO_ROOT / runner).read_text(encoding="utf-8")
        names.update(re.findall(r"""-m["',\s]+(workloads(?:\.\w+)+)""", text))
    return names


def test_every_module_an_image_or_a_plan_runs_exists_and_has_a_main() -> None:
    names = modules_run_by_images_and_plans()
    # The plans' training, fabric-check and preflight commands and the images' commands.
    assert {"workloads.train", "workloads.fabric_check", "workloads.health"} <= names
    for name in sorted(names):
        spec = importlib.util.find_spec(name)
        assert spec is not None, f"{name} is run by an image or a plan but does not exist"
        runnable = f"{name}.__main__" if spec.submodule_search_locations is not None else name
        assert (REPO_ROOT / runnable.replace(".", "/")).with_suffix(".py").is_file(), runnable
        if name in ALIASES or runnable.startswith("workloads.training."):
            assert callable(getattr(importlib.import_module(runnable), "main", None)), name


@pytest.mark.parametrize(("alias", "real"), sorted(ALIASES.items()))
def test_the_alias_is_the_real_modules_main(alias: str, real: str) -> None:
    assert importlib.import_module(alias).main is importlib.import_module(real).main


@pytest.mark.parametrize(("alias", "real"), sorted(ALIASES.items()))
def test_running_the_alias_exits_with_the_real_mains_status(
    alias: str, real: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m <alias>`` calls the real module's `main` and exits with its status."""
    calls: list[Sequence[str] | None] = []

    def fake_main(argv: Sequence[str] | None = None) -> int:
        calls.append(argv)
        return 57

    monkeypatch.setattr(importlib.import_module(real), "main", fake_main)
    monkeypatch.delitem(sys.modules, alias, raising=False)  # run it as `python -m` would
    monkeypatch.setattr(sys, "argv", [alias])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module(alias, run_name="__main__")
    assert exited.value.code == 57
    assert calls == [None]


@pytest.mark.parametrize(("alias", "real"), sorted(ALIASES.items()))
def test_help_of_the_alias_is_the_real_modules(
    alias: str, real: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m <alias> --help`` prints the real module's help: each run as
    ``python -m`` runs it (runpy, as above), in this process, which has torch imported
    already (a new interpreter per module cost seconds of CPU each)."""

    def help_of(module: str) -> str:
        monkeypatch.delitem(sys.modules, module, raising=False)
        monkeypatch.setattr(sys, "argv", [module, "--help"])
        with pytest.raises(SystemExit) as exited:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        captured = capsys.readouterr()
        assert exited.value.code == 0, captured.err[-2000:]
        return captured.out

    old, new = help_of(alias), help_of(real)
    assert old == new
    assert old.startswith(f"usage: python -m {alias}")
