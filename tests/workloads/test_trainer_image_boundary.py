"""What the training image can import: no Spark, pandas, pandera or Presidio. The
trainer's manifest check (workloads.data.manifest, shard_format) must work there, in a
subprocess where importing the data image's packages fails (tests/support/blocking.py)."""

from __future__ import annotations

from tests.support.blocking import run_blocking

NOT_IN_TRAINING_IMAGE = ("pyspark", "pandas", "pandera", "presidio_analyzer", "spacy")


def test_the_trainers_manifest_check_needs_no_data_set() -> None:
    code = (
        "import workloads.data.manifest, workloads.data.shard_format; "
        "import workloads.training.train"
    )
    result = run_blocking(NOT_IN_TRAINING_IMAGE, "-c", code)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_blocker_blocks() -> None:
    result = run_blocking(("pandas",), "-c", "import pandas")
    assert result.returncode != 0 and "pandas is blocked" in result.stderr
