"""Raw text to a versioned, validated, anonymised token dataset, as one PySpark job.

``make data SOURCE=<dir> OUT=<dir>`` runs it in Spark's local mode::

    python -m workloads.data.prepare SOURCE --out OUT [--no-anonymise] [--near-dup 0.8]

SOURCE and OUT may also be ``s3://<bucket>/<prefix>/`` (`workloads.data.object_store`,
boto3, no Hadoop S3A): the driver lists the raw objects and the executors fetch them;
the dataset is uploaded with SSE-KMS under ``--kms-key``, manifest last, never over an
existing object. Run by ``spark-submit`` (the Spark Operator's driver pod), the job uses
the session spark-submit configured (its master, executors and event logs) instead of
starting a local one; ``--event-log-uri`` then uploads Spark's event log from the local
``spark.eventLog.dir`` to the store when the session ends, from a ``finally`` (an
error or a refused dataset included; a driver killed outright - OOM kill, eviction,
SIGKILL, a lost node - uploads nothing, and its local log goes with it).

Stages (each a Spark stage; Python code runs in Spark's Python workers):

1. read every ``.txt`` (one document per line) and ``.jsonl`` (one per ``text`` field)
   under SOURCE as raw bytes, each line keeping its file and position;
2. per record: strict UTF-8 decoding, JSON parsing, size check, cleaning (NFC, control
   characters, whitespace) - `workloads.data.clean`;
3. validation of the raw records against the limits (pandera, `workloads.data.validate`):
   a dataset that fails is refused with a report (rule, count, examples by position) and
   nothing is written;
4. exact deduplication (one document per cleaned-text hash, the first by position) and,
   with ``--near-dup``, near-duplicate removal (MinHash LSH over word 3-grams);
5. PII anonymisation with Presidio in ``mapPartitions`` (one analyzer per Python worker
   process, reused across its partitions) - `workloads.data.pii`; ``--no-anonymise``
   turns it off and is recorded in the manifest and the report;
6. tokenisation into the trainer's shard format (byte-level, `workloads.data.shard_format`),
   documents in source order, each followed by a blank line; the workers write the token
   stream in parallel and the driver cuts it into ``train_*.bin``/``val_*.bin`` shards;
7. the shards checked (pandera), then ``manifest.json`` (per-shard SHA-256, tokens, size;
   the sources with sizes and SHA-256; the pipeline and its settings; the digest, which is
   the dataset version) and ``report.json`` (validation and PII counts, no values).

OUT is written as a temporary sibling directory and renamed into place at the end. OUT
must be absent, empty, or an earlier dataset of this job (its manifest, report and listed
shards and nothing else); anything else is refused and left untouched. An ``s3://`` OUT
must hold no object at all (a dataset in the store is written once).

One run at a time writes an OUT: a second run to the same OUT is refused at once (a lock
beside it, ``<OUT>.lock``: `workloads.output_lock`), and a lock left by a run that
ended without releasing it is taken over, saying so.

What Spark's JVM, its Python workers and Py4J print (a Ctrl-C or a failed task prints
hundreds of lines of Java and Python stack traces) goes to a log file in the system's
temporary directory (or ``--spark-log``), not the terminal; the one line the job prints
on a failure or an interrupt names it. Ctrl-C stops the job: Spark is stopped, the staging directory
removed, OUT left as it was, and the job exits 130.

Exit status: 0 dataset written; 1 dataset refused by validation (nothing written); 2 bad
arguments, SOURCE, OUT (another run writing it, not writable) or environment (no Java, a
missing NER model); 3 the Spark job failed (OUT unchanged); 130 interrupted (OUT
unchanged).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlparse

from workloads import output_lock
from workloads.data import clean, object_store, pii
from workloads.data.java import JavaError, JavaRuntime, find_java, spark_java_home
from workloads.data.manifest import (
    REPORT,
    ManifestError,
    describe_shards,
    file_sha256,
    foreign_entries,
    load_manifest,
    write_json_atomic,
    write_manifest,
)
from workloads.data.object_store import S3Location, StoreError
from workloads.data.shard_format import (
    BYTE_VOCAB_SIZE,
    DEFAULT_SHARD_TOKENS,
    DEFAULT_VAL_FRACTION,
    pack_header,
    shard_name,
)
from workloads.data.validate import (
    DUPLICATES,
    Profile,
    RuleResult,
    check_profile,
    check_shards,
    format_rules,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PIPELINE_NAME = "workloads.data.prepare"
#: Bump when the job's output for the same input and settings changes.
PIPELINE_VERSION = "1"
SOURCE_KINDS = {".txt": "txt", ".jsonl": "jsonl"}
_REPO_ROOT = Path(__file__).resolve().parents[2]
_LOG4J = Path(__file__).resolve().with_name("log4j2.properties")

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USER_ERROR = 2
EXIT_JOB_FAILED = 3
#: Interrupted (Ctrl-C): 128 + SIGINT, as a shell reports a command SIGINT stopped.
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """Something the user must fix (arguments, SOURCE, OUT, environment)."""


class DatasetRefusedError(Exception):
    """The raw records failed validation; ``report`` says why."""

    def __init__(self, text: str, report: Mapping[str, Any]) -> None:
        super().__init__(text)
        self.report = dict(report)


@dataclass(frozen=True)
class Settings:
    """The job's settings, recorded in the manifest (they are part of the version)."""

    anonymise: bool = True
    ner_model: str | None = None
    near_dup: float | None = None
    max_doc_bytes: int = 1 << 20
    max_bad_fraction: float = 0.01
    max_duplicate_rate: float = 0.3
    shard_tokens: int = DEFAULT_SHARD_TOKENS
    val_fraction: float = DEFAULT_VAL_FRACTION

    def problems(self) -> list[str]:
        found = []
        if self.near_dup is not None and not 0.0 < self.near_dup < 1.0:
            found.append(f"--near-dup must be a Jaccard similarity in (0, 1), got {self.near_dup}")
        if self.max_doc_bytes < 1:
            found.append(f"--max-doc-bytes must be positive, got {self.max_doc_bytes}")
        for name, value in (
            ("--max-bad-fraction", self.max_bad_fraction),
            ("--max-duplicate-rate", self.max_duplicate_rate),
        ):
            if not 0.0 <= value <= 1.0:
                found.append(f"{name} must be in [0, 1], got {value}")
        if self.shard_tokens < 2:
            found.append(f"--shard-tokens must be at least 2, got {self.shard_tokens}")
        if not 0.0 <= self.val_fraction < 1.0:
            found.append(f"--val-fraction must be in [0, 1), got {self.val_fraction}")
        if self.ner_model and not self.anonymise:
            found.append("--ner-model has no effect with --no-anonymise; give one or the other")
        return found

    def record(self) -> dict[str, Any]:
        entities = pii.PiiSettings(ner_model=self.ner_model).entities if self.anonymise else ()
        return asdict(self) | {
            "pii_entities": list(entities),
            "tokenizer": {"kind": "utf-8 bytes", "vocab_size": BYTE_VOCAB_SIZE},
            "document_separator": clean.DOCUMENT_SEPARATOR,
        }


@dataclass(frozen=True)
class Source:
    """One input file: its path relative to SOURCE, kind, size and SHA-256."""

    path: Path
    relative: str
    kind: str
    bytes: int
    sha256: str


def list_sources(root: Path) -> list[Source]:
    """Every ``.txt``/``.jsonl`` file under ``root`` (or ``root`` itself), in path order,
    hidden files and directories left out."""
    if not root.exists():
        raise UserError(f"SOURCE {root} does not exist; give a directory of .txt/.jsonl files")
    if root.is_file():
        files, base = [root], root.parent
    else:
        base = root
        files = sorted(
            path
            for path in root.rglob("*")
            if path.is_file()
            and path.suffix in SOURCE_KINDS
            and not any(part.startswith(".") for part in path.relative_to(root).parts)
        )
    if not files or any(path.suffix not in SOURCE_KINDS for path in files):
        raise UserError(
            f"SOURCE {root} holds no .txt or .jsonl file; the job reads .txt files (one "
            "document per line) and .jsonl files (one document per 'text' field)"
        )
    sources = []
    for path in files:
        try:
            sources.append(
                Source(
                    path=path.resolve(),
                    relative=path.relative_to(base).as_posix(),
                    kind=SOURCE_KINDS[path.suffix],
                    bytes=path.stat().st_size,
                    sha256=file_sha256(path),
                )
            )
        except OSError as err:
            raise UserError(f"cannot read {path} ({err.strerror})") from err
    return sources


def check_out(out: Path, sources: Sequence[Source]) -> None:
    """Refuse an OUT this job may not replace; touches nothing."""
    if out.exists() and not out.is_dir():
        raise UserError(f"OUT {out} is a file; give a directory (absent, empty or a dataset)")
    if out.name in ("", ".."):  # the dataset is renamed into OUT's place, beside it
        raise UserError(f"OUT {out} names no folder of its own; give one, e.g. build/data/name")
    resolved = out.resolve()
    for source in sources:
        if resolved == source.path or resolved in source.path.parents:
            raise UserError(f"OUT {out} holds the source {source.relative}; choose another OUT")
    if not out.is_dir():
        return
    # The new dataset is renamed into OUT's place and the earlier one deleted: found
    # out now, not after the whole job.
    if not os.access(out, os.W_OK | os.X_OK):
        raise UserError(
            f"OUT {out} is not writable; make it writable or choose another OUT. Nothing "
            "was changed."
        )
    if os.path.ismount(out):
        raise UserError(
            f"OUT {out} is a mount point, which cannot be replaced; give a folder inside it"
        )
    foreign = foreign_entries(out)
    if not foreign:
        return
    shown = ", ".join(foreign[:6]) + (f" and {len(foreign) - 6} more" if len(foreign) > 6 else "")
    try:
        has_manifest = load_manifest(out) is not None
    except ManifestError:
        has_manifest = False
    if has_manifest:
        raise UserError(
            f"OUT {out} holds a dataset and files this job did not write ({shown}); move "
            "them out or choose another OUT. Nothing was changed."
        )
    raise UserError(
        f"OUT {out} is not empty and is not a dataset of this job ({shown}); choose a new or "
        "empty directory, or an earlier dataset. Nothing was changed."
    )


@dataclass(frozen=True)
class RemoteSource:
    """One raw object under an ``s3://`` SOURCE: its key, its path relative to SOURCE,
    kind, size and ETag (the version the executors must read; its SHA-256 comes from the
    executor that reads it)."""

    key: str
    relative: str
    kind: str
    bytes: int
    etag: str


def list_remote_sources(s3: Any, root: S3Location) -> list[RemoteSource]:
    """Every ``.txt``/``.jsonl`` object under ``root``, in key order, hidden ones (a
    segment starting with ``.``) left out."""
    found = []
    for stored in object_store.list_objects(s3, root):
        relative = stored.key.removeprefix(root.prefix)
        suffix = os.path.splitext(relative)[1]
        if suffix in SOURCE_KINDS and not any(p.startswith(".") for p in relative.split("/")):
            found.append(
                RemoteSource(stored.key, relative, SOURCE_KINDS[suffix], stored.size, stored.etag)
            )
    if not found:
        raise UserError(
            f"SOURCE {root} holds no .txt or .jsonl object; the job reads .txt files (one "
            "document per line) and .jsonl files (one document per 'text' field)"
        )
    return found


def _fetch_objects(keys: Iterable[tuple[str, str, str, str]], bucket: str) -> Iterator[Any]:
    """Stage 1 for an ``s3://`` SOURCE, on an executor: each object of the partition
    fetched once (boto3, in this Python worker) at the ETag the driver listed, one row
    per line as Spark's text source gives them (file URI, split start 0, line index,
    kind, raw bytes), then one row with its SHA-256 (line index -1, kind ``sha256``, the
    hex digest as the bytes)."""
    s3 = object_store.client()
    for key, etag, kind, uri in keys:
        digest = object_store.sha256()
        lines = object_store.read_object(s3, bucket, key, etag, digest)
        for index, line in enumerate(lines):
            yield uri, 0, index, kind, line
        yield uri, 0, -1, "sha256", digest.hexdigest().encode("ascii")


def read_remote(
    spark: SparkSession, root: S3Location, sources: Sequence[RemoteSource]
) -> tuple[DataFrame, DataFrame, dict[str, str]]:
    """Stage 1 for an ``s3://`` SOURCE: the key list spread over the executors, which
    fetch the objects (`_fetch_objects`). Returns the persisted frame of everything
    fetched (unpersist it when done), the records (as `read_records` gives them) and
    each object's SHA-256 by its URI; the objects are read once."""
    from pyspark import StorageLevel  # noqa: PLC0415
    from pyspark.sql import functions as sf  # noqa: PLC0415

    keys = [(s.key, s.etag, s.kind, root.uri(quote(s.key))) for s in sources]
    slices = max(1, min(len(keys), 4 * spark.sparkContext.defaultParallelism))
    fetched = spark.sparkContext.parallelize(keys, slices).mapPartitions(
        functools.partial(_fetch_objects, bucket=root.bucket)
    )
    frame = spark.createDataFrame(
        fetched, "file string, block long, row long, kind string, raw binary", verifySchema=False
    ).persist(StorageLevel.MEMORY_AND_DISK)
    digests = {
        r["file"]: bytes(r["raw"]).decode("ascii")
        for r in frame.filter(sf.col("row") < 0).select("file", "raw").collect()
    }
    return frame, frame.filter(sf.col("row") >= 0), digests


# --- the Spark side ---------------------------------------------------------------


def start_spark(
    java: JavaRuntime,
    workers: int,
    driver_memory: str,
    local_dir: Path,
    event_log_dir: Path | None = None,
    *,
    log: SparkLog | None = None,
) -> Any:
    """A local-mode SparkSession on ``java``, listening on loopback only, no UI;
    ``local_dir`` holds Spark's scratch space (and a ``java`` wrapper where one is
    needed, `workloads.data.java.spark_java_home`); Spark's event log goes to
    ``event_log_dir`` where one is given; the JVM's output (and its Python workers')
    to ``log`` where one is given, else to this process's stdout and stderr. The
    caller's Ctrl-C handler stays in place (PySpark's own would replace it)."""
    local_dir.mkdir(parents=True, exist_ok=True)
    os.environ["JAVA_HOME"] = str(spark_java_home(java, local_dir))
    # The Python workers run this interpreter and import this package.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), path) if p)
    from pyspark.sql import SparkSession  # noqa: PLC0415

    builder = (
        SparkSession.builder.master(f"local[{workers}]")
        .appName(PIPELINE_NAME)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", driver_memory)
        .config("spark.local.dir", str(local_dir))
        .config("spark.sql.shuffle.partitions", str(max(2, 2 * workers)))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{_LOG4J}")
    )
    if event_log_dir is not None:
        event_log_dir.mkdir(parents=True, exist_ok=True)
        builder = builder.config("spark.eventLog.enabled", "true").config(
            "spark.eventLog.dir", event_log_dir.as_uri()
        )
    handler = signal.getsignal(signal.SIGINT) if _main_thread() else None
    with log.jvm_output() if log is not None else contextlib.nullcontext():
        spark = builder.getOrCreate()
    if handler is not None:
        # SparkContext installs a handler that cancels every job and raises
        # KeyboardInterrupt; the caller's (`Interrupts`) also ignores a second Ctrl-C
        # while the job cleans up, and stopping the session cancels the jobs anyway.
        signal.signal(signal.SIGINT, handler)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class SparkLog:
    """Where Spark's own output goes instead of the terminal: the JVM's stdout and
    stderr (its log4j lines, and the Python workers' output it relays) and the driver's
    Python logging and warnings (Py4J logs an interrupted call with its traceback). A
    Ctrl-C or a failed task makes them print hundreds of lines of Java and Python stack
    traces that say nothing a user can act on; the job's one line names this file.

    Args:
        path: the file (appended to), made when something is first written to it;
            default ``prepare-<UTC time>-<pid>.log`` in the system's temporary directory.
    """

    def __init__(self, path: Path | None = None) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        default = Path(tempfile.gettempdir()) / f"prepare-{stamp}-{os.getpid()}.log"
        self.path = path if path is not None else default
        self._existed = self.path.exists()  # a file named by the user is never removed

    @contextlib.contextmanager
    def jvm_output(self) -> Iterator[None]:
        """The processes started in the block (the JVM, and through it Spark's Python
        workers) write their stdout and stderr to the log for as long as they live; this
        process's own are back on the terminal after the block."""
        sys.stdout.flush()
        sys.stderr.flush()
        log = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        saved = (os.dup(1), os.dup(2))
        try:
            os.dup2(log, 1)
            os.dup2(log, 2)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (*saved, log):
                os.close(fd)

    @contextlib.contextmanager
    def python_logging(self) -> Iterator[None]:
        """Python's logging and warnings to the log for the block."""
        handler = logging.FileHandler(self.path, encoding="utf-8", delay=True)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        logging.captureWarnings(True)
        try:
            yield
        finally:
            logging.captureWarnings(False)
            root.removeHandler(handler)
            handler.close()

    def written(self) -> bool:
        try:
            return self.path.stat().st_size > 0
        except OSError:
            return False

    def finish(self, keep: bool) -> str:
        """`` (Spark's own output: <path>)`` for the job's last line when ``keep`` (a
        failed or interrupted job) and something was written; otherwise "", and the log
        is removed (Spark's start-up notices are all a job that went well leaves in it),
        unless the user named it."""
        if keep and self.written():
            return f" (Spark's own output: {self.path})"
        if not self._existed:
            with contextlib.suppress(OSError):
                self.path.unlink()
        return ""


class Interrupts:
    """Ctrl-C (SIGINT) in the block: the first raises KeyboardInterrupt and records it
    (`seen`), later ones are ignored so that stopping Spark and removing the staging
    directory run to their end. The handler in place before is put back after."""

    def __init__(self) -> None:
        self.seen = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.seen = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    def __enter__(self) -> Interrupts:
        if _main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def under_spark_submit() -> bool:
    """Whether ``spark-submit`` started this process (it hands its JVM's gateway over)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def submitted_session() -> Any:
    """The session ``spark-submit`` configured (master, executors, event logs): on the
    cluster the Spark Operator's driver pod, whose executors are pods of their own."""
    from pyspark.sql import SparkSession  # noqa: PLC0415

    spark = SparkSession.builder.appName(PIPELINE_NAME).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def event_log_directory(spark: SparkSession) -> Path:
    """The local directory of the session's event log, for `--event-log-uri`.

    Raises:
        UserError: event logs are off, or go somewhere other than the local disk.
    """
    conf = spark.sparkContext.getConf()
    directory = conf.get("spark.eventLog.dir", "")
    if conf.get("spark.eventLog.enabled", "false").lower() != "true" or not directory:
        raise UserError(
            "--event-log-uri needs Spark's event log on: spark.eventLog.enabled=true and "
            "spark.eventLog.dir a local directory"
        )
    parsed = urlparse(directory)
    if parsed.scheme not in ("", "file"):
        raise UserError(
            f"--event-log-uri uploads the event log from the local disk, but "
            f"spark.eventLog.dir is {directory}"
        )
    return Path(unquote(parsed.path))


#: The parsed records (Arrow batches between the JVM and the Python workers).
PARSED_SCHEMA = (
    "file string, block long, row long, status string, text string, raw_bytes long, hash string"
)
PART_SCHEMA = "part long, tokens long, documents long, with_pii long, hits string"


def _parse_batches(batches: Iterable[Any], max_doc_bytes: int) -> Iterator[Any]:
    """Stage 2 over Arrow batches of raw lines (`read_records`)."""
    import pyarrow as pa  # noqa: PLC0415

    names = [field.split()[0] for field in PARSED_SCHEMA.split(", ")]
    for batch in batches:
        columns = batch.to_pydict()
        out: dict[str, list[Any]] = {name: [] for name in names}
        for file, block, row, kind, raw in zip(
            columns["file"],
            columns["block"],
            columns["row"],
            columns["kind"],
            columns["raw"],
            strict=True,
        ):
            record = clean.parse_record(kind, raw, max_doc_bytes)
            for name, value in zip(
                names,
                (file, block, row, record.status, record.text, record.raw_bytes, record.hash),
                strict=True,
            ):
                out[name].append(value)
        yield pa.RecordBatch.from_pydict(out)


def _anonymise_partition(
    rows: Iterable[Any], settings: pii.PiiSettings
) -> Iterator[tuple[str, int, int, str, dict[str, int]]]:
    """Stage 5 over one partition: Presidio's analyzer is built (or reused) once for
    the partition, not per document."""
    keyed = (((file, block, row), text) for file, block, row, text in rows)
    for (file, block, row), text, hits in pii.anonymise(keyed, settings):
        yield file, block, row, text, hits


def _partition_index() -> int:
    """The Spark partition this Python worker is writing (0 outside a task)."""
    from pyspark import TaskContext  # noqa: PLC0415

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def _encoded_documents(
    batches: Iterable[Any], counts: Counter[str], hits: Counter[str]
) -> Iterator[bytes]:
    """A partition's documents (in order), each followed by the document separator, as
    little-endian uint16 byte tokens, one piece per Arrow batch; ``counts`` gains the
    ``tokens``, ``documents`` and documents ``with_pii``, ``hits`` the PII hits by type
    (both complete once the pieces are exhausted). The one encoding `_write_batches`
    and `_token_batches` share."""
    import numpy as np  # noqa: PLC0415

    separator = clean.DOCUMENT_SEPARATOR
    for batch in batches:
        texts = batch.column("text").to_pylist()
        data = "".join(text + separator for text in texts).encode("utf-8")
        yield np.frombuffer(data, dtype=np.uint8).astype("<u2").tobytes()
        counts["tokens"] += len(data)
        counts["documents"] += len(texts)
        for found in batch.column("hits").to_pylist():
            if found:
                counts["with_pii"] += 1
                hits.update(dict(found))


def _figures_row(index: int, counts: Counter[str], hits: Counter[str]) -> dict[str, list[Any]]:
    """A partition's figures: its index, tokens, documents, documents with PII and the
    hits by type (JSON)."""
    return {
        "part": [index],
        "tokens": [counts["tokens"]],
        "documents": [counts["documents"]],
        "with_pii": [counts["with_pii"]],
        "hits": [json.dumps(hits)],
    }


def _write_batches(batches: Iterable[Any], parts_dir: str) -> Iterator[Any]:
    """Write this partition's documents (`_encoded_documents`) to
    ``part-<partition>.u16``; yield one row: the partition's figures (`_figures_row`)."""
    import pyarrow as pa  # noqa: PLC0415

    index = _partition_index()
    counts: Counter[str] = Counter()
    hits: Counter[str] = Counter()
    with open(os.path.join(parts_dir, f"part-{index:06d}.u16"), "wb") as handle:
        for encoded in _encoded_documents(batches, counts, hits):
            handle.write(encoded)
    yield pa.RecordBatch.from_pydict(_figures_row(index, counts, hits))


def read_records(spark: SparkSession, sources: Sequence[Source]) -> DataFrame:
    """One row per raw line: file URI, split start, row id (ordered within a split),
    kind and the raw bytes (the text source's value cast to binary, undecoded)."""
    from pyspark.sql import functions as sf  # noqa: PLC0415

    frames = []
    for kind in ("txt", "jsonl"):
        paths = [str(s.path) for s in sources if s.kind == kind]
        if paths:
            frames.append(
                spark.read.text(paths).select(
                    sf.col("_metadata.file_path").alias("file"),
                    sf.col("_metadata.file_block_start").alias("block"),
                    sf.monotonically_increasing_id().alias("row"),
                    sf.lit(kind).alias("kind"),
                    sf.col("value").cast("binary").alias("raw"),
                )
            )
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame


class Positions:
    """Line numbers of rows from (file, split start, row id): the lines of the splits
    before, plus the row's place in its split."""

    def __init__(self, splits: Iterable[Any], root_uri_path: str, single_file: bool) -> None:
        self._root = root_uri_path
        self._single = single_file
        self._splits: dict[str, list[tuple[int, int, int]]] = {}
        for file, block, count, first in splits:
            self._splits.setdefault(file, []).append((block, count, first))
        for entries in self._splits.values():
            entries.sort()

    def name(self, file_uri: str) -> str:
        path = unquote(urlparse(file_uri).path)
        if self._single:
            return os.path.basename(path)
        return os.path.relpath(path, self._root)

    def __call__(self, file: str, block: int, row: int) -> str:
        line = 1
        for start, count, first in self._splits.get(file, []):
            if start == block:
                line += row - first
                break
            line += count
        return f"{self.name(file)} line {line}"


def _pii_counts(parts: Sequence[tuple[int, int, int, int, dict[str, int]]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for *_, hits in parts:
        total.update(hits)
    return total


def executors_share_disk(spark: SparkSession) -> bool:
    """Whether the executors write to the driver's disk (local mode), so the token parts
    they write are the driver's to read; on a cluster they come through the driver."""
    return str(spark.sparkContext.master).startswith("local")


def _token_batches(batches: Iterable[Any], chunk_bytes: int = 32 << 20) -> Iterator[Any]:
    """`_write_batches` for executors on other machines: the partition's tokens
    (`_encoded_documents`) as rows of at most ``chunk_bytes`` (the driver appends them to
    its part files, in order), then one row with the partition's figures (no tokens)."""
    import pyarrow as pa  # noqa: PLC0415

    index = _partition_index()
    counts: Counter[str] = Counter()
    hits: Counter[str] = Counter()
    schema = pa.schema(
        [
            ("part", pa.int64()),
            ("last", pa.bool_()),
            ("data", pa.binary()),
            ("tokens", pa.int64()),
            ("documents", pa.int64()),
            ("with_pii", pa.int64()),
            ("hits", pa.string()),
        ]
    )

    def row(data: bytes, last: bool) -> Any:
        figures = (
            _figures_row(index, counts, hits) if last else _figures_row(index, Counter(), Counter())
        )
        return pa.RecordBatch.from_pydict({**figures, "last": [last], "data": [data]}, schema)

    pending: list[bytes] = []
    size = 0
    for encoded in _encoded_documents(batches, counts, hits):
        for start in range(0, len(encoded), chunk_bytes):
            piece = encoded[start : start + chunk_bytes]
            if size + len(piece) > chunk_bytes and pending:
                yield row(b"".join(pending), False)
                pending, size = [], 0
            pending.append(piece)
            size += len(piece)
    if pending:
        yield row(b"".join(pending), False)
    yield row(b"", True)


TOKEN_SCHEMA = (
    "part long, last boolean, data binary, tokens long, documents long, with_pii long, hits string"
)


def _gather_parts(ordered: DataFrame, parts_dir: Path) -> list[Any]:
    """The token stream through the driver, one partition at a time, into
    ``parts_dir/part-<partition>.u16``; one figures row per partition."""
    figures = []
    handles: dict[int, Any] = {}
    try:
        for r in ordered.mapInArrow(_token_batches, TOKEN_SCHEMA).toLocalIterator():
            part = int(r["part"])
            if part not in handles:
                handles[part] = (parts_dir / f"part-{part:06d}.u16").open("wb")
            handles[part].write(r["data"])
            if r["last"]:
                figures.append(r)
    finally:
        for handle in handles.values():
            handle.close()
    return figures


def run_spark_job(
    spark: SparkSession,
    records: DataFrame,
    positions: tuple[str, bool],
    settings: Settings,
    staging: Path,
) -> dict[str, Any]:
    """Stages 1-6 over ``records`` (`read_records` or `read_remote`): the token stream
    in ``staging/parts``; returns the figures. ``positions``: the SOURCE path the
    examples are named relative to, and whether SOURCE is one file."""
    from pyspark import StorageLevel  # noqa: PLC0415
    from pyspark.sql import functions as sf  # noqa: PLC0415
    from pyspark.sql.types import (  # noqa: PLC0415
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    parse = functools.partial(_parse_batches, max_doc_bytes=settings.max_doc_bytes)
    parsed = records.mapInArrow(parse, PARSED_SCHEMA).persist(StorageLevel.MEMORY_AND_DISK)

    # --- validation of the raw records -------------------------------------------
    by_status = {
        row["status"]: (int(row["n"]), int(row["b"] or 0))
        for row in parsed.groupBy("status")
        .agg(sf.count("*").alias("n"), sf.sum("raw_bytes").alias("b"))
        .collect()
    }
    blank = by_status.pop(clean.BLANK, (0, 0))
    records_total = sum(n for n, _ in by_status.values())
    raw_bytes = sum(b for _, b in by_status.values()) + blank[1]
    usable = by_status.get(clean.OK, (0, 0))[0]
    ok = parsed.filter(sf.col("status") == clean.OK)
    position = sf.struct("file", "block", "row")
    groups = (
        ok.groupBy("hash")
        .agg(
            sf.count("*").alias("n"),
            sf.min(position).alias("first"),
            sf.max(position).alias("last"),
            sf.first("text").alias("text"),
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    unique_count = groups.count()
    duplicates = usable - unique_count

    splits = (
        parsed.groupBy("file", "block")
        .agg(sf.count("*").alias("n"), sf.min("row").alias("first"))
        .collect()
    )
    where = Positions(((r["file"], r["block"], r["n"], r["first"]) for r in splits), *positions)
    examples: dict[str, list[str]] = {}
    for rule in clean.RECORD_RULES:
        if by_status.get(rule, (0, 0))[0]:
            rows = (
                parsed.filter(sf.col("status") == rule)
                .orderBy("file", "block", "row")
                .select("file", "block", "row")
                .limit(3)
                .collect()
            )
            examples[rule] = [where(r["file"], r["block"], r["row"]) for r in rows]
    if duplicates:
        repeats = groups.filter(sf.col("n") > 1).orderBy("last").select("first", "last")
        examples[DUPLICATES] = [
            f"{where(*r['last'])} repeats {where(*r['first'])}" for r in repeats.limit(3).collect()
        ]
    profile = Profile(
        records=records_total,
        broken={rule: n for rule, (n, _) in by_status.items() if rule != clean.OK},
        usable=usable,
        duplicates=duplicates,
        examples=examples,
    )
    results = check_profile(
        profile,
        max_bad_fraction=settings.max_bad_fraction,
        max_duplicate_rate=settings.max_duplicate_rate,
    )
    validation = {
        "passed": all(r.passed for r in results),
        "records": records_total,
        "blank_lines": blank[0],
        "usable": usable,
        "rules": [r.as_dict() for r in results],
    }
    if not validation["passed"] or unique_count == 0:
        raise DatasetRefusedError(refusal_text(results, records_total, unique_count), validation)
    parsed.unpersist()

    # --- deduplication ----------------------------------------------------------------
    unique = groups.select("first.file", "first.block", "first.row", "text")
    near_removed: int | None = None
    if settings.near_dup is not None:
        unique, near_removed = drop_near_duplicates(unique, settings.near_dup)

    # --- PII ------------------------------------------------------------------------
    anonymised_schema = StructType(
        [
            StructField("file", StringType(), False),
            StructField("block", LongType(), False),
            StructField("row", LongType(), False),
            StructField("text", StringType(), False),
            StructField("hits", MapType(StringType(), IntegerType()), False),
        ]
    )
    pii_settings = pii.PiiSettings(ner_model=settings.ner_model) if settings.anonymise else None
    if pii_settings is None:  # --no-anonymise: no Python pass at all
        empty = sf.create_map().cast(MapType(StringType(), IntegerType()))
        cleaned = unique.withColumn("hits", empty).persist(StorageLevel.MEMORY_AND_DISK)
    else:
        anonymise = functools.partial(_anonymise_partition, settings=pii_settings)
        # The rows travel as Python tuples here (Spark's mapPartitions); the schema is
        # ours, so Spark need not check every row against it.
        cleaned = spark.createDataFrame(
            unique.rdd.mapPartitions(anonymise), anonymised_schema, verifySchema=False
        ).persist(StorageLevel.MEMORY_AND_DISK)
    cleaned.count()  # the scan runs once, here; the sort below samples the cached rows
    groups.unpersist()

    # --- tokenisation, in source order ------------------------------------------------
    parts_dir = staging / "parts"
    parts_dir.mkdir()
    ordered = cleaned.orderBy("file", "block", "row").select("text", "hits")
    if executors_share_disk(spark):
        write = functools.partial(_write_batches, parts_dir=str(parts_dir))
        rows = ordered.mapInArrow(write, PART_SCHEMA).collect()
    else:
        rows = _gather_parts(ordered, parts_dir)
    parts = sorted(
        (r["part"], r["tokens"], r["documents"], r["with_pii"], json.loads(r["hits"])) for r in rows
    )
    cleaned.unpersist()
    hits = _pii_counts(parts)
    return {
        "validation": validation,
        "raw_bytes": raw_bytes,
        "dedup": {
            "exact_duplicates_removed": duplicates,
            "near_duplicates_removed": near_removed,
            "near_dup_threshold": settings.near_dup,
        },
        "pii": {
            "anonymised": settings.anonymise,
            "entities_scanned": list(pii_settings.entities) if pii_settings else [],
            "not_scanned": (
                []
                if pii_settings is None or settings.ner_model
                else ["PERSON: no NER model (--ner-model); names were not searched for"]
            ),
            # Only the types searched for: a type not searched for is in not_scanned,
            # never counted as 0.
            "hits_by_type": {e: hits.get(e, 0) for e in pii_settings.entities}
            if pii_settings
            else {},
            "documents_with_pii": sum(p[3] for p in parts) if pii_settings else None,
        },
        "documents": sum(p[2] for p in parts),
        "parts": [(p[0], p[1]) for p in parts],
    }


def drop_near_duplicates(unique: DataFrame, threshold: float) -> tuple[DataFrame, int]:
    """Documents whose word-3-gram Jaccard similarity to an earlier one (by position) is
    at least ``threshold`` removed, found with MinHash LSH; returns the rest and the
    count removed. Documents shorter than three words are kept."""
    from pyspark import StorageLevel  # noqa: PLC0415
    from pyspark.ml.feature import HashingTF, MinHashLSH, NGram, RegexTokenizer  # noqa: PLC0415
    from pyspark.sql import functions as sf  # noqa: PLC0415

    keyed = unique.withColumn("key", sf.struct("file", "block", "row")).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    words = RegexTokenizer(inputCol="text", outputCol="words", pattern=r"\W+").transform(keyed)
    shingles = NGram(n=3, inputCol="words", outputCol="shingles").transform(words)
    features = HashingTF(
        inputCol="shingles", outputCol="features", numFeatures=1 << 20, binary=True
    ).transform(shingles.filter(sf.size("shingles") > 0))
    vectors = features.select("key", "features").persist(StorageLevel.MEMORY_AND_DISK)
    model = MinHashLSH(inputCol="features", outputCol="hashes", numHashTables=8, seed=971).fit(
        vectors
    )
    pairs = model.approxSimilarityJoin(vectors, vectors, 1.0 - threshold, distCol="distance")
    later = (
        pairs.filter(sf.col("datasetA.key") < sf.col("datasetB.key"))
        .select(sf.col("datasetB.key").alias("key"))
        .distinct()
    )
    kept = keyed.join(later, on="key", how="left_anti").drop("key")
    removed = later.count()
    vectors.unpersist()
    return kept, removed


def refusal_text(results: Sequence[RuleResult], records: int, unique: int) -> str:
    failed = [r.rule for r in results if not r.passed]
    head = (
        f"prepare: the dataset was refused: {', '.join(failed)} over the limit "
        f"({records} records read). No shards were written."
        if failed
        else f"prepare: the dataset was refused: no usable document among {records} records."
    )
    return (
        head
        + "\n"
        + format_rules(results)
        + "\nFix the records at those positions, or change the limits (--max-bad-fraction, "
        "--max-duplicate-rate, --max-doc-bytes) if they are too strict for this source."
    )


# --- shards, manifest, publishing ---------------------------------------------------


def assemble_shards(
    parts: Sequence[tuple[int, int]], parts_dir: Path, out: Path, settings: Settings
) -> tuple[int, int]:
    """Cut the ordered token stream of the part files into shards: the last
    ``val_fraction`` is ``val_*.bin`` (as `workloads.data.byte_tokenizer` splits); returns the
    (train, val) token counts."""
    total = sum(tokens for _, tokens in parts)
    split = total - int(total * settings.val_fraction)
    files = [parts_dir / f"part-{index:06d}.u16" for index, tokens in parts if tokens]
    stream = _Concatenated(files)
    try:
        for name, count in (("train", split), ("val", total - split)):
            for index, start in enumerate(range(0, count, settings.shard_tokens)):
                tokens = min(settings.shard_tokens, count - start)
                with (out / shard_name(name, index)).open("wb") as handle:
                    handle.write(pack_header(tokens, BYTE_VOCAB_SIZE))
                    stream.copy_to(handle, 2 * tokens)
    finally:
        stream.close()
    return split, total - split


class _Concatenated:
    """The part files read as one stream, in order."""

    def __init__(self, files: Sequence[Path]) -> None:
        self._files = list(files)
        self._handle: Any = None

    def copy_to(self, handle: Any, count: int) -> None:
        while count:
            if self._handle is None:
                self._handle = self._files.pop(0).open("rb")
            chunk = self._handle.read(min(count, 8 << 20))
            if not chunk:
                self._handle.close()
                self._handle = None
                continue
            handle.write(chunk)
            count -= len(chunk)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


def versions() -> dict[str, str]:
    """The versions of what shapes the output."""
    found = {}
    for package in ("pyspark", "presidio-analyzer", "presidio-anonymizer", "pandera"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "absent"
    return found


def _lock_out(out: Path, sources: Sequence[Source]) -> output_lock.Lock:
    """OUT's lock (`workloads.output_lock`), its folder made first where missing; OUT
    checked again under it."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"OUT {out} cannot be written: its folder {out.parent} cannot be created "
            f"({err.strerror}); choose an OUT in a folder you can write"
        ) from err
    try:
        lock = output_lock.acquire(
            out, f"OUT {out}", lambda line: print(f"prepare: {line}", file=sys.stderr)
        )
    except output_lock.OutputLockError as err:
        raise UserError(str(err)) from err
    try:
        check_out(out, sources)
    except BaseException:
        lock.release()
        raise
    return lock


def _staging(out: Path | S3Location, scratch: Path | None) -> Path:
    """The run's staging directory: for a local OUT a hidden sibling (one file system,
    so the dataset is renamed into place), for an ``s3://`` OUT under ``scratch``."""
    where = out.parent if isinstance(out, Path) else (scratch or tempfile.gettempdir())
    try:
        if isinstance(out, Path):
            staging = out.with_name(f".{out.name}.tmp-{secrets.token_hex(4)}")
            staging.mkdir()
            return staging
        return Path(tempfile.mkdtemp(prefix=".prepare-", dir=scratch))
    except OSError as err:
        raise UserError(f"cannot create the staging area in {where}: {err.strerror}") from err


@dataclass(frozen=True)
class Outcome:
    """What a successful run wrote."""

    out: str
    digest: str
    documents: int
    tokens: int
    train_shards: int
    val_shards: int
    report: dict[str, Any]


@dataclass(frozen=True)
class Places:
    """Where a run reads and writes: a local path or an ``s3://`` location each."""

    source: Path | S3Location
    out: Path | S3Location
    kms_key: str | None = None
    event_log: S3Location | None = None

    @classmethod
    def of(
        cls,
        source: str | Path,
        out: str | Path,
        kms_key: str | None = None,
        event_log_uri: str | None = None,
    ) -> Places:
        """Parse the arguments; raises `UserError` for a malformed or incomplete one."""
        try:
            src = object_store.parse(str(source)) if object_store.is_s3(source) else Path(source)
            dst = object_store.parse(str(out)) if object_store.is_s3(out) else Path(out)
            logs = object_store.parse(event_log_uri) if event_log_uri else None
        except StoreError as err:
            raise UserError(str(err)) from err
        if event_log_uri and not object_store.is_s3(event_log_uri):
            raise UserError(f"--event-log-uri must be s3://<bucket>/<prefix>/, got {event_log_uri}")
        if (isinstance(dst, S3Location) or logs is not None) and not (kms_key or "").strip():
            raise UserError(
                "writing to the object store needs --kms-key: every object is SSE-KMS under "
                "a named key (on AWS the stack's storage key)"
            )
        if (
            isinstance(src, S3Location)
            and isinstance(dst, S3Location)
            and src.bucket == dst.bucket
            and (dst.prefix.startswith(src.prefix) or src.prefix.startswith(dst.prefix))
        ):
            raise UserError(f"OUT {dst} and SOURCE {src} overlap; choose another OUT")
        return cls(src, dst, kms_key.strip() if kms_key else None, logs)

    @property
    def remote(self) -> bool:
        return any(isinstance(p, S3Location) for p in (self.source, self.out, self.event_log))


def prepare(
    source: Path | str,
    out: Path | str,
    settings: Settings,
    *,
    name: str | None = None,
    workers: int | None = None,
    driver_memory: str = "2g",
    spark: SparkSession | None = None,
    kms_key: str | None = None,
    event_log_uri: str | None = None,
    scratch: Path | None = None,
    log: SparkLog | None = None,
) -> Outcome:
    """The whole job. Raises `UserError`, `StoreError`, `DatasetRefusedError` or Spark's
    errors.

    Args:
        source, out: local paths or ``s3://<bucket>/<prefix>/`` locations.
        spark: a session to run in (kept running); by default the one ``spark-submit``
            configured where it started this process, else one started on the
            machine's Java (`workloads.data.java`) with ``workers`` cores; either is
            stopped at the end.
        kms_key: the KMS key of every object written to the store (SSE-KMS).
        event_log_uri: ``s3://`` location the session's event log is uploaded to when
            the session ends, from a ``finally`` (not when the process is killed).
        scratch: the existing local directory of the staging area for an ``s3://`` OUT
            (default the system's temporary directory); a missing one is a `UserError`.
        log: where the output of the Spark it starts goes (`SparkLog`); by default the
            terminal.
    """
    problems = settings.problems()
    if problems:
        raise UserError("; ".join(problems))
    places = Places.of(source, out, kms_key, event_log_uri)
    if scratch is not None and not Path(scratch).is_dir():
        # Checked before anything runs; the job does not create it (a mistyped path
        # would otherwise stage a whole dataset somewhere unintended).
        raise UserError(f"--scratch {scratch} is not an existing directory")
    s3 = object_store.client() if places.remote else None
    remote: list[RemoteSource] = []
    sources: list[Source] = []
    if isinstance(places.source, S3Location):
        remote = list_remote_sources(s3, places.source)
    else:
        sources = list_sources(places.source)
    if isinstance(places.out, S3Location):
        object_store.check_out_prefix(s3, places.out)
    else:
        check_out(places.out, sources)
    submitted = spark is None and under_spark_submit()
    java = find_java() if spark is None and not submitted else None
    if settings.anonymise and settings.ner_model:
        pii.check_ner_model(settings.ner_model)
    workers = workers or os.cpu_count() or 1
    # One run at a time writes a local OUT: a second one stops here, before Spark
    # starts. Taken once everything was checked, before anything is written; OUT is
    # checked again under it (a run that just ended may have put a dataset there).
    lock = _lock_out(places.out, sources) if isinstance(places.out, Path) else None
    staging: Path | None = None
    try:
        staging = _staging(places.out, scratch)
        started = time.perf_counter()
        own = spark is None
        if spark is None and submitted:
            session = submitted_session()
        elif spark is None:
            assert java is not None
            events = staging / "events" if places.event_log else None
            session = start_spark(
                java, workers, driver_memory, staging / "spark-local", events, log=log
            )
        else:
            session = spark
        event_dir = None
        try:
            event_dir = event_log_directory(session) if places.event_log and own else None
            figures, digests = _run_on(session, places, (sources, remote), settings, staging)
            workers = session.sparkContext.defaultParallelism
        finally:
            if own:
                session.stop()
                if places.event_log is not None and event_dir is not None:
                    failing = sys.exc_info()[0] is not None
                    _upload_event_log(s3, event_dir, places.event_log, places.kms_key, failing)
        spark_s = time.perf_counter() - started
        data_dir = staging / "dataset"
        data_dir.mkdir()
        train_tokens, val_tokens = assemble_shards(
            figures["parts"], staging / "parts", data_dir, settings
        )
        total = train_tokens + val_tokens
        shard_problems = check_shards(data_dir, total)
        if shard_problems:
            raise RuntimeError(
                "the written shards failed their check: " + "; ".join(shard_problems)
            )
        shards = describe_shards(data_dir)
        if isinstance(places.source, S3Location):
            listed = [
                {"path": s.relative, "kind": s.kind, "bytes": s.bytes,
                 "sha256": digests[places.source.uri(quote(s.key))]}
                for s in remote
            ]  # fmt: skip
            source_root = str(places.source)
        else:
            listed = [
                {"path": s.relative, "kind": s.kind, "bytes": s.bytes, "sha256": s.sha256}
                for s in sources
            ]
            source_root = str(places.source.resolve())
        out_name = (
            places.out.name if isinstance(places.out, S3Location) else places.out.resolve().name
        )
        body: dict[str, Any] = {
            "name": name or out_name,
            "pipeline": {"name": PIPELINE_NAME, "version": PIPELINE_VERSION, **versions()},
            "settings": settings.record(),
            "sources": listed,
            "shards": shards,
            "totals": {
                "documents": figures["documents"],
                "tokens": total,
                "train_tokens": train_tokens,
                "val_tokens": val_tokens,
            },
        }
        digest = write_manifest(data_dir, body)
        elapsed = time.perf_counter() - started
        report: dict[str, Any] = {
            "dataset": {"name": body["name"], "digest": digest},
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "source_root": source_root,
            "validation": figures["validation"],
            "dedup": figures["dedup"],
            "pii": figures["pii"],
            "output": body["totals"]
            | {
                "train_shards": sum(1 for s in shards if s["split"] == "train"),
                "val_shards": sum(1 for s in shards if s["split"] == "val"),
            },
            "run": {
                "raw_bytes": figures["raw_bytes"],
                "seconds": round(elapsed, 3),
                "spark_seconds": round(spark_s, 3),
                "workers": workers,
                "java": (
                    f"{java.major} ({java.origin})"
                    if java
                    else ("(spark-submit)" if submitted else "(session given)")
                ),
            },
        }
        write_json_atomic(data_dir / REPORT, report)
        if isinstance(places.out, S3Location):
            assert s3 is not None and places.kms_key is not None
            object_store.check_out_prefix(s3, places.out)  # OUT may have changed meanwhile
            object_store.upload_dataset(
                s3, data_dir, places.out, places.kms_key, [s["name"] for s in shards]
            )
        else:
            check_out(places.out, sources)  # OUT may have been changed by hand meanwhile
            output_lock.swap_into_place(data_dir, places.out)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if lock is not None:
            lock.release()
    return Outcome(
        out=str(places.out),
        digest=digest,
        documents=figures["documents"],
        tokens=total,
        train_shards=report["output"]["train_shards"],
        val_shards=report["output"]["val_shards"],
        report=report,
    )


def _run_on(
    spark: SparkSession,
    places: Places,
    listed: tuple[Sequence[Source], Sequence[RemoteSource]],
    settings: Settings,
    staging: Path,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Stages 1-6 on ``spark`` from the local files or the store's objects; returns the
    figures and, for an ``s3://`` SOURCE, each object's SHA-256 by its URI."""
    sources, remote = listed
    if isinstance(places.source, S3Location):
        try:
            fetched, records, digests = read_remote(spark, places.source, remote)
            try:
                prefix = "/" + places.source.prefix.rstrip("/")
                return run_spark_job(spark, records, (prefix, False), settings, staging), digests
            finally:
                fetched.unpersist()
        except Exception as err:
            # An executor found an object changed (its first fetch, or one Spark repeated
            # for a lost executor): one line for the user, not Spark's failure.
            changed = object_store.source_changed(err)
            if changed is None:
                raise
            raise StoreError(changed) from err
    root = places.source
    positions = (str(root.resolve() if root.is_dir() else root.resolve().parent), root.is_file())
    figures = run_spark_job(spark, read_records(spark, sources), positions, settings, staging)
    return figures, {}


def _upload_event_log(
    s3: Any, directory: Path, where: S3Location, kms_key: str | None, failing: bool
) -> None:
    """Spark's event log of this run, from the local disk to the store (SSE-KMS). A
    failed upload stops a run that was going well before its dataset is written (no
    dataset without the record of how it was made); in a run that is failing anyway it
    is reported, and the run's own error is the one raised."""
    assert kms_key is not None
    try:
        written = object_store.upload_tree(s3, directory, where, kms_key)
    except StoreError as err:
        if not failing:
            raise StoreError(f"the Spark event log was not uploaded: {err}") from err
        print(f"prepare: the Spark event log was not uploaded: {err}", file=sys.stderr)
        return
    if written:
        print(f"prepare: event log uploaded to {where}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    defaults = Settings()
    parser = argparse.ArgumentParser(
        prog="python -m workloads.data.prepare",
        description=(
            "Clean, validate, deduplicate, anonymise and tokenise .txt/.jsonl files into a "
            "versioned token dataset with Spark (local mode)."
        ),
    )
    parser.add_argument(
        "source", help="directory (or file) of .txt/.jsonl, or s3://<bucket>/<prefix>/"
    )
    parser.add_argument(
        "--out", required=True, help="dataset directory, or s3://<bucket>/<prefix>/, to write"
    )
    parser.add_argument("--name", default=None, help="dataset name (default: OUT's name)")
    parser.add_argument(
        "--no-anonymise",
        dest="anonymise",
        action="store_false",
        help="do not search for personal data (recorded in the manifest and report)",
    )
    parser.add_argument(
        "--ner-model",
        default=None,
        help="spaCy pipeline with NER (installed package or directory) to find names",
    )
    parser.add_argument(
        "--near-dup",
        type=float,
        default=None,
        metavar="JACCARD",
        help="also drop near-duplicates at this word-3-gram Jaccard similarity (e.g. 0.8)",
    )
    parser.add_argument("--max-doc-bytes", type=int, default=defaults.max_doc_bytes)
    parser.add_argument(
        "--max-bad-fraction",
        type=float,
        default=defaults.max_bad_fraction,
        help="largest share of records breaking any one record rule (default 0.01)",
    )
    parser.add_argument(
        "--max-duplicate-rate",
        type=float,
        default=defaults.max_duplicate_rate,
        help="largest share of exact duplicates (default 0.3)",
    )
    parser.add_argument("--shard-tokens", type=int, default=defaults.shard_tokens)
    parser.add_argument("--val-fraction", type=float, default=defaults.val_fraction)
    parser.add_argument("--workers", type=int, default=None, help="local cores (default all)")
    parser.add_argument("--driver-memory", default="2g", help="Spark driver memory (2g)")
    parser.add_argument(
        "--kms-key",
        default=None,
        help="KMS key (ARN, id or alias) of every object written to an s3:// OUT or "
        "--event-log-uri (SSE-KMS); required for them",
    )
    parser.add_argument(
        "--event-log-uri",
        default=None,
        help="s3:// location Spark's event log is uploaded to when the session ends",
    )
    parser.add_argument(
        "--scratch",
        type=Path,
        default=None,
        help="existing local directory for the staging area of an s3:// OUT (default: the "
        "system's temporary directory)",
    )
    parser.add_argument(
        "--spark-log",
        type=Path,
        default=None,
        help="file that Spark's own output (JVM, Python workers, Py4J) is appended to "
        "(default: prepare-<time>-<pid>.log in the system's temporary directory; kept and "
        "named when the job fails or is interrupted)",
    )
    parser.add_argument(
        "--refusal-report",
        type=Path,
        default=None,
        help="where to write the JSON report of a refused dataset",
    )
    return parser


def _cause(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return (lines[-1] if lines else type(err).__name__)[:400]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings(
        anonymise=args.anonymise,
        ner_model=args.ner_model,
        near_dup=args.near_dup,
        max_doc_bytes=args.max_doc_bytes,
        max_bad_fraction=args.max_bad_fraction,
        max_duplicate_rate=args.max_duplicate_rate,
        shard_tokens=args.shard_tokens,
        val_fraction=args.val_fraction,
    )
    if args.workers is not None and args.workers < 1:
        print(f"prepare: --workers must be at least 1, got {args.workers}", file=sys.stderr)
        return EXIT_USER_ERROR
    if args.spark_log is not None and not args.spark_log.parent.is_dir():
        print(f"prepare: --spark-log {args.spark_log}: no such folder", file=sys.stderr)
        return EXIT_USER_ERROR
    # Under spark-submit (the driver pod) Spark's output is the pod's log, as it is.
    log = None if under_spark_submit() else SparkLog(args.spark_log)
    interrupts = Interrupts()
    try:
        with interrupts, log.python_logging() if log else contextlib.nullcontext():
            outcome = prepare(
                args.source,
                args.out,
                settings,
                name=args.name,
                workers=args.workers,
                driver_memory=args.driver_memory,
                kms_key=args.kms_key,
                event_log_uri=args.event_log_uri,
                scratch=args.scratch,
                log=log,
            )
    except KeyboardInterrupt:
        return _interrupted(args.out, log)
    except (UserError, StoreError, JavaError, pii.PiiSetupError) as err:
        if log:
            log.finish(keep=False)
        print(f"prepare: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except DatasetRefusedError as refused:
        if log:
            log.finish(keep=False)
        print(str(refused), file=sys.stderr)
        if args.refusal_report is not None:
            args.refusal_report.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(args.refusal_report, {"validation": refused.report})
            print(f"prepare: report written to {args.refusal_report}", file=sys.stderr)
        return EXIT_REFUSED
    except Exception as err:  # Spark and Py4J errors: one line, not a JVM stack trace
        if interrupts.seen:  # an interrupted Py4J call can surface as Py4J's own error
            return _interrupted(args.out, log)
        print(
            f"prepare: the Spark job failed ({type(err).__name__}: {_cause(err)}); OUT was "
            f"not changed{log.finish(keep=True) if log else ''}",
            file=sys.stderr,
        )
        return EXIT_JOB_FAILED
    if log:
        log.finish(keep=False)
    print(
        f"prepare: dataset {outcome.report['dataset']['name']} version {outcome.digest} in "
        f"{outcome.out}: {outcome.documents} documents, {outcome.tokens} tokens, "
        f"{outcome.train_shards} train + {outcome.val_shards} val shard(s); "
        f"{pii_summary(outcome.report['pii'])}; {outcome.report['run']['seconds']:.1f} s"
    )
    return EXIT_OK


def _interrupted(out: str, log: SparkLog | None) -> int:
    """The one line of a run stopped by Ctrl-C (its staging directory is gone, its lock
    released, OUT as it was)."""
    unchanged = (
        f"no dataset was written to {out}"
        if object_store.is_s3(out)
        else f"OUT {out} was not changed"
    )
    print(
        f"prepare: interrupted; {unchanged}{log.finish(keep=True) if log else ''}", file=sys.stderr
    )
    return EXIT_INTERRUPTED


def pii_summary(found: Mapping[str, Any]) -> str:
    """The report's PII section in a few words: the hits of each type searched for, and
    the types that were not searched for (``PERSON`` without an NER model) said so, not
    counted as 0."""
    if not found["anonymised"]:
        return "PII: NOT anonymised (--no-anonymise)"
    line = "PII: " + ", ".join(f"{entity} {n}" for entity, n in found["hits_by_type"].items())
    skipped = [entity for entity in pii.ENTITIES if entity not in found["hits_by_type"]]
    if skipped:
        line += f"; {', '.join(skipped)} not scanned (no --ner-model)"
    return line


if __name__ == "__main__":
    sys.exit(main())
