"""Recall and precision of the PII scanner per entity type on a labelled sample, and its
single-process scan throughput.

A hit counts as found only when a labelled span of the same type has exactly the same
start and end; a hit that is off by one character counts once as a miss and once as a
false alarm. ``PERSON`` is measured only with ``--ner-model`` (without one the scanner
does not look for names, and the table says so).

Usage::

    python -m workloads.data.pii_eval                     # the shipped sample
    python -m workloads.data.pii_eval --sample FILE --ner-model en_core_web_sm --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workloads.data.make_pii_sample import DEFAULT_OUTPUT
from workloads.data.pii import ENTITIES, PiiSettings, PiiSetupError, engine_for, find_many


@dataclass(frozen=True)
class TypeScore:
    """One entity type's counts on the sample."""

    entity: str
    labelled: int
    found: int
    correct: int
    scanned: bool

    @property
    def recall(self) -> float | None:
        return self.correct / self.labelled if self.scanned and self.labelled else None

    @property
    def precision(self) -> float | None:
        return self.correct / self.found if self.scanned and self.found else None


def load_sample(path: Path) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record.get("text"), str) or not isinstance(record.get("spans"), list):
            raise ValueError(f"{path} line {number}: needs a 'text' string and a 'spans' list")
        records.append(record)
    return records


def evaluate(
    records: Sequence[dict[str, Any]], settings: PiiSettings
) -> tuple[list[TypeScore], float]:
    """Per-type scores and the seconds the scan took (the analyzer built beforehand;
    documents scanned in batches, as the Spark job does)."""
    analyzer = engine_for(settings)
    labelled: Counter[str] = Counter()
    found: Counter[str] = Counter()
    correct: Counter[str] = Counter()
    started = time.perf_counter()
    predictions = find_many([record["text"] for record in records], analyzer, settings)
    seconds = time.perf_counter() - started
    for record, hits in zip(records, predictions, strict=True):
        gold = {(s["start"], s["end"], s["type"]) for s in record["spans"]}
        labelled.update(entity for _, _, entity in gold)
        predicted = {(h.start, h.end, h.entity_type) for h in hits}
        found.update(entity for _, _, entity in predicted)
        correct.update(entity for _, _, entity in gold & predicted)
    scores = [
        TypeScore(e, labelled[e], found[e], correct[e], e in settings.entities) for e in ENTITIES
    ]
    return scores, seconds


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def format_table(scores: Sequence[TypeScore]) -> str:
    lines = [
        f"{'type':<14} {'labelled':>8} {'found':>6} {'correct':>7} {'recall':>8} {'precision':>9}"
    ]
    for s in scores:
        if not s.scanned:
            lines.append(f"{s.entity:<14} {s.labelled:>8} not scanned (needs --ner-model)")
            continue
        lines.append(
            f"{s.entity:<14} {s.labelled:>8} {s.found:>6} {s.correct:>7} "
            f"{_percent(s.recall):>8} {_percent(s.precision):>9}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.data.pii_eval",
        description="Recall and precision per PII type on a labelled JSONL sample.",
    )
    parser.add_argument("--sample", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--ner-model", default=None, help="spaCy pipeline for PERSON")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    try:
        records = load_sample(args.sample)
    except FileNotFoundError:
        print(f"pii_eval: no such sample file {args.sample}", file=sys.stderr)
        return 2
    except (ValueError, UnicodeDecodeError) as err:
        print(f"pii_eval: {err}", file=sys.stderr)
        return 2
    settings = PiiSettings(ner_model=args.ner_model)
    try:
        scores, seconds = evaluate(records, settings)
    except PiiSetupError as err:
        print(f"pii_eval: {err}", file=sys.stderr)
        return 2
    size = sum(len(r["text"].encode("utf-8")) for r in records)
    print(format_table(scores))
    print(
        f"scan: {len(records)} documents, {size / 1e3:.1f} kB in {seconds:.2f} s: "
        f"{size / 1e6 / seconds:.3f} MB/s, {len(records) / seconds:.0f} documents/s "
        "(one process, analyzer built beforehand)"
    )
    if args.json is not None:
        body = {
            "sample": str(args.sample),
            "documents": len(records),
            "bytes": size,
            "seconds": seconds,
            "ner_model": args.ner_model,
            "types": [asdict(s) | {"recall": s.recall, "precision": s.precision} for s in scores],
        }
        args.json.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
