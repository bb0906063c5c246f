"""Where a training run came from and where it put its model.

The run record (``run.json`` in the checkpoint directory, written by rank 0 when a
run starts) keeps the typed config, the git revision and the tracking run id next to
the checkpoints, so an export of that directory needs no flags to rebuild the model
and can name its source run. The same facts go to the tracking server.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.training.config import ModelConfig, TrainConfig, as_dict

RUN_RECORD = "run.json"
_REPO_ROOT = Path(__file__).resolve().parents[2]  # workloads/training/lineage.py


def git_revision(repo: Path = _REPO_ROOT) -> str:
    """The checked-out commit (with ``-dirty`` when the tree has changes), or
    ``unknown`` outside a git checkout (e.g. inside the training image)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("GIT_REVISION", "unknown")
    return f"{head}-dirty" if dirty else head


def file_digest(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (shards can be large)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shard_digests(paths: Sequence[Path]) -> dict[str, str]:
    """``{file name: sha256}`` of the dataset shards a run reads."""
    return {path.name: file_digest(path) for path in paths}


def combined_digest(digests: Mapping[str, str]) -> str:
    """One digest naming the whole dataset (order-independent)."""
    joined = "\n".join(f"{name} {value}" for name, value in sorted(digests.items()))
    return hashlib.sha256(joined.encode()).hexdigest()


@dataclass(frozen=True)
class RunRecord:
    """What a checkpoint directory says about the run that wrote it.

    Args:
        config: the run's typed config.
        git_revision: the commit the run was started from.
        tracking_run_id: the MLflow run id, empty when the run was not tracked.
        tracking_uri: the tracking server, empty when the run was not tracked.
    """

    config: TrainConfig
    git_revision: str
    tracking_run_id: str = ""
    tracking_uri: str = ""


def config_from_dict(data: Mapping[str, Any]) -> TrainConfig:
    """A `TrainConfig` from `as_dict` output; fields this version does not know (a
    newer writer) are left out, missing ones take their defaults."""
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    model = ModelConfig(**{k: v for k, v in dict(data["model"]).items() if k in model_fields})
    values = {k: v for k, v in data.items() if k in train_fields and k != "model"}
    return TrainConfig(model=model, **values)


def write_run_record(ckpt_dir: Path, record: RunRecord) -> Path:
    """Write ``run.json`` into ``ckpt_dir`` atomically; returns its path."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / RUN_RECORD
    body = {
        "config": as_dict(record.config),
        "git_revision": record.git_revision,
        "tracking_run_id": record.tracking_run_id,
        "tracking_uri": record.tracking_uri,
    }
    tmp = path.with_name(f".{RUN_RECORD}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_run_record(ckpt_dir: Path) -> RunRecord | None:
    """The run record of ``ckpt_dir``, ``None`` when it has none.

    Raises:
        ValueError: the file exists but is not a run record.
    """
    path = ckpt_dir / RUN_RECORD
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        return RunRecord(
            config=config_from_dict(body["config"]),
            git_revision=str(body.get("git_revision", "unknown")),
            tracking_run_id=str(body.get("tracking_run_id", "")),
            tracking_uri=str(body.get("tracking_uri", "")),
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a readable run record ({err})") from err
