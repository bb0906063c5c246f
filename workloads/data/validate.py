"""Validation with pandera: the raw records' profile before anything is written, and the
shards after they are.

Raw records: Spark counts, per rule, the records that break it (`workloads.data.clean`
decides per record) and the exact duplicates; the shares go into a one-row profile that
a pandera schema checks against the limits (each rule a column with ``Check.le``). A
failed check refuses the dataset with a report naming the rule, the count and examples
given by position only (file and line), never by content, so a report cannot leak the
personal data the job exists to remove.

Shards: a table of every file the job wrote (name, size, header) checked by a second
schema: only ``train_*.bin``/``val_*.bin`` names (no foreign file), the shard magic and
version, the byte vocabulary, at least one token each, a size that matches the header
(not truncated), and token counts adding up to what was tokenised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.data.clean import RECORD_RULES
from workloads.data.shard_format import (
    BYTE_VOCAB_SIZE,
    HEADER_BYTES,
    MAGIC,
    VERSION,
    read_header_bytes,
    unpack_header,
)

DUPLICATES = "duplicates"
RULE_TEXT = {**RECORD_RULES, DUPLICATES: "exact duplicates of an earlier document"}
SHARD_NAME = r"^(train|val)_\d{6}\.bin$"


@dataclass(frozen=True)
class RuleResult:
    """One rule's measurement: ``fraction`` of ``denominator`` records, against ``limit``."""

    rule: str
    count: int
    fraction: float
    limit: float
    passed: bool
    examples: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "meaning": RULE_TEXT[self.rule],
            "count": self.count,
            "fraction": round(self.fraction, 6),
            "limit": self.limit,
            "passed": self.passed,
            "examples": list(self.examples),
        }


@dataclass
class Profile:
    """The raw records' counts Spark measured.

    Args:
        records: documents read (blank ``.txt`` lines are paragraph breaks, not counted).
        broken: records breaking each per-record rule.
        usable: records that passed every per-record rule.
        duplicates: usable records that repeat an earlier one exactly.
        examples: positions (``file line N``) of a few records breaking each rule.
    """

    records: int
    broken: Mapping[str, int]
    usable: int
    duplicates: int
    examples: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def counts(self) -> dict[str, tuple[int, int]]:
        """``{rule: (count, denominator)}``: the duplicate rate is a share of the usable
        records, the rest of all records."""
        table = {rule: (int(self.broken.get(rule, 0)), self.records) for rule in RECORD_RULES}
        table[DUPLICATES] = (self.duplicates, self.usable)
        return table


def check_profile(
    profile: Profile, *, max_bad_fraction: float, max_duplicate_rate: float
) -> list[RuleResult]:
    """Each rule's result; the limits are checked by a pandera schema."""
    import pandas as pd  # noqa: PLC0415
    import pandera.pandas as pa  # noqa: PLC0415
    from pandera.errors import SchemaErrors  # noqa: PLC0415

    counts = profile.counts()
    limits = {rule: max_bad_fraction for rule in RECORD_RULES} | {DUPLICATES: max_duplicate_rate}
    shares = {rule: (count / total if total else 0.0) for rule, (count, total) in counts.items()}
    schema = pa.DataFrameSchema(
        {
            rule: pa.Column(float, pa.Check.le(limit), nullable=False)
            for rule, limit in limits.items()
        },
        strict=True,
        name="raw record profile",
    )
    failed: set[str] = set()
    try:
        schema.validate(pd.DataFrame([shares]), lazy=True)
    except SchemaErrors as err:
        failed = set(err.failure_cases["column"].dropna().astype(str))
    return [
        RuleResult(
            rule=rule,
            count=counts[rule][0],
            fraction=shares[rule],
            limit=limits[rule],
            passed=rule not in failed,
            examples=tuple(profile.examples.get(rule, ())),
        )
        for rule in limits
    ]


def format_rules(results: Sequence[RuleResult]) -> str:
    """The rule table of a report, for a terminal."""
    lines = [f"  {'rule':<11} {'count':>8} {'share':>8} {'limit':>8}  examples (by position)"]
    for r in results:
        mark = "" if r.passed else "  <- FAILED"
        examples = ", ".join(r.examples) if r.examples else "-"
        lines.append(
            f"  {r.rule:<11} {r.count:>8} {100 * r.fraction:>7.2f}% {100 * r.limit:>7.2f}%  "
            f"{examples}{mark}"
        )
    return "\n".join(lines)


def shard_table(data_dir: Path) -> list[dict[str, Any]]:
    """One row per file in ``data_dir``: its name, size and header fields (zeros when it
    has no header)."""
    rows = []
    for path in sorted(p for p in data_dir.iterdir() if p.is_file()):
        header = unpack_header(read_header_bytes(path))
        rows.append(
            {
                "name": path.name,
                "bytes": path.stat().st_size,
                "magic": header.magic if header else 0,
                "version": header.version if header else 0,
                "tokens": header.num_tokens if header else 0,
                "vocab": header.vocab_size if header else 0,
            }
        )
    return rows


def check_shards(data_dir: Path, expected_tokens: int) -> list[str]:
    """Problems with the shards in ``data_dir`` (empty when they are sound), each naming
    the file and the check, found by a pandera schema over `shard_table`."""
    import pandas as pd  # noqa: PLC0415
    import pandera.pandas as pa  # noqa: PLC0415
    from pandera.errors import SchemaErrors  # noqa: PLC0415

    rows = shard_table(data_dir)
    if not rows:
        return [f"{data_dir}: no shard was written"]
    table = pd.DataFrame(rows)
    schema = pa.DataFrameSchema(
        {
            "name": pa.Column(str, pa.Check.str_matches(SHARD_NAME), unique=True),
            "bytes": pa.Column(int),
            "magic": pa.Column(int, pa.Check.eq(MAGIC)),
            "version": pa.Column(int, pa.Check.eq(VERSION)),
            "tokens": pa.Column(int, pa.Check.ge(1)),
            "vocab": pa.Column(int, pa.Check.eq(BYTE_VOCAB_SIZE)),
        },
        checks=[
            pa.Check(
                lambda df: df["bytes"] == HEADER_BYTES + 2 * df["tokens"],
                name="size matches header",
            ),
            pa.Check(
                lambda df: df["tokens"].sum() == expected_tokens,
                name=f"tokens add up to {expected_tokens}",
            ),
        ],
        strict=True,
        name="shards",
    )
    try:
        schema.validate(table, lazy=True)
    except SchemaErrors as err:
        problems = []
        for case in err.failure_cases.itertuples():
            index = case.index
            name = (
                table.loc[int(index), "name"]
                if index is not None and str(index).isdigit()
                else "(the shards together)"
            )
            where = f" ({case.column})" if case.schema_context == "Column" else ""
            problems.append(f"{name}: failed {case.check}{where}")
        return sorted(set(problems))
    return []
