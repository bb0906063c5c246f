"""``make pipeline SOURCE=<dir>``: the data-to-model pipeline on this machine, with KFP's
local runner.

``python -m workloads.pipelines.local SOURCE --tracking-uri URI [--name NAME] ...``

Before anything runs, what a user can get wrong is checked and reported in one message
(exit 2): a bad number, a model name that registration would refuse, a preset the
trainer does not know, a ``--root`` that cannot be written, a SOURCE that is missing or
holds no ``.txt``/``.jsonl`` file, a stage environment that is not there, a tracking URI
that is not an HTTP server or does not answer.
Then KFP's local runner (`kfp.local`, `SubprocessRunner` in this interpreter) runs the
pipeline of lightweight components (`workloads.pipelines.pipeline.local_pipeline`); each
step starts its stage's own interpreter (`workloads.pipelines.runner`). Every task's
files are under ``--root`` (``build/pipeline/data-to-model-<time>/<task>/``).

Exit status: 0 a model version registered (its roll-out printed); 1 a step failed (the
step's own message is above; a dataset refused by validation is one); 2 a user error,
found before anything ran; 3 the evaluation gate stopped the run: the new model's
held-out loss is worse than the champion's, and nothing was registered.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from workloads.layout import MODEL_NAME
from workloads.pipelines.runner import ROOT, STATUS_DIR_ENV, stage_python
from workloads.pipelines.steps import STAGE_VENVS, STEPS

EXIT_OK = 0
EXIT_STEP_FAILED = 1
EXIT_USER_ERROR = 2
EXIT_GATE = 3
DEFAULT_ROOT = Path("build/pipeline")
#: What the Spark job reads (workloads.data.prepare), checked here before anything runs.
SOURCE_SUFFIXES = (".txt", ".jsonl")
#: The evaluate step's exit status when the new model is worse (workloads.tracking.evaluate).
GATE_STATUS = 1
#: Exit statuses a step documents, with what the run stopped on.
STEP_MEANINGS = {
    ("prepare", 1): "the dataset was refused by validation (the report is above); nothing "
    "was trained",
    ("evaluate", 1): "the new model's held-out loss is worse than the champion's; nothing "
    "was exported or registered",
}


class UserError(Exception):
    """Something to fix before the pipeline can run."""


@dataclass(frozen=True)
class Settings:
    """The pipeline's arguments (`workloads.pipelines.pipeline.build`)."""

    source: Path
    tracking_uri: str
    dataset_name: str
    model_name: str
    preset: str
    steps: int
    nproc: int
    spark_workers: int
    max_loss_regression: float
    stack: str
    canary_percent: int

    def arguments(self) -> dict[str, object]:
        return {
            "source": str(self.source.resolve()),
            "tracking_uri": self.tracking_uri,
            "dataset_name": self.dataset_name,
            "model_name": self.model_name,
            "preset": self.preset,
            "steps": self.steps,
            "nproc": self.nproc,
            "spark_workers": self.spark_workers,
            "max_loss_regression": self.max_loss_regression,
            "stack": self.stack,
            "canary_percent": self.canary_percent,
        }


def check_source(source: Path) -> None:
    """SOURCE exists and holds a file the data step reads (its own checks follow)."""
    if not source.exists():
        raise UserError(f"SOURCE {source} does not exist; give a directory of .txt/.jsonl files")
    if source.is_file():
        found = source.suffix in SOURCE_SUFFIXES
    else:
        found = any(p.is_file() and p.suffix in SOURCE_SUFFIXES for p in source.rglob("*"))
    if not found:
        raise UserError(
            f"SOURCE {source} holds no .txt or .jsonl file; the pipeline reads .txt files (one "
            "document per line) and .jsonl files (one document per 'text' field)"
        )


def check_tracking(uri: str, timeout_s: float = 10.0) -> None:
    """The tracking server answers its health check (MLflow's ``/health``)."""
    hint = (
        "start one with `make track` (TRACK_PORT=, default 5000) or name yours with "
        "TRACKING_URI= (make) / --tracking-uri"
    )
    if urlparse(uri).scheme not in ("http", "https"):
        raise UserError(
            f"the tracking URI {uri!r} is not an HTTP(S) server; every step (training, "
            f"evaluation, registration) talks to the same MLflow server: {hint}"
        )
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s) as answer:
            status = answer.status
    except urllib.error.HTTPError as err:
        status = err.code
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise UserError(f"cannot reach the tracking server at {uri} ({reason}); {hint}") from err
    if status != 200:
        raise UserError(f"the tracking server at {uri} answered /health with {status}; {hint}")


def check_root(root: Path) -> None:
    """``--root`` is, or can be made, a folder this user writes to (it is made only
    when the run starts)."""
    existing = next(p for p in (root, *root.parents) if p.exists())
    if not existing.is_dir():
        raise UserError(f"--root {root}: {existing} is a file; give a folder for the run's files")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--root {root}: {existing} is not writable; give another folder")


def trainer_presets(root: Path = ROOT) -> list[str]:
    """The trainer's presets, as the training environment has them. The pipeline
    imports no stage's code (each step runs in its stage's own environment), so that
    environment's interpreter is asked; the trainer's config module is standard library
    only, so the answer takes a fraction of a second."""
    try:
        answer = subprocess.run(
            [str(stage_python("training", root)), "-c",
             "from workloads.training.config import PRESETS; print(*PRESETS)"],
            cwd=root, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as err:
        raise UserError(
            f"the training environment ({STAGE_VENVS['training']}) cannot read the trainer's "
            f"presets ({err}); `make pipeline` installs it"
        ) from err
    return answer.stdout.split()


def check_preset(preset: str) -> None:
    """The trainer knows ``preset``: found now, not after ingest and prepare."""
    presets = trainer_presets()
    if preset not in presets:
        raise UserError(
            f"PRESET={preset!r} (--preset) is not one of the trainer's presets: "
            f"{', '.join(presets)}"
        )


def check_environments(root: Path = ROOT) -> None:
    missing = [
        f"{stage} ({STAGE_VENVS[stage]})"
        for stage in sorted({s.stage for s in STEPS})
        if not stage_python(stage, root).exists()
    ]
    if missing:
        raise UserError(
            f"the pipeline's steps run in the stages' own environments; missing: "
            f"{', '.join(missing)}. `make pipeline` installs them"
        )


def _failed_step(status_dir: Path) -> tuple[str, int] | None:
    """The first step (in pipeline order) that recorded a failure."""
    for step in STEPS:
        path = status_dir / f"{step.name}.json"
        if path.is_file():
            code = int(json.loads(path.read_text())["returncode"])
            if code != 0:
                return step.name, code
    return None


def _latest_run(root: Path, since: float) -> Path | None:
    from workloads.pipelines.pipeline import PIPELINE_NAME  # noqa: PLC0415

    runs = [p for p in root.glob(f"{PIPELINE_NAME}-*") if p.is_dir() and p.stat().st_mtime >= since]
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


def run(settings: Settings, root: Path) -> int:
    """Run the pipeline locally; the exit status (module docstring)."""
    import time  # noqa: PLC0415

    from kfp import local  # noqa: PLC0415 - KFP's import is slow; checks first

    from workloads.pipelines.pipeline import local_pipeline  # noqa: PLC0415

    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    status_dir = Path(tempfile.mkdtemp(prefix=".status-", dir=root))
    os.environ[STATUS_DIR_ENV] = str(status_dir)
    # The lightweight components import workloads.pipelines.runner from this checkout.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    started = time.time() - 1
    try:
        local.init(
            runner=local.SubprocessRunner(use_venv=False),
            pipeline_root=str(root),
            raise_on_error=False,
        )
        task = local_pipeline()(**settings.arguments())
        failed = _failed_step(status_dir)
    finally:
        shutil.rmtree(status_dir, ignore_errors=True)
    where = _latest_run(root, started)
    if failed is None and task.outputs:
        version = task.outputs["Output"]
        print(
            f"pipeline: done; the run's files are in {where}. The model version is {version} "
            f"on {settings.tracking_uri} (its run names the dataset as its input); the "
            "roll-out is printed above (canary step) and in canary/plan"
        )
        return EXIT_OK
    if failed is None:  # a step failed without recording (KFP itself, or the executor)
        print(f"pipeline: a step failed (see the log above); files in {where}", file=sys.stderr)
        return EXIT_STEP_FAILED
    step, code = failed
    meaning = STEP_MEANINGS.get((step, code), "its message is above")
    print(
        f"pipeline: stopped at {step} (exit status {code}): {meaning}. The run's files are in "
        f"{where}",
        file=sys.stderr,
    )
    return EXIT_GATE if (step, code) == ("evaluate", GATE_STATUS) else EXIT_STEP_FAILED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.pipelines.local",
        description=(
            "Run the data-to-model pipeline locally (KFP's local runner): ingest, prepare, "
            "train, evaluate, export, register, canary."
        ),
    )
    parser.add_argument("source", type=Path, help="directory (or file) of .txt/.jsonl files")
    parser.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000"),
        help="MLflow tracking server (default: MLFLOW_TRACKING_URI, else http://127.0.0.1:5000)",
    )
    parser.add_argument("--name", default="", help="registered model (default: the preset)")
    parser.add_argument("--dataset-name", default="", help="dataset name (default: SOURCE's)")
    parser.add_argument("--preset", default="tiny", help="the trainer's model preset (tiny)")
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps (150)")
    parser.add_argument("--nproc", type=int, default=1, help="torchrun processes (1)")
    parser.add_argument(
        "--spark-workers",
        type=int,
        default=max(1, os.cpu_count() or 1),
        help="Spark local-mode cores (default: all)",
    )
    parser.add_argument(
        "--max-loss-regression",
        type=float,
        default=0.0,
        help="how much the held-out loss may exceed the champion's (nats/token; default 0)",
    )
    parser.add_argument("--stack", default="<stack>", help="stack named in the canary's lines")
    parser.add_argument("--canary-percent", type=int, default=25, help="canary share (25)")
    parser.add_argument(
        "--root", type=Path, default=DEFAULT_ROOT, help=f"run files (default {DEFAULT_ROOT})"
    )
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    problems = [
        f"{flag} must be at least {low}, got {value}"
        for flag, value, low in (
            ("--steps", args.steps, 1),
            ("--nproc", args.nproc, 1),
            ("--spark-workers", args.spark_workers, 1),
        )
        if value < low
    ]
    if args.max_loss_regression < 0:
        problems.append(f"--max-loss-regression must be >= 0, got {args.max_loss_regression}")
    if not 1 <= args.canary_percent <= 99:
        problems.append(f"--canary-percent must be in 1-99, got {args.canary_percent}")
    # The registered model's name (the preset's by default, which `check_preset` checks):
    # refused here rather than by the evaluate step, after ingest, prepare and train.
    if args.name.strip() and not MODEL_NAME.fullmatch(args.name.strip()):
        problems.append(
            f"NAME={args.name.strip()!r} (--name) cannot name a registered model, whose "
            "Triton models are folders and URL paths: use letters, digits, '_', '.' and '-'"
        )
    if problems:
        raise UserError("; ".join(problems))
    source: Path = args.source
    name = args.dataset_name or source.resolve().name or "dataset"
    return Settings(
        source=source,
        tracking_uri=args.tracking_uri.rstrip("/"),
        dataset_name=name,
        model_name=args.name.strip(),
        preset=args.preset,
        steps=args.steps,
        nproc=args.nproc,
        spark_workers=args.spark_workers,
        max_loss_regression=args.max_loss_regression,
        stack=args.stack,
        canary_percent=args.canary_percent,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = _settings(args)
        check_root(args.root)
        check_source(settings.source)
        check_environments()
        check_preset(settings.preset)
        check_tracking(settings.tracking_uri)
    except UserError as err:
        print(f"pipeline: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    return run(settings, args.root)


if __name__ == "__main__":
    sys.exit(main())
