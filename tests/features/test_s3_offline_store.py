"""The offline store in the stack's bucket, as the cluster uses it: an S3 server (moto's,
on 127.0.0.1, reached through ``AWS_ENDPOINT_URL`` and the sources' endpoint) with a
bucket encrypted by default with a KMS key, like the stack's data bucket.

- ``publish`` writes the generated data there with SSE-KMS (the given key, or the
  bucket's default);
- Feast's point-in-time retrieval from the S3 sources returns exactly what it returns
  from the same files on local disk, and materialisation from S3 loads each
  customer's newest values into the online store;
- ``train`` (the TrainJob's command) retrieves from S3, trains, exports and registers a
  version in MLflow; a missing label file is one message and exit status 2.

Needs s3fs (Feast's Dask reader opens ``s3://`` through fsspec) and moto's server:
both are in the features environment (pyproject.toml's ``features`` and
``features-test``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pandas as pd
import pytest
import s3fs  # noqa: F401  # required: Feast's Dask reader needs it for s3:// sources
from feast import FeatureStore
from moto.server import ThreadedMotoServer

from tests.features.in_process import features
from workloads.features import data, repo
from workloads.features.offline import OfflineStore

ROOT = Path(__file__).resolve().parents[2]
REGION = "me-central-1"
BUCKET = "gpu-test-data-123456789012"
PREFIX = f"s3://{BUCKET}/features"
CUSTOMERS, WEEKS, SEED = 200, 12, 5


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    """The S3 and KMS server, the bucket (default SSE-KMS under its key), and the
    environment every client here and in the subprocesses reads."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as patch:
        for key in list(os.environ):
            if key.startswith("AWS_"):
                patch.delenv(key)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_CONFIG_FILE", "/nonexistent")
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        patch.setenv("AWS_REGION", REGION)
        patch.setenv("AWS_DEFAULT_REGION", REGION)
        patch.setenv("AWS_ENDPOINT_URL", endpoint)
        patch.setenv("FEAST_USAGE", "False")
        key = boto3.client("kms").create_key(Description="stack storage key")["KeyMetadata"]["Arn"]
        client = boto3.client("s3")
        client.create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
        )
        client.put_bucket_encryption(
            Bucket=BUCKET,
            ServerSideEncryptionConfiguration={
                "Rules": [
                    {
                        "ApplyServerSideEncryptionByDefault": {
                            "SSEAlgorithm": "aws:kms",
                            "KMSMasterKeyID": key,
                        },
                        "BucketKeyEnabled": True,
                    }
                ]
            },
        )
        try:
            yield {"endpoint": endpoint, "key": key, "client": client}
        finally:
            server.stop()


def cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``python -m workloads.features`` in a process of its own (`features` runs the
    commands that succeed in this one)."""
    return subprocess.run(
        [sys.executable, "-m", "workloads.features", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def published(s3: dict[str, Any]) -> OfflineStore:
    """The example's data in the bucket, written by ``publish`` under the stack's key."""
    result = features(
        "publish", "--offline-uri", PREFIX, "--s3-endpoint", s3["endpoint"],
        "--kms-key-id", s3["key"], "--customers", str(CUSTOMERS), "--weeks", str(WEEKS),
        "--seed", str(SEED),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"-> {PREFIX}/" in result.stdout
    return OfflineStore(PREFIX, s3["endpoint"])


def dataset() -> data.Dataset:
    return data.generate(customers=CUSTOMERS, weeks=WEEKS, seed=SEED)


def store_over(workdir: Path, uri: str, endpoint: str = "") -> Any:
    (workdir / "repo").mkdir(parents=True, exist_ok=True)
    store = FeatureStore(config=repo.local_config(workdir))
    store.apply(repo.definitions(uri, endpoint))
    return store


def test_publish_writes_every_source_with_sse_kms(
    s3: dict[str, Any], published: OfflineStore
) -> None:
    for name in (data.PROFILE_FILE, data.ACTIVITY_FILE, data.LABEL_FILE):
        head = s3["client"].head_object(Bucket=BUCKET, Key=f"features/{name}")
        assert head["ServerSideEncryption"] == "aws:kms", name
        assert head["SSEKMSKeyId"] == s3["key"], name
    frame = pd.read_parquet(published.path(data.ACTIVITY_FILE), storage_options={
        "client_kwargs": {"endpoint_url": s3["endpoint"]}})  # fmt: skip
    pd.testing.assert_frame_equal(frame, dataset().activity)


def test_without_a_key_the_buckets_default_sse_kms_applies(s3: dict[str, Any]) -> None:
    store = OfflineStore(f"s3://{BUCKET}/features-default", s3["endpoint"])
    dataset().publish(store)
    head = s3["client"].head_object(Bucket=BUCKET, Key=f"features-default/{data.LABEL_FILE}")
    assert head["ServerSideEncryption"] == "aws:kms"
    assert head["SSEKMSKeyId"] == s3["key"]


def test_the_sources_carry_the_endpoint_only_on_s3(s3: dict[str, Any]) -> None:
    remote = {o.name: o for o in repo.definitions(PREFIX, s3["endpoint"])}
    source = remote[repo.ACTIVITY_VIEW].batch_source
    assert source.path == f"{PREFIX}/{data.ACTIVITY_FILE}"
    assert source.s3_endpoint_override == s3["endpoint"]
    local = {o.name: o for o in repo.definitions("/data/features", s3["endpoint"])}
    assert not local[repo.ACTIVITY_VIEW].batch_source.s3_endpoint_override


def test_point_in_time_retrieval_from_s3_equals_the_local_one(
    s3: dict[str, Any], published: OfflineStore, tmp_path: Path
) -> None:
    local_dir = tmp_path / "data"
    ds = dataset()
    ds.write(local_dir)
    labels = ds.labels
    frames = []
    for name, uri, endpoint in (
        ("s3", PREFIX, s3["endpoint"]),
        ("local", str(local_dir), ""),
    ):
        store = store_over(tmp_path / name, uri, endpoint)
        frame = store.get_historical_features(entity_df=labels, features=repo.feature_refs())
        frames.append(
            frame.to_df()
            .sort_values([repo.JOIN_KEY, "event_timestamp"], ignore_index=True)
            .reindex(columns=[repo.JOIN_KEY, "event_timestamp", *repo.MODEL_FEATURES])
        )
    from_s3, from_disk = frames
    assert len(from_s3) > 100
    assert from_s3[list(repo.MODEL_FEATURES)].notna().all(axis=None)
    pd.testing.assert_frame_equal(from_s3, from_disk)


def test_materialisation_from_s3_loads_the_newest_values(
    s3: dict[str, Any], published: OfflineStore, tmp_path: Path
) -> None:
    store = store_over(tmp_path, PREFIX, s3["endpoint"])
    activity = dataset().activity
    start = activity["event_timestamp"].min().to_pydatetime()
    store.materialize(start_date=start.replace(year=start.year - 1), end_date=datetime.now(UTC))
    newest = activity.sort_values("event_timestamp").groupby(repo.JOIN_KEY).tail(1)
    sample = newest.sample(n=5, random_state=1)
    online = store.get_online_features(
        features=[f"{repo.ACTIVITY_VIEW}:{n}" for n in ("logins_7d", "transactions_30d")],
        entity_rows=[{repo.JOIN_KEY: int(c)} for c in sample[repo.JOIN_KEY]],
    ).to_dict()
    assert online["logins_7d"] == [int(v) for v in sample["logins_7d"]]
    assert online["transactions_30d"] == [int(v) for v in sample["transactions_30d"]]


def test_train_reads_s3_and_registers_a_version(
    s3: dict[str, Any], published: OfflineStore, tmp_path: Path
) -> None:
    from mlflow import MlflowClient  # noqa: PLC0415 - slow import, one test

    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = features(
        "train", "--offline-uri", PREFIX, "--s3-endpoint", s3["endpoint"],
        "--tracking-uri", tracking, "--workdir", str(tmp_path / "train"), "--threads", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"point-in-time retrieval from {PREFIX}/" in result.stdout
    (version,) = MlflowClient(tracking_uri=tracking).search_model_versions("name='smb-churn'")
    run = MlflowClient(tracking_uri=tracking).get_run(version.run_id)
    assert run.data.params["data.offline_store"] == PREFIX
    assert run.data.params["data.labels"] == f"{PREFIX}/{data.LABEL_FILE}"
    assert float(version.tags["valid_auc"]) > 0.5


def test_train_without_labels_says_where_it_looked(s3: dict[str, Any], tmp_path: Path) -> None:
    missing = f"s3://{BUCKET}/nothing-here"
    result = cli(
        "train", "--offline-uri", missing, "--s3-endpoint", s3["endpoint"],
        "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", "--workdir", str(tmp_path / "t"),
    )  # fmt: skip
    assert result.returncode == 2
    assert f"no label events at {missing}/labels.parquet" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
