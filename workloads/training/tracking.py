"""Rank 0's MLflow logging, off the step loop.

The step loop only puts plain records on a bounded queue (`queue.Queue.put_nowait`:
no I/O, no waiting); a daemon thread creates the run, logs the parameters, the git
revision, the dataset shard digests and, for a versioned dataset (a data directory with
a `manifest.json`, `workloads.data.manifest`), the dataset as an MLflow dataset input
whose digest is the dataset version, and sends the metrics in batches. A full
queue drops the record (and counts it) rather than block a step. A server that cannot
be reached is one warning on stderr; training carries on untracked.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from workloads.data.manifest import DatasetRef
from workloads.training.config import TrainConfig, as_dict
from workloads.training.lineage import (
    RunRecord,
    combined_digest,
    git_revision,
    shard_digests,
    write_run_record,
)
from workloads.training.metrics import WindowStats

#: Experiment used when ``MLFLOW_EXPERIMENT_NAME`` is not set.
DEFAULT_EXPERIMENT = "training"
#: Records the queue holds before new ones are dropped (a few minutes of steps).
QUEUE_RECORDS = 4096
#: How long `finish` waits for the background thread to send what it holds.
FINISH_TIMEOUT_S = 30.0
#: MLflow's HTTP client retries 7 times with backoff (minutes) by default; a training
#: run only needs to find out that the server is down, so it retries less.
CLIENT_ENV_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
_MAX_PARAM_CHARS = 6000  # MLflow's limit on a parameter value
_STOP = object()


class Tracker(Protocol):
    """What the training loop calls; every call returns at once."""

    def log_step(self, step: int, loss: float, stats: WindowStats) -> None:
        """Queue the step's loss and window figures (MFU only where it applies)."""

    def checkpoint(self, path: Path) -> None:
        """Record the newest checkpoint directory."""

    def finish(self, status: str = "FINISHED") -> None:
        """End the run (``FINISHED``, ``KILLED`` or ``FAILED``)."""


class NullTracker:
    """No tracking (no URI configured, or not rank 0)."""

    def log_step(self, step: int, loss: float, stats: WindowStats) -> None:
        pass

    def checkpoint(self, path: Path) -> None:
        pass

    def finish(self, status: str = "FINISHED") -> None:
        pass


def resolve_tracking_uri(config: TrainConfig) -> str:
    """The config's ``tracking_uri``, else ``MLFLOW_TRACKING_URI``, else empty (off)."""
    return config.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")


def flatten_params(values: Mapping[str, object], prefix: str = "") -> dict[str, str]:
    """Nested config values as MLflow parameters (``model.n_layer`` -> ``"2"``)."""
    flat: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat |= flatten_params(value, f"{name}.")
        else:
            flat[name] = str(value)[:_MAX_PARAM_CHARS]
    return flat


def _warn(message: str) -> None:
    print(f"tracking WARNING: {message}", file=sys.stderr, flush=True)


def _short(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return (lines[-1] if lines else type(err).__name__)[:300]


class MlflowTracker:
    """Logs one training run to an MLflow tracking server from a background thread.

    Args:
        tracking_uri: the server (``http://127.0.0.1:5000``) or any MLflow store URI.
        experiment: experiment name (created when missing).
        run_name: the run's display name.
        params: parameters logged once at the start.
        tags: tags set at the start (``mlflow.source.git.commit`` and others).
        shards: dataset shard files whose digests are logged (hashed on the thread).
        dataset: the versioned dataset the run reads (its manifest verified), logged as
            an MLflow dataset input; ``None`` for shards without a manifest.
        on_started: called on the thread with the run id once the run exists.
        queue_records: bound of the record queue.
    """

    def __init__(
        self,
        tracking_uri: str,
        *,
        experiment: str,
        run_name: str,
        params: Mapping[str, str],
        tags: Mapping[str, str],
        shards: Sequence[Path] = (),
        dataset: DatasetRef | None = None,
        on_started: Callable[[str], None] | None = None,
        queue_records: int = QUEUE_RECORDS,
    ) -> None:
        for key, value in CLIENT_ENV_DEFAULTS.items():
            os.environ.setdefault(key, value)
        self.tracking_uri = tracking_uri
        self.run_id = ""
        self.dropped = 0
        self._experiment = experiment
        self._run_name = run_name
        self._params = dict(params)
        self._tags = dict(tags)
        self._shards = list(shards)
        self._dataset = dataset
        self._on_started = on_started
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_records)
        self._client: Any = None
        self._broken = False
        #: Why the run could not be created ("" while it could, or has not been tried yet).
        self.start_error = ""
        self._warned = False
        self._finished = False
        self._status = "FINISHED"
        #: Set once the run exists or could not be created (`broken` then says which).
        self.started = threading.Event()
        self._thread = threading.Thread(target=self._work, name="mlflow-tracker", daemon=True)
        self._thread.start()
        # A run that dies with an exception still ends as FAILED, not RUNNING forever.
        atexit.register(self.finish, "FAILED")

    # --- the training thread's side: never blocks -----------------------------------

    def log_step(self, step: int, loss: float, stats: WindowStats) -> None:
        values = {
            "loss": loss,
            "step_time_s": stats.step_time_s,
            "tokens_per_s": stats.tokens_per_s,
            "tflops": stats.tflops,
            "data_wait_ratio": stats.data_wait_ratio,
        }
        if stats.mfu is not None:
            values["mfu"] = stats.mfu
        self._put(("metrics", step, int(time.time() * 1000), values))

    def checkpoint(self, path: Path) -> None:
        self._put(("checkpoint", str(path)))

    def _put(self, item: object) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1

    def finish(self, status: str = "FINISHED") -> None:
        if self._finished:
            return
        self._finished = True
        self._status = status
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=FINISH_TIMEOUT_S)
        self._thread.join(FINISH_TIMEOUT_S)
        if self._thread.is_alive():
            _warn(
                f"{self.tracking_uri} did not take the last records within {FINISH_TIMEOUT_S:.0f} s"
            )
        if self.dropped:
            _warn(f"{self.dropped} metric records dropped (the tracking queue was full)")

    # --- the background thread --------------------------------------------------------

    def _fail(self, what: str, err: BaseException) -> None:
        if not self._warned:
            self._warned = True
            _warn(
                f"cannot {what} at {self.tracking_uri} ({_short(err)}); training carries on "
                "untracked. Start the server (`make track`) or fix --tracking-uri."
            )

    def _start(self) -> None:
        # Imported on this thread: only tracked runs pay for mlflow, and not in the loop.
        from mlflow.tracking import MlflowClient  # noqa: PLC0415

        client = MlflowClient(tracking_uri=self.tracking_uri)
        experiment = client.get_experiment_by_name(self._experiment)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else client.create_experiment(self._experiment)
        )
        run = client.create_run(experiment_id, tags=self._tags, run_name=self._run_name)
        self._client, self.run_id = client, run.info.run_id
        self._log_params(self._params)
        if self._on_started is not None:
            self._on_started(self.run_id)

    def _log_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param  # noqa: PLC0415

        items = [Param(key, value) for key, value in params.items()]
        for start in range(0, len(items), 100):  # MLflow takes at most 100 params a batch
            self._client.log_batch(self.run_id, params=items[start : start + 100])

    def _log_lineage(self) -> None:
        if not self._shards:
            return
        digests = shard_digests(self._shards)
        self._log_params(
            {"data.shards": str(len(digests)), "data.shards_sha256": combined_digest(digests)}
        )
        self._client.log_dict(self.run_id, {"train_shards_sha256": digests}, "lineage.json")

    def _log_dataset(self) -> None:
        """The dataset as a run input: the record `mlflow.log_input(dataset, context=
        "training")` makes (an `mlflow.data` dataset turned into a `DatasetInput`), sent
        with this thread's client because the fluent API needs an active run on the
        calling thread. The dataset carries no data, only its name, source and digest:
        the manifest digest, so the run (and every model version registered from it)
        names the dataset version it trained on."""
        if self._dataset is None:
            return
        from mlflow.data.dataset_source_registry import resolve_dataset_source  # noqa: PLC0415
        from mlflow.data.meta_dataset import MetaDataset  # noqa: PLC0415
        from mlflow.entities import DatasetInput, InputTag  # noqa: PLC0415
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT  # noqa: PLC0415

        with warnings.catch_warnings():
            # A local path resolves to the same source type through two registrations.
            warnings.simplefilter("ignore", UserWarning)
            source = resolve_dataset_source(self._dataset.source)
        # MetaDataset leaves Dataset.profile (an @abstractmethod without ABCMeta) to the
        # base class: instantiable, as MLflow's own examples do, but mypy flags it.
        dataset = MetaDataset(  # type: ignore[abstract]
            source=source, name=self._dataset.name, digest=self._dataset.digest
        )
        tags = [InputTag(key=MLFLOW_DATASET_CONTEXT, value="training")]
        self._client.log_inputs(
            self.run_id, datasets=[DatasetInput(dataset=dataset._to_mlflow_entity(), tags=tags)]
        )
        self._log_params({"data.name": self._dataset.name, "data.version": self._dataset.digest})

    def _send(self, items: list[object]) -> None:
        from mlflow.entities import Metric  # noqa: PLC0415

        metrics = []
        for item in items:
            assert isinstance(item, tuple)
            if item[0] == "metrics":
                _, step, timestamp, values = item
                metrics += [Metric(key, value, timestamp, step) for key, value in values.items()]
            elif item[0] == "checkpoint":
                self._client.set_tag(self.run_id, "checkpoint", item[1])
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit
            self._client.log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def _work(self) -> None:
        try:
            self._start()
            self._log_lineage()
            self._log_dataset()
        except Exception as err:  # any client or server failure only disables tracking
            self._broken = True
            self.start_error = _short(err)
            self._fail("start an MLflow run", err)
        finally:
            self.started.set()
        while True:
            items = [self._queue.get()]
            while True:  # send what has piled up as one batch
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(item is _STOP for item in items)
            items = [item for item in items if item is not _STOP]
            if not self._broken and items:
                try:
                    self._send(items)
                except Exception as err:  # a server that went away mid-run
                    self._fail("log metrics", err)
            if stop:
                break
        if not self._broken:
            try:
                self._client.set_terminated(self.run_id, self._status)
            except Exception as err:
                self._fail("end the run", err)


def start_tracking(
    config: TrainConfig,
    *,
    is_main: bool,
    world_size: int,
    num_params: int,
    shards: Sequence[Path],
    dataset: DatasetRef | None = None,
) -> Tracker:
    """The tracker of this process: an `MlflowTracker` on rank 0 when a tracking URI is
    configured, a `NullTracker` otherwise. Rank 0 also writes the run record
    (`workloads.training.lineage`) into the checkpoint directory, tracked or not."""
    if not is_main:
        return NullTracker()
    uri = resolve_tracking_uri(config)
    revision = git_revision()
    ckpt_dir = Path(config.ckpt_dir) if config.ckpt_dir else None

    def record(run_id: str = "") -> None:
        if ckpt_dir is not None:
            try:
                write_run_record(ckpt_dir, RunRecord(config, revision, run_id, uri))
            except OSError as err:
                _warn(f"cannot write the run record into {ckpt_dir} ({err.strerror})")

    record()
    if not uri:
        return NullTracker()
    params = flatten_params(as_dict(config)) | {
        "world_size": str(world_size),
        "num_params": str(num_params),
        "tokens_per_step": str(config.tokens_per_micro_step * config.grad_accum_steps * world_size),
    }
    tags = {"mlflow.source.git.commit": revision, "preset": config.preset}
    if ckpt_dir is not None:
        tags["checkpoint_dir"] = str(ckpt_dir.resolve())
    return MlflowTracker(
        uri,
        experiment=os.environ.get("MLFLOW_EXPERIMENT_NAME", DEFAULT_EXPERIMENT),
        run_name=f"{config.preset}-{time.strftime('%Y%m%d-%H%M%S')}",
        params=params,
        tags=tags,
        shards=shards,
        dataset=dataset,
        on_started=record,
    )
