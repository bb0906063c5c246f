"""The example's steps as the cluster runs them, against the offline store in the stack's
bucket (`workloads.features.offline`):

- `publish`: the generated data written to the offline store (SSE-KMS), where a
  business's own pipelines would write theirs;
- `apply`: the feature repository registered in the cluster's registry (the SQL
  registry of ``feature_store.yaml``) with its sources in the offline store, which the
  materialisation CronJob and the feature server then read;
- `train`: the training job (a Kubeflow Trainer TrainJob on a CPU pool): Feast's
  point-in-time retrieval from the offline store for every label event, LightGBM,
  the ONNX export with its parity check, and the run and model version in MLflow.

The training job reads the offline store only. It needs no registry and no online
store, so no credential of either reaches a team's namespace: it applies the same
definitions (the repository's code, in the image) to a store of its own under its
working directory, Feast's local defaults, whose file offline store reads the sources.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from workloads.features.offline import OfflineStore
from workloads.features.server import UsageError

Say = Callable[[str, str], None]


def publish(
    store: OfflineStore, *, customers: int, weeks: int, seed: int, say: Say
) -> dict[str, str]:
    """Generate the example's data and write it to ``store``."""
    from workloads.features import data  # noqa: PLC0415

    dataset = data.generate(customers=customers, weeks=weeks, seed=seed)
    locations = dataset.publish(store)
    say(
        "publish",
        f"{len(dataset.profiles)} profile rows, {len(dataset.activity)} activity snapshots, "
        f"{len(dataset.labels)} label events -> {store.uri.rstrip('/')}/",
    )
    return locations


def apply(repo_dir: Path, store: OfflineStore, say: Say) -> None:
    """Register the repository's objects, their sources in ``store``, in the store that
    ``repo_dir/feature_store.yaml`` describes."""
    from feast import FeatureStore  # noqa: PLC0415

    from workloads.features import repo  # noqa: PLC0415

    if not (repo_dir / "feature_store.yaml").is_file():
        raise UsageError(f"{repo_dir} has no feature_store.yaml; give the repository with --repo")
    FeatureStore(repo_path=str(repo_dir)).apply(repo.definitions(store.uri, store.s3_endpoint))
    say("apply", f"project {repo.PROJECT}: sources under {store.uri.rstrip('/')}/")


def read_labels(store: OfflineStore, uri: str) -> Any:
    """The label events (customer_id, event_timestamp, label) at ``uri``."""
    import pandas as pd  # noqa: PLC0415

    from workloads.features.repo import JOIN_KEY, LABEL  # noqa: PLC0415

    try:
        labels = pd.read_parquet(uri, storage_options=store.storage_options())
    except FileNotFoundError as err:
        raise UsageError(
            f"no label events at {uri}; write them there first (python -m workloads.features "
            "publish --offline-uri ... writes the example's) or give --labels"
        ) from err
    missing = {JOIN_KEY, "event_timestamp", LABEL} - set(labels.columns)
    if missing:
        raise UsageError(f"{uri} has no column {', '.join(sorted(missing))}")
    return labels


def train(
    store: OfflineStore,
    *,
    labels: Any,
    labels_uri: str,
    workdir: Path,
    tracking_uri: str,
    seed: int,
    threads: int,
    say: Say,
) -> Any:
    """Point-in-time retrieval from ``store`` for ``labels`` (`read_labels` of
    ``labels_uri``), training, export and registration; returns the registered version
    (`workloads.features.track.Registered`)."""
    from feast import FeatureStore  # noqa: PLC0415

    from workloads.features import model, repo, track  # noqa: PLC0415

    (workdir / "repo").mkdir(parents=True, exist_ok=True)
    feast_store = FeatureStore(config=repo.local_config(workdir))
    feast_store.apply(repo.definitions(store.uri, store.s3_endpoint))
    training = model.training_set(feast_store, labels)
    say(
        "train",
        f"point-in-time retrieval from {store.uri.rstrip('/')}/: {len(training.frame)} of "
        f"{training.requested} label events with every feature",
    )
    classifier, metrics = model.train(training, seed=seed, threads=threads)
    onnx_bytes, parity = model.export_onnx(classifier, training.x_valid)
    card = model.model_card(
        metrics=metrics,
        parity=parity,
        data_seed=seed,
        project=repo.PROJECT,
        service=repo.FEATURE_SERVICE,
    )
    export_dir = workdir / "model"
    model.write_export(export_dir, classifier, onnx_bytes, card)
    say(
        "export",
        f"validation AUC {metrics['valid_auc']:.3f}; ONNX parity max |diff| "
        f"{parity.max_abs_diff:.2g} <= {parity.bound:.2g}",
    )
    registered = track.register(
        tracking_uri=tracking_uri,
        workdir=workdir,
        export_dir=export_dir,
        card=card,
        example=training.x_valid[:5],
        params={"seed": seed, "offline_store": store.uri, "labels": labels_uri},
    )
    say("register", f"run {registered.run_id} -> {registered.model_uri} on {tracking_uri}")
    return registered
