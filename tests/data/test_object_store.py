"""The data job on an S3 store without Hadoop (`workloads.data.object_store`), against
moto's S3 server on 127.0.0.1 (the session's, tests/data/conftest.py): the executors (Spark's
Python workers, ``local[2]``) fetch the raw objects with boto3 and the dataset is
uploaded SSE-KMS under the key given, with no planted PII, the same version as the same
files give from a local directory; an OUT holding anything is refused before Spark
starts and never written over, even when an object appears while the job runs; a
failed upload leaves no manifest; a missing bucket, no credentials or no region give
one line, not a traceback; and ``spark-submit`` running ``prepare.py`` as a file (as the
driver pod does) uses its session and uploads Spark's event log, encrypted."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pyspark
import pytest

from tests.data.conftest import ISOLATED, REGION
from tests.data.test_prepare import SETTINGS, read_stream
from workloads.data import java, object_store
from workloads.data import prepare as job
from workloads.data.manifest import MANIFEST, REPORT

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "uae-data"
KEY = "arn:aws:kms:me-central-1:123456789012:key/00000000-0000-4000-8000-000000000001"
RAW = f"s3://{BUCKET}/teams/a/raw/corpus/"


def s3() -> Any:
    return boto3.client("s3", region_name=REGION)


@pytest.fixture(scope="module")
def raw(store: dict[str, str], source: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
    """The session's raw files (tests/data/conftest.py) in the bucket under ``RAW``."""
    root, facts = source
    client = s3()
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    for path in sorted(root.rglob("*")):
        client.upload_file(str(path), BUCKET, f"teams/a/raw/corpus/{path.relative_to(root)}")
    # A hidden object is not a source.
    client.put_object(Bucket=BUCKET, Key="teams/a/raw/corpus/.draft/x.txt", Body=b"hidden\n")
    return {"root": root, **facts}


def objects(prefix: str) -> dict[str, dict[str, Any]]:
    client = s3()
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"].removeprefix(prefix): client.head_object(Bucket=BUCKET, Key=o["Key"])
            for o in listed}  # fmt: skip


def download(prefix: str, into: Path) -> Path:
    into.mkdir(parents=True)
    for name in objects(prefix):
        s3().download_file(BUCKET, prefix + name, str(into / name))
    return into


# First in this file: it runs in a JVM of its own, and the session's Spark jobs below
# then run back to back (Spark stops Python workers idle for a minute; new ones
# import Presidio and build its analyzer again).
@pytest.mark.slow
def test_spark_submit_runs_prepare_as_a_file_and_uploads_its_event_log(
    raw: dict[str, Any], store: dict[str, str], tmp_path: Path
) -> None:
    """What the driver pod runs (modules.k8s.spark.spec): spark-submit with
    ``workloads/data/prepare.py`` as the main file (its directory first on sys.path),
    the session spark-submit configured (here local[2]; on the cluster the executor
    pods), event logs to a local directory, uploaded SSE-KMS at the end."""
    events = tmp_path / "events"
    events.mkdir()
    out = f"s3://{BUCKET}/teams/a/datasets/submitted/"
    logs = f"s3://{BUCKET}/spark-events/a/"
    done = subprocess.run(
        [str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--master", "local[2]",
         "--conf", "spark.eventLog.enabled=true",
         "--conf", f"spark.eventLog.dir={events.as_uri()}",
         "--conf", "spark.ui.enabled=false",
         "--conf", "spark.driver.bindAddress=127.0.0.1",
         "--conf", "spark.driver.host=127.0.0.1",
         # As the cluster's sparkConf cuts them for its executors' cores
         # (modules.k8s.spark.spec.spark_conf), not Spark's default of 200 tiny tasks.
         "--conf", "spark.sql.shuffle.partitions=4",
         str(ROOT / "workloads/data/prepare.py"), RAW, "--out", out, "--kms-key", KEY,
         "--event-log-uri", logs, "--scratch", str(tmp_path), "--max-doc-bytes", "4000"],
        env={**os.environ, **store, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable,
             "PYSPARK_DRIVER_PYTHON": sys.executable,
             "JAVA_HOME": str(java.spark_java_home(java.find_java(), tmp_path / "java"))},
        capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "prepare: dataset submitted version" in done.stdout
    report = json.loads(
        s3().get_object(Bucket=BUCKET, Key="teams/a/datasets/submitted/report.json")["Body"].read()
    )
    assert report["run"]["java"] == "(spark-submit)"
    uploaded = objects("spark-events/a/")
    # Spark 4's rolling event log: a directory per application.
    assert uploaded and all(name.startswith("eventlog_v2_local-") for name in uploaded)
    assert any("/events_" in name for name in uploaded)
    for head in uploaded.values():
        assert head["ServerSideEncryption"] == "aws:kms" and head["SSEKMSKeyId"] == KEY


@pytest.fixture(scope="module")
def remote_dataset(
    spark: Any,
    raw: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[job.Outcome, Path]:
    """The job from the bucket to the bucket, with the executors' tokens gathered
    through the driver as on a cluster (executors on other machines). The session's
    Python workers have the store's environment (tests/data/conftest.py)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(job, "executors_share_disk", lambda _spark: False)
        outcome = job.prepare(
            RAW,
            f"s3://{BUCKET}/teams/a/datasets/corpus-v1/",
            SETTINGS,
            name="dataset",
            spark=spark,
            kms_key=KEY,
            scratch=tmp_path_factory.mktemp("scratch"),
        )
    return outcome, download("teams/a/datasets/corpus-v1/", tmp_path_factory.mktemp("dl") / "d")


def test_the_dataset_is_in_the_bucket_encrypted_under_the_key(
    remote_dataset: tuple[job.Outcome, Path], raw: dict[str, Any]
) -> None:
    outcome, local = remote_dataset
    written = objects("teams/a/datasets/corpus-v1/")
    manifest = json.loads((local / MANIFEST).read_text())
    assert set(written) == {MANIFEST, REPORT} | {s["name"] for s in manifest["shards"]}
    for name, head in written.items():
        assert head["ServerSideEncryption"] == "aws:kms", name
        assert head["SSEKMSKeyId"] == KEY, name
    text = read_stream(local).decode("utf-8")
    for _, value in raw["values"]:
        assert value not in text, f"planted value {value!r} reached the shards"
    assert "<EMIRATES_ID>" in text and "<PHONE_NUMBER>" in text
    assert manifest["digest"] == outcome.digest
    assert json.loads((local / REPORT).read_text())["source_root"] == RAW


def test_the_same_files_give_the_same_version_as_from_a_directory(
    remote_dataset: tuple[job.Outcome, Path], raw: dict[str, Any], dataset: Path
) -> None:
    """Read by the executors from the bucket or by Spark's text source from a
    directory (the session's `dataset` of the same files): the same sources (paths,
    sizes, SHA-256), stream, report and version."""
    outcome, local = remote_dataset
    here = json.loads((dataset / MANIFEST).read_text())
    there = json.loads((local / MANIFEST).read_text())
    assert [s["path"] for s in there["sources"]] == ["notes.txt", "records.jsonl"]
    assert there["sources"] == here["sources"]
    assert read_stream(local) == read_stream(dataset)
    report_here = json.loads((dataset / REPORT).read_text())
    assert outcome.report["validation"] == report_here["validation"]
    assert outcome.digest == here["digest"]


@pytest.mark.parametrize(
    ("planted", "message"),
    [
        ({"notes.md": b"a colleague's notes"}, "holds objects this job did not write (notes.md)"),
        ({MANIFEST: b"{}", "train_000000.bin": b"x"}, "holds a dataset already"),
        ({"train_000000.bin": b"x"}, "holds shards without a manifest"),
    ],
    ids=["foreign", "dataset", "failed-run"],
)
def test_an_out_holding_anything_is_refused_and_left_alone(
    raw: dict[str, Any],
    planted: dict[str, bytes],
    message: str,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    prefix = f"teams/a/datasets/{request.node.callspec.id}/"
    for name, body in planted.items():
        s3().put_object(Bucket=BUCKET, Key=prefix + name, Body=body)
    before = {n: h["ETag"] for n, h in objects(prefix).items()}
    status = job.main([RAW, "--out", f"s3://{BUCKET}/{prefix}", "--kms-key", KEY])
    err = capsys.readouterr().err
    assert status == job.EXIT_USER_ERROR
    assert message in err and "Nothing was changed" in err
    assert "Traceback" not in err and len(err.splitlines()) <= 3
    assert {n: h["ETag"] for n, h in objects(prefix).items()} == before


def test_an_object_that_appears_meanwhile_is_not_replaced(
    raw: dict[str, Any], tmp_path: Path
) -> None:
    """The conditional write (If-None-Match: *) refuses what the check could not see."""
    out = object_store.parse(f"s3://{BUCKET}/teams/a/datasets/race/")
    s3().put_object(Bucket=BUCKET, Key=out.key("train_000000.bin"), Body=b"theirs")
    (tmp_path / "train_000000.bin").write_bytes(b"ours")
    with pytest.raises(object_store.StoreError, match="appeared while the job ran"):
        object_store.put_file(object_store.client(), tmp_path / "train_000000.bin", out,
                              "train_000000.bin", KEY)  # fmt: skip
    body = s3().get_object(Bucket=BUCKET, Key=out.key("train_000000.bin"))["Body"].read()
    assert body == b"theirs"


def test_a_failed_upload_leaves_no_manifest(
    raw: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = object_store.parse(f"s3://{BUCKET}/teams/a/datasets/half/")
    for name in ("train_000000.bin", "val_000000.bin", REPORT, MANIFEST):
        (tmp_path / name).write_bytes(b"x")
    real = object_store.put_file

    def fail_on_report(s3_: Any, path: Path, where: Any, name: str, key: str) -> None:
        if name == REPORT:
            raise object_store.StoreError("the network went away")
        real(s3_, path, where, name, key)

    monkeypatch.setattr(object_store, "put_file", fail_on_report)
    with pytest.raises(object_store.StoreError):
        object_store.upload_dataset(object_store.client(), tmp_path, out, KEY,
                                    ["train_000000.bin", "val_000000.bin"])  # fmt: skip
    assert set(objects(out.prefix)) == {"train_000000.bin", "val_000000.bin"}


@pytest.mark.parametrize(
    ("source_uri", "env", "message"),
    [
        ("s3://no-such-bucket/raw/", {}, "s3://no-such-bucket/raw/: the bucket does not exist"),
        (RAW, {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}, "no credentials for"),
        (RAW, {"AWS_REGION": None, "AWS_DEFAULT_REGION": None}, "no region for the object store"),
    ],
    ids=["missing-bucket", "no-credentials", "no-region"],
)
def test_store_errors_are_one_line(  # noqa: PLR0917
    raw: dict[str, Any],
    source_uri: str,
    env: dict[str, str | None],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
    status = job.main([source_uri, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == job.EXIT_USER_ERROR, err
    assert message in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([RAW, "--out", f"s3://{BUCKET}/teams/a/datasets/x/"], "needs --kms-key"),
        ([RAW, "--out", f"s3://{BUCKET}/teams/a/raw/corpus/out/", "--kms-key", KEY], "overlap"),
        ([RAW, "--out", "s3://b/a/../c/", "--kms-key", KEY], "is not s3://<bucket>/<prefix>/"),
    ],
    ids=["no-key", "out-inside-source", "dot-dot"],
)
def test_bad_store_arguments(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert job.main(args) == job.EXIT_USER_ERROR
    assert message in capsys.readouterr().err


def test_lines_are_cut_as_sparks_text_source_cuts_them() -> None:
    """\\n, \\r and \\r\\n end a line, across any chunk boundary; no line after a final
    terminator; blank lines kept (the split of bytes.splitlines, which is Hadoop's)."""
    rng = random.Random(5)
    pieces = [b"a", b"bc", b"\n", b"\r", b"\r\n", b"", b"\xff\x00"]
    for _ in range(300):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        size = rng.randint(1, 7)
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        assert list(object_store.split_lines(chunks)) == data.splitlines(), data


def put_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, endpoint: str | None
) -> dict[str, str]:
    """The headers of the job's PUT (`object_store.put_file`) as botocore would send
    them over HTTPS, recorded by a ``before-send`` hook that answers in S3's place (no
    request leaves the process)."""
    from botocore.awsrequest import AWSResponse  # noqa: PLC0415

    for name, value in {**ISOLATED, "AWS_REGION": REGION, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    for name in object_store.ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    if endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    sent: list[Any] = []

    class Empty:
        def stream(self) -> Iterator[bytes]:
            yield b""

    def answer(request: Any, **_: Any) -> AWSResponse:
        sent.append(request.headers)
        return AWSResponse(request.url, 200, {"ETag": '"e"'}, Empty())

    client = object_store.client()
    client.meta.events.register("before-send.s3.PutObject", answer)
    (tmp_path / "shard.bin").write_bytes(b"x" * 1000)
    object_store.put_file(client, tmp_path / "shard.bin", object_store.parse(RAW), "shard.bin",
                          KEY)  # fmt: skip
    (headers,) = sent
    return {k.lower(): v.decode() if isinstance(v, bytes) else str(v) for k, v in headers.items()}


def test_a_site_store_gets_a_plain_put(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Older Ceph RGW and MinIO refuse aws-chunked uploads with a checksum trailer, the
    default of botocore 1.36 and later over HTTPS: the job's PUT to a site's store is a
    plain one with its length. On AWS the CRC32 trailer stays (S3 checks it)."""
    sent = put_headers(tmp_path, monkeypatch, "https://s3.site.example")
    assert sent["content-length"] == "1000"
    assert "transfer-encoding" not in sent
    assert "aws-chunked" not in sent.get("content-encoding", "")
    assert "STREAMING" not in sent.get("x-amz-content-sha256", "")
    assert not [k for k in sent if k.startswith(("x-amz-checksum-", "x-amz-trailer"))]
    on_aws = put_headers(tmp_path, monkeypatch, None)
    assert on_aws.get("x-amz-trailer") == "x-amz-checksum-crc32"


def test_an_object_changed_after_the_listing_is_refused_and_nothing_is_written(
    spark: Any,
    raw: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The executors fetch each object at the ETag the driver listed (If-Match): one
    that changed in between (or before a fetch Spark repeats for a lost executor) stops
    the job with one line, and no dataset is written from a mix of versions."""
    prefix = "teams/a/raw/changing/"
    for path in sorted(p for p in raw["root"].rglob("*") if p.is_file()):
        s3().upload_file(str(path), BUCKET, f"{prefix}{path.relative_to(raw['root'])}")
    real = job.list_remote_sources

    def list_then_change(client: Any, root: Any) -> Any:
        listed = real(client, root)
        s3().put_object(Bucket=BUCKET, Key=f"{prefix}notes.txt", Body=b"another version\n")
        return listed

    monkeypatch.setattr(job, "list_remote_sources", list_then_change)
    monkeypatch.setattr(job, "executors_share_disk", lambda _spark: False)
    with pytest.raises(object_store.StoreError) as refused:
        job.prepare(f"s3://{BUCKET}/{prefix}", tmp_path / "out", SETTINGS, spark=spark)
    message = str(refused.value)
    assert message.startswith(f"s3://{BUCKET}/{prefix}notes.txt is no longer the object listed")
    assert object_store.SOURCE_CHANGED in message and "\n" not in message
    assert "Traceback" not in message
    assert not (tmp_path / "out").exists()


def test_a_missing_scratch_directory_is_one_line(
    raw: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--scratch names an existing directory (its help says so); a missing one stops
    the job before it reads anything, in one line."""
    out = f"s3://{BUCKET}/teams/a/datasets/no-scratch/"
    status = job.main([RAW, "--out", out, "--kms-key", KEY, "--scratch", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert status == job.EXIT_USER_ERROR, err
    assert err == f"prepare: --scratch {tmp_path / 'nope'} is not an existing directory\n"
    assert not objects("teams/a/datasets/no-scratch/")


def test_tokens_through_the_driver_are_the_tokens_written_in_place(tmp_path: Path) -> None:
    """`_token_batches` (executors on other machines, chunked rows through the driver)
    and `_write_batches` (executors on the driver's disk) give the same bytes and the
    same figures for the same partition, whatever the chunk size."""
    import pyarrow as pa  # noqa: PLC0415

    hits_type = pa.map_(pa.string(), pa.int64())
    batches = [
        pa.RecordBatch.from_pydict(
            {"text": ["سلام x", "b" * 9], "hits": [[("PHONE_NUMBER", 2)], None]},
            pa.schema([("text", pa.string()), ("hits", hits_type)]),
        ),
        pa.RecordBatch.from_pydict(
            {"text": ["c"], "hits": [[("PHONE_NUMBER", 1), ("EMAIL_ADDRESS", 1)]]},
            pa.schema([("text", pa.string()), ("hits", hits_type)]),
        ),
    ]
    (written,) = [b.to_pylist()[0] for b in job._write_batches(batches, str(tmp_path))]
    for chunk_bytes in (1, 7, 32 << 20):
        rows = [r for b in job._token_batches(batches, chunk_bytes) for r in b.to_pylist()]
        assert b"".join(r["data"] for r in rows) == (tmp_path / "part-000000.u16").read_bytes()
        assert all(len(r["data"]) <= chunk_bytes for r in rows)
        *pieces, last = rows
        assert last["last"] and not any(r["last"] for r in pieces)
        assert {k: last[k] for k in written} == written
    assert written["documents"] == 3 and written["with_pii"] == 2
    assert json.loads(written["hits"]) == {"PHONE_NUMBER": 3, "EMAIL_ADDRESS": 1}
