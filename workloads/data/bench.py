"""Throughput of the Spark job against the single-process shard builder, and of the PII
scan, on one generated corpus.

The corpus: ``--mb`` megabytes of ``.txt`` files (one document per line) from the
corpus grammar (`workloads.data.make_corpus`), each document numbered (so they are
unique), with planted PII (`workloads.data.make_pii_sample`) in about one document in
twenty. Measured, each as a user runs it (a fresh process, wall clock, start-up
included):

- the builder: ``python -m workloads.data.byte_tokenizer FILES`` (reads, byte-tokenises,
  writes shards; no cleaning, validation, deduplication or PII) - run with
  ``--builder-python``, an interpreter that has torch;
- the Spark job: ``python -m workloads.data.prepare`` with anonymisation (the default)
  and with ``--no-anonymise``;
- the PII scan alone, in this process (`workloads.data.pii.find_many`, the analyzer
  built beforehand) over the first ``--scan-mb`` megabytes.

Usage::

    python -m workloads.data.bench --mb 50 --builder-python .venv/bin/python \\
        --json build/bench-data.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workloads.data import make_pii_sample, pii
from workloads.data.make_corpus import PARAGRAPHS
from workloads.data.prepare import versions

FILES = 8
PII_EVERY = 20


def _pii_sentence(rng: random.Random) -> str:
    first, last = make_pii_sample.name(rng)
    return rng.choice(
        (
            f"Contact {make_pii_sample.mobile(rng)} or {make_pii_sample.email(rng, first, last)}.",
            f"Emirates ID {make_pii_sample.emirates_id(rng)} on file.",
            f"Refund to {make_pii_sample.iban(rng)} by card {make_pii_sample.card(rng)}.",
            f"Office line {make_pii_sample.landline(rng)}.",
        )
    )


def write_corpus(root: Path, megabytes: float, seed: int = 2026) -> tuple[list[Path], int, int]:
    """``FILES`` text files totalling ``megabytes``; returns (files, bytes, documents)."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    target = int(megabytes * 1e6 / FILES)
    files, total, documents = [], 0, 0
    for index in range(FILES):
        path = root / f"part-{index:02d}.txt"
        lines, size = [], 0
        while size < target:
            sentences = [rng.choice(PARAGRAPHS)(rng) for _ in range(rng.randint(1, 3))]
            if documents % PII_EVERY == 0:
                sentences.insert(rng.randint(0, len(sentences)), _pii_sentence(rng))
            line = f"Entry {documents}. " + " ".join(sentences)
            lines.append(line)
            size += len(line.encode()) + 1
            documents += 1
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        files.append(path)
        total += path.stat().st_size
    return files, total, documents


def _timed(command: Sequence[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} ... exited {result.returncode}:\n"
                           f"{result.stderr[-3000:]}")  # fmt: skip
    return seconds, result.stdout.strip()


def scan_throughput(files: Sequence[Path], megabytes: float) -> dict[str, float]:
    """The PII scan alone over the first ``megabytes`` of documents, one process."""
    texts: list[str] = []
    size = 0
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            texts.append(line)
            size += len(line.encode())
            if size >= megabytes * 1e6:
                break
        if size >= megabytes * 1e6:
            break
    settings = pii.PiiSettings()
    analyzer = pii.engine_for(settings)
    pii.find_many(texts[:50], analyzer, settings)  # warm-up (lazy loads)
    started = time.perf_counter()
    found = pii.find_many(texts, analyzer, settings)
    seconds = time.perf_counter() - started
    return {
        "bytes": size,
        "documents": len(texts),
        "hits": sum(len(h) for h in found),
        "seconds": seconds,
        "mb_per_s": size / 1e6 / seconds,
        "docs_per_s": len(texts) / seconds,
    }


#: Written into the work folder the bench makes: only a folder holding it is cleared.
WORKDIR_MARKER = ".made-by-bench-data"


def _builder_problem(builder_python: str) -> str:
    """Why ``--builder-python`` cannot run, or ""."""
    if shutil.which(builder_python) is None:
        return (
            f"--builder-python {builder_python} is not an executable Python; give one that "
            "has torch (make bench-data passes the training environment's)"
        )
    return ""


def _workdir_problem(work: Path) -> str:
    """Why ``work`` may not be the bench's work folder, or "": the bench clears a folder
    it made (its marker file inside) and never one it did not make."""
    if (work.exists() or work.is_symlink()) and not (
        work.is_dir() and not work.is_symlink() and (work / WORKDIR_MARKER).is_file()
    ):
        return (
            f"--workdir {work} exists and was not made by this bench; give a folder that "
            "does not exist yet (the bench deletes its work folder before each run)"
        )
    return ""


def _claim_workdir(work: Path) -> str:
    """``work`` made empty for this run (see `_workdir_problem`), or why it cannot be."""
    if work.exists():
        shutil.rmtree(work)
    try:
        work.mkdir(parents=True)
        (work / WORKDIR_MARKER).write_text("made by python -m workloads.data.bench\n")
    except OSError as err:
        return f"--workdir {work} cannot be created: {err.strerror or err}"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.data.bench")
    parser.add_argument("--mb", type=float, default=50.0, help="corpus size (default 50 MB)")
    parser.add_argument("--scan-mb", type=float, default=5.0)
    parser.add_argument("--workdir", type=Path, default=Path("build/bench-data"))
    parser.add_argument("--builder-python", default=sys.executable, help="a Python with torch")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    repo = Path(__file__).resolve().parents[2]
    work = args.workdir.resolve()
    problem = (
        _workdir_problem(work) or _builder_problem(args.builder_python) or _claim_workdir(work)
    )
    if problem:
        print(f"bench-data: {problem}", file=sys.stderr)
        return 2
    files, raw_bytes, documents = write_corpus(work / "corpus", args.mb)
    mb = raw_bytes / 1e6
    print(f"corpus: {len(files)} files, {mb:.1f} MB, {documents} documents", flush=True)

    builder_s, _ = _timed(
        [args.builder_python, "-m", "workloads.data.byte_tokenizer", *map(str, files),
         "--output-dir", str(work / "builder")],
        repo,
    )  # fmt: skip
    print(f"builder: {builder_s:.1f} s, {mb / builder_s:.2f} MB/s", flush=True)
    runs: dict[str, Any] = {}
    for label, extra in (("spark_anonymised", []), ("spark_no_anonymise", ["--no-anonymise"])):
        out = work / label
        seconds, line = _timed(
            [sys.executable, "-m", "workloads.data.prepare", str(work / "corpus"), "--out",
             str(out), "--workers", str(args.workers), *extra],
            repo,
        )  # fmt: skip
        report = json.loads((out / "report.json").read_text())
        runs[label] = {
            "seconds": seconds,
            "mb_per_s": mb / seconds,
            "ratio_to_builder": (mb / seconds) / (mb / builder_s),
            "in_job_seconds": report["run"]["seconds"],
            "documents_out": report["output"]["documents"],
            "pii_hits": report["pii"]["hits_by_type"],
        }
        print(f"{label}: {seconds:.1f} s, {mb / seconds:.2f} MB/s; {line}", flush=True)
    scan = scan_throughput(files, args.scan_mb)
    print(
        f"PII scan (one process): {scan['mb_per_s']:.2f} MB/s, {scan['docs_per_s']:.0f} docs/s "
        f"over {scan['bytes'] / 1e6:.1f} MB",
        flush=True,
    )
    result = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_1m_at_end": os.getloadavg()[0],
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "versions": versions(),
        "corpus": {"files": len(files), "bytes": raw_bytes, "documents": documents},
        "builder": {"seconds": builder_s, "mb_per_s": mb / builder_s},
        **runs,
        "pii_scan_single_process": scan,
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
