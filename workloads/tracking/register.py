"""``make register RUN=<run id>``: register a tracked run's final checkpoint as a
model version, with its ONNX export attached.

The run's ``checkpoint`` tag (set by training at its last save) names the final
checkpoint. It is exported (``make export``'s pipeline, parity checked) unless an
export of that very checkpoint is given with ``--export-dir``; the checkpoint and
the export are logged as the run's artifacts ``checkpoint/`` and ``onnx/``, and a
version of the registered model (default: the run's preset) is created from them,
with the parity figures as tags.

Exit status: 0 registered, 2 unknown run, no checkpoint, unreachable server or a
failed export.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workloads.inference.card import ModelCard, read_card
from workloads.inference.errors import ExportError
from workloads.inference.export import DEFAULT_EXPORT_ROOT, export_checkpoint
from workloads.inference.source import resolve_checkpoint
from workloads.tracking.tracker import _CLIENT_ENV_DEFAULTS
from workloads.training.config import TrainConfig
from workloads.training.lineage import read_run_record

EXIT_OK = 0
EXIT_USER_ERROR = 2


class RegisterError(RuntimeError):
    """A run that cannot be registered, with what to do about it."""


def _client(uri: str) -> Any:
    for key, value in _CLIENT_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    from mlflow.tracking import MlflowClient  # noqa: PLC0415 - slow import, CLI only

    return MlflowClient(tracking_uri=uri)


def _get_run(client: Any, run_id: str, uri: str) -> Any:
    from mlflow.exceptions import MlflowException  # noqa: PLC0415

    try:
        return client.get_run(run_id)
    except MlflowException as err:
        if err.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise RegisterError(
                f"no run {run_id!r} on {uri}; copy the id from the run's page or from "
                "the `View run` line training printed"
            ) from err
        if "failed with exception" in err.message:  # the client's wrapper of a dead socket
            raise _unreachable(uri) from err
        raise RegisterError(f"{uri} refused the request: {err.message[:300]}") from err
    except Exception as err:  # connection refused, timeouts: requests' own types
        raise _unreachable(uri) from err


def _unreachable(uri: str) -> RegisterError:
    return RegisterError(
        f"cannot reach the tracking server at {uri}; start it with `make track` or pass "
        "TRACKING_URI= (make) / --tracking-uri"
    )


def _export_for(run: Any, step_dir: Path, export_dir: Path | None) -> tuple[Path, ModelCard]:
    if export_dir is not None:
        card = read_card(export_dir)
        if Path(card.source.get("checkpoint", "")).resolve() != step_dir.resolve():
            raise RegisterError(
                f"{export_dir} was exported from {card.source.get('checkpoint')}, not the run's "
                f"final checkpoint {step_dir}; leave --export-dir out to export it"
            )
        return export_dir, card
    record = read_run_record(step_dir.parent)
    if record is None:
        raise RegisterError(f"{step_dir.parent} has no run.json; cannot rebuild the model")
    config: TrainConfig = record.config
    out = DEFAULT_EXPORT_ROOT / f"run-{run.info.run_id}"
    card = export_checkpoint(
        step_dir, out, config, run_id=run.info.run_id, revision=record.git_revision
    )
    return out, card


def register(
    run_id: str, uri: str, *, model_name: str = "", export_dir: Path | None = None
) -> tuple[str, str]:
    """Register ``run_id``'s final checkpoint; returns ``(model name, version)``."""
    client = _client(uri)
    run = _get_run(client, run_id, uri)
    tag = run.data.tags.get("checkpoint")
    if not tag:
        raise RegisterError(
            f"run {run_id} logged no checkpoint (train with --ckpt-dir to register its model)"
        )
    _, step_dir = resolve_checkpoint(Path(tag))
    out, card = _export_for(run, step_dir, export_dir)
    client.log_artifacts(run_id, str(step_dir), artifact_path="checkpoint")
    client.log_artifacts(run_id, str(out), artifact_path="onnx")
    name = model_name or str(run.data.tags.get("preset") or card.source.get("preset") or "model")
    from mlflow.exceptions import MlflowException  # noqa: PLC0415

    try:
        client.create_registered_model(name, description="GPT-style model trained on the platform")
    except MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    parity = card.parity
    version = client.create_model_version(
        name,
        source=f"{run.info.artifact_uri}/checkpoint",
        run_id=run_id,
        tags={
            "checkpoint": str(step_dir),
            "step": card.source.get("step", ""),
            "onnx_fp32": "onnx/model.onnx",
            "onnx_int8": "onnx/model.int8.onnx",
            "model_card": "onnx/model_card.json",
            "parity.fp32_max_abs_logit_diff": f"{parity.fp32_max_abs_logit_diff:.3g}",
            "parity.fp32_loss": f"{parity.fp32_loss:.4f}",
            "parity.int8_loss": f"{parity.int8_loss:.4f}",
        },
        description=f"checkpoint {step_dir.name} of run {run_id} with its ONNX export",
    )
    return name, str(version.version)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.tracking.register",
        description="Register a tracked run's final checkpoint (with its ONNX export).",
    )
    parser.add_argument("run_id", help="the MLflow run id")
    parser.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000"),
        help="tracking server (default: MLFLOW_TRACKING_URI, else http://127.0.0.1:5000)",
    )
    parser.add_argument("--name", default="", help="registered model name (default: preset)")
    parser.add_argument("--export-dir", type=Path, help="an export of the run's checkpoint")
    args = parser.parse_args(argv)
    if not args.run_id.strip():
        print("register: RUN= is empty; give the run id (make register RUN=<id>)", file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        name, version = register(
            args.run_id.strip(), args.tracking_uri, model_name=args.name, export_dir=args.export_dir
        )
    except (RegisterError, ExportError) as err:
        print(f"register: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(f"register: run {args.run_id} -> model {name!r} version {version} on {args.tracking_uri}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
