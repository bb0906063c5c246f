"""``make register-finetune OUT=<make finetune's OUT> NAME=<model>``: a fine-tuning output
as a tracked run and a registered model version of MLflow's transformers flavor.

1. OUT must be what `make finetune` wrote (docs/finetune.md): ``finetune.json`` (the
   record: base and data digests, settings, losses), ``adapter/`` (PEFT's adapter) and
   ``merged/`` (a plain Hugging Face model folder). Nothing in OUT is changed.
2. If a version of NAME already comes from this very output (its ``finetune.json``'s
   SHA-256, a version tag), that version is the answer: nothing is logged twice.
3. A run in the experiment ``--experiment`` (``finetune``) records the fine-tune: the
   record's base, data and settings as parameters, its losses (per step) and parity
   figures as metrics, ``finetune.json`` and ``adapter/`` as artifacts.
4. ``merged/`` is logged to that run as a ``text-generation`` pipeline through MLflow's
   transformers flavor (`workloads.tracking.register.log_transformers_model`, as `make
   register` logs a trained run's Hugging Face export), with ``finetune.json`` beside it,
   and registered as a version of NAME (``models:/NAME/<version>`` loads with
   ``mlflow.transformers.load_model``), tagged with the base model (path, digest, type),
   the adapter (``runs:/<run>/adapter``), the data digest and the record's digest. The
   first version becomes ``champion``, a later one ``challenger`` (as `make register`).

Exit status: 0 registered (or already registered), 2 OUT not a fine-tuning output, no
merged model, a bad name, a tracking URI that is not a server's URL or an unreachable
server, 130 interrupted (the run is marked failed; running again registers it).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.inference.errors import ExportError
from workloads.inference.triton import check_model_name
from workloads.tracking.register import (
    HF_TASK,
    log_transformers_model,
    register_logged_model,
)
from workloads.tracking.registry import RegistryError, call, make_client, tracking_uri_problem

EXIT_OK = 0
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
#: What `make finetune` writes into OUT (`workloads.finetune.lora`'s RECORD_FILE,
#: ADAPTER_DIR, MERGED_DIR: this stage may not import the finetune stage;
#: tests/workloads/test_lifecycle_finetune.py registers a real output).
RECORD_FILE = "finetune.json"
ADAPTER_DIR = "adapter"
MERGED_DIR = "merged"
#: The record's sections a registration reads.
_RECORD_KEYS = ("base", "data", "options", "losses")
DEFAULT_EXPERIMENT = "finetune"
#: The version tag that identifies the output a version was made from.
RECORD_TAG = "finetune.record_sha256"
ADAPTER_TAG = "adapter"
FINETUNED_DESCRIPTION = "A Hugging Face causal LM fine-tuned with LoRA on the platform"


@dataclass(frozen=True)
class FinetuneRegistration:
    """What `register_finetune` did.

    Args:
        name: the registered model.
        version: its version for this output.
        created: false when that version existed already (nothing was logged).
        run_id: the tracked run of the fine-tune.
        alias: the alias this call set (``champion``, ``challenger``), or empty.
        tags: the version's tags.
    """

    name: str
    version: str
    created: bool
    run_id: str
    alias: str
    tags: dict[str, str]


def read_output(out: Path) -> tuple[dict[str, Any], str]:
    """The record of the fine-tuning output ``out`` and its SHA-256.

    Raises:
        RegistryError: ``out`` is not a `make finetune` output, or has no merged model.
    """
    hint = "give the OUT= of a `make finetune` run"
    if not out.is_dir():
        what = "no such directory" if not out.exists() else "not a directory"
        raise RegistryError(f"OUT {out}: {what}; {hint}")
    record_file = out / RECORD_FILE
    try:
        raw = record_file.read_bytes()
        record = json.loads(raw)
    except FileNotFoundError:
        raise RegistryError(
            f"OUT {out} is not a fine-tuning output (no {RECORD_FILE}); {hint}"
        ) from None
    except (OSError, ValueError) as err:
        raise RegistryError(f"OUT {out}: {RECORD_FILE} cannot be read ({err}); {hint}") from err
    if not isinstance(record, dict) or any(k not in record for k in _RECORD_KEYS):
        raise RegistryError(
            f"OUT {out}: {RECORD_FILE} is not a fine-tuning record (it needs "
            f"{', '.join(_RECORD_KEYS)}); {hint}"
        )
    if not (out / MERGED_DIR / "config.json").is_file():
        raise RegistryError(
            f"OUT {out} has no merged model ({MERGED_DIR}/config.json); run `make finetune` "
            "again into an empty OUT="
        )
    if not _is_full(record) and not (out / ADAPTER_DIR).is_dir():
        raise RegistryError(
            f"OUT {out} has no {ADAPTER_DIR}/; run `make finetune` again into an empty OUT="
        )
    return record, hashlib.sha256(raw).hexdigest()


def _is_full(record: dict[str, Any]) -> bool:
    """A full fine-tune (``make finetune ARGS=--full``): every weight trained, no adapter."""
    return record.get("mode") == "full"


def _flat(prefix: str, values: Any) -> dict[str, str]:
    """``{"prefix.key": "value"}`` of a record's section (strings, numbers, booleans)."""
    if not isinstance(values, dict):
        return {}
    return {f"{prefix}.{k}": str(v) for k, v in sorted(values.items())}


def run_params(record: dict[str, Any]) -> dict[str, str]:
    """The run's parameters: what was fine-tuned, on what, how."""
    params = _flat("base", record["base"]) | _flat("data", record["data"])
    params |= _flat("options", record["options"]) | _flat("versions", record.get("versions"))
    for key in ("trainable_parameters", "total_parameters"):
        if key in record:
            params[key] = str(record[key])
    return params


def run_metrics(record: dict[str, Any]) -> list[tuple[str, float, int]]:
    """The run's metrics as ``(key, value, step)``: the loss at each logged step, the
    parity figures and the time taken (step 0)."""
    metrics = [("loss", float(loss), int(step)) for step, loss in record["losses"]]
    for key in ("merged_max_abs_logit_diff", "max_abs_logit_change_from_base", "seconds"):
        value = record.get(key)
        if isinstance(value, int | float):
            metrics.append((key, float(value), 0))
    return metrics


def _existing_version(client: Any, uri: str, name: str, digest: str) -> Any | None:
    versions = call(uri, lambda: client.search_model_versions(f"name='{name}'"))
    same = [v for v in versions if v.tags.get(RECORD_TAG) == digest]
    return min(same, key=lambda v: int(v.version)) if same else None


def _experiment_id(client: Any, uri: str, experiment: str) -> str:
    found = call(uri, lambda: client.get_experiment_by_name(experiment))
    if found is not None:
        return str(found.experiment_id)
    return str(call(uri, lambda: client.create_experiment(experiment)))


def _card(name: str, out: Path, record: dict[str, Any]) -> str:
    base, options = record["base"], record["options"]
    how = (
        f"in full (`make finetune ARGS=--full`, {options.get('nproc', 1)} FSDP2 processes, "
        f"{options.get('steps')} steps)"
        if _is_full(record)
        else f"with LoRA (`make finetune`, rank {options.get('rank')}, "
        f"{options.get('steps')} steps)"
    )
    merged = (
        "every weight trained" if _is_full(record) else "the adapter merged into the base weights"
    )
    return (
        f"# {name}\n\nA `{base.get('model_type', '?')}` causal LM fine-tuned {how} on "
        f"{record['data'].get('kind', '?')} data (digest {record['data'].get('digest', '?')}), "
        f"{merged}.\n\nBase: `{base.get('path')}` "
        f"(SHA-256 over its files {base.get('digest')}). Output: `{out.resolve()}`.\n"
    )


def register_finetune(
    out: Path, uri: str, *, name: str = "", experiment: str = DEFAULT_EXPERIMENT
) -> FinetuneRegistration:
    """Register the fine-tuning output ``out`` (see the module docstring).

    Args:
        out: the OUT of a `make finetune` run (only read).
        uri: the tracking server (or SQLite store).
        name: the registered model (default: OUT's folder name).
        experiment: the experiment of the fine-tune's run (made when missing).

    Raises:
        RegistryError: not a fine-tuning output, no merged model, an unusable name, an
            unreachable server.
    """
    name = name or out.resolve().name
    try:
        check_model_name(name)
    except ExportError as err:  # the rule of a model name on the platform (a path, a URL)
        raise RegistryError(
            f"NAME {name!r} cannot name a registered model: use letters, digits, '_', '.' "
            "and '-' (NAME=, default OUT's folder name)"
        ) from err
    problem = tracking_uri_problem(uri)  # before OUT is read: a typo costs nothing
    if problem:
        raise RegistryError(problem)
    record, digest = read_output(out)
    client = make_client(uri)
    existing = _existing_version(client, uri, name, digest)
    if existing is not None:
        return FinetuneRegistration(
            name, str(existing.version), False, str(existing.run_id), "", dict(existing.tags)
        )
    experiment_id = _experiment_id(client, uri, experiment)
    run = call(
        uri,
        lambda: client.create_run(
            experiment_id,
            run_name=out.resolve().name,
            tags={"source": "make finetune", RECORD_TAG: digest},
        ),
    )
    run_id = str(run.info.run_id)
    try:
        registration = _log_and_register(
            client, uri, out, record=record, digest=digest, name=name, run_id=run_id
        )
    except BaseException:
        with contextlib.suppress(Exception):  # the first error is the one to report
            client.set_terminated(run_id, "FAILED")
        raise
    call(uri, lambda: client.set_terminated(run_id, "FINISHED"))
    return registration


def _log_and_register(
    client: Any,
    uri: str,
    out: Path,
    *,
    record: dict[str, Any],
    digest: str,
    name: str,
    run_id: str,
) -> FinetuneRegistration:
    from mlflow.entities import Metric, Param  # noqa: PLC0415

    params = [Param(k, v) for k, v in run_params(record).items()]
    metrics = [Metric(k, v, 0, step) for k, v, step in run_metrics(record)]
    call(uri, lambda: client.log_batch(run_id, metrics=metrics, params=params))
    call(uri, lambda: client.log_artifact(run_id, str(out / RECORD_FILE)))
    full = _is_full(record)
    if not full:
        call(uri, lambda: client.log_artifacts(run_id, str(out / ADAPTER_DIR), ADAPTER_DIR))
    info = log_transformers_model(
        client,
        uri,
        out / MERGED_DIR,
        run_id=run_id,
        name=name,
        card=_card(name, out, record),
        metadata={"run_id": run_id, RECORD_TAG: digest},
        extras=[out / RECORD_FILE],
    )
    base, data = record["base"], record["data"]
    tags: dict[str, str] = {
        "run_id": run_id,
        "format": "transformers",
        "task": HF_TASK,
        "base.path": str(base.get("path", "")),
        "base.digest": str(base.get("digest", "")),
        "base.model_type": str(base.get("model_type", "")),
        "mode": "full" if full else "lora",
        "data.kind": str(data.get("kind", "")),
        "data.digest": str(data.get("digest", "")),
        RECORD_TAG: digest,
        "output": str(out.resolve()),
    }
    if not full:
        tags[ADAPTER_TAG] = f"runs:/{run_id}/{ADAPTER_DIR}"
        tags["adapter.rank"] = str(record["options"].get("rank", ""))
    version, alias = register_logged_model(
        client,
        uri,
        name,
        info,
        run_id=run_id,
        tags=tags,
        description=(
            f"full fine-tune of {base.get('path')} (run {run_id})"
            if full
            else f"LoRA fine-tune of {base.get('path')} (run {run_id}): the merged model; the "
            f"adapter is runs:/{run_id}/{ADAPTER_DIR}"
        ),
        model_description=FINETUNED_DESCRIPTION,
    )
    return FinetuneRegistration(name, version, True, run_id, alias, tags)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.tracking.register_finetune",
        description="Register a `make finetune` output's merged model (MLflow transformers).",
    )
    parser.add_argument("out", type=Path, help="the OUT of a `make finetune` run")
    parser.add_argument("--name", default="", help="registered model name (default: OUT's name)")
    parser.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000"),
        help="tracking server (default: MLFLOW_TRACKING_URI, else http://127.0.0.1:5000)",
    )
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="the run's experiment")
    args = parser.parse_args(argv)
    if not str(args.out).strip():
        print("register-finetune: give OUT=<the OUT of a `make finetune` run>", file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        result = register_finetune(
            args.out, args.tracking_uri, name=args.name.strip(), experiment=args.experiment
        )
    except RegistryError as err:
        print(f"register-finetune: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as err:  # a local file that cannot be read
        print(f"register-finetune: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(
            "register-finetune: interrupted; run it again to register the output (a "
            "version already made for it is found, not made twice)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    model_uri = f"models:/{result.name}/{result.version}"
    if result.created:
        print(
            f"register-finetune: {args.out} -> model {result.name!r} version {result.version} "
            f"on {args.tracking_uri} (run {result.run_id}; alias {result.alias!r})"
        )
    else:
        print(
            f"register-finetune: {args.out} is already model {result.name!r} version "
            f"{result.version} on {args.tracking_uri}; nothing new was registered"
        )
    print(f"register-finetune: load it with mlflow.transformers.load_model('{model_uri}')")
    if ADAPTER_TAG in result.tags:
        print(f"register-finetune: the adapter is {result.tags[ADAPTER_TAG]}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
