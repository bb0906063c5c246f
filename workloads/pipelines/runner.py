"""What a local step does: start its stage's own interpreter on the step's module.

KFP's `SubprocessRunner` runs a lightweight component's function in a process of the
interpreter that runs the pipeline (the pipelines environment: KFP's SDK, nothing of the
stages). Each local component's body only calls `run_step`, which starts the step's
stage environment's ``python`` (``.venv-data``, ``.venv-training``, ``.venv-lifecycle``)
on ``-m <module>`` with the arguments `workloads.pipelines.steps` renders: the same
command line the step's container runs on the cluster. PySpark, PyTorch and MLflow are
therefore never imported into one process, as they never share an image.

Pure standard library: it runs inside KFP's executor process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from workloads.pipelines.steps import BY_NAME, STAGE_VENVS, command, render

ROOT = Path(__file__).resolve().parents[2]
#: Where the local driver (`workloads.pipelines.local`) wants each step's outcome
#: written (``<dir>/<step>.json``); unset, nothing is written.
STATUS_DIR_ENV = "PIPELINE_STATUS_DIR"


def stage_python(stage: str, root: Path = ROOT) -> Path:
    """The interpreter of a stage's environment in this checkout."""
    return root / STAGE_VENVS[stage] / "bin" / "python"


def step_argv(name: str, values: dict[str, object], root: Path = ROOT) -> list[str]:
    """The full local command line of step ``name`` with the run's ``values``."""
    step = BY_NAME[name]
    return [
        *command(step, str(stage_python(step.stage, root))),
        *(str(v) for v in render(step, values)),
    ]


def _record(name: str, argv: list[str], returncode: int) -> None:
    status_dir = os.environ.get(STATUS_DIR_ENV)
    if not status_dir:
        return
    path = Path(status_dir) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"step": name, "argv": argv, "returncode": returncode}) + "\n")


def run_step(name: str, **values: object) -> None:
    """Run step ``name`` in its stage's environment from the repository root; exits
    with the step's status when it fails (the stage has printed why), so KFP marks the
    task failed without a traceback of this process."""
    argv = step_argv(name, values)
    if not Path(argv[0]).exists():
        print(
            f"pipeline: step {name} needs the {BY_NAME[name].stage} environment "
            f"({argv[0]}); `make pipeline` installs it",
            file=sys.stderr,
        )
        _record(name, argv, 2)
        raise SystemExit(2)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"  # the stage's lines stream as they come, in order
    print("$ " + " ".join(argv), flush=True)
    returncode = subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode
    _record(name, argv, returncode)
    if returncode != 0:
        raise SystemExit(returncode)
