"""The driver's and the executors' container command (`modules.k8s.spark.spec.POD_SCRIPT`)
run by bash with Spark's own arguments and environment, against stand-ins for
``spark-submit`` and ``java`` that record what they were given: a driver runs
spark-submit in client mode inside its pod, as Spark's image entrypoint does (and makes
its event-log directory); an executor runs ``KubernetesExecutorBackend`` with Spark's
Java options, heap and PySpark's jars; anything else is refused. The executor's class is
checked in the data environment's PySpark jars (the image's). The data job itself under
spark-submit, reading and writing an S3 store, is tests/data/test_object_store.py."""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from modules.k8s.spark import spec as ss
from tests.support.environments import run_in

RECORDER = """#!/bin/bash
printf '%s\\n' "$@" > "$LOG/$(basename "$0")"
"""
EXECUTOR_CLASS = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    dirs = {name: tmp_path / name for name in ("bin", "log", "java", "spark")}
    for directory in dirs.values():
        directory.mkdir()
    (dirs["java"] / "bin").mkdir()
    for path in (dirs["bin"] / "spark-submit", dirs["java"] / "bin" / "java"):
        path.write_text(RECORDER)
        path.chmod(0o755)
    return dirs


def run(place: dict[str, Path], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    events = place["log"].parent / "events"
    script = ss.POD_SCRIPT.replace(ss.EVENT_LOG_DIR, str(events))
    assert script != ss.POD_SCRIPT
    return subprocess.run(
        ["/bin/bash", "-c", script, "spark-pod", *args],
        env={
            "PATH": f"{place['bin']}:{os.environ['PATH']}",
            "LOG": str(place["log"]),
            "JAVA_HOME": str(place["java"]),
            "SPARK_HOME": str(place["spark"]),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=place["log"],
    )


def test_a_driver_runs_spark_submit_in_client_mode(place: dict[str, Path]) -> None:
    done = run(
        place,
        "driver", "--properties-file", "/opt/spark/conf/spark.properties",
        "--class", "org.apache.spark.deploy.PythonRunner", ss.MAIN_FILE, "s3://b/raw/",
        SPARK_DRIVER_BIND_ADDRESS="10.0.0.5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (place["log"] / "spark-submit").read_text().splitlines() == [
        "--conf", "spark.driver.bindAddress=10.0.0.5",
        "--conf", "spark.executorEnv.SPARK_DRIVER_POD_IP=10.0.0.5",
        "--deploy-mode", "client",
        "--properties-file", "/opt/spark/conf/spark.properties",
        "--class", "org.apache.spark.deploy.PythonRunner", ss.MAIN_FILE, "s3://b/raw/",
    ]  # fmt: skip
    assert (place["log"].parent / "events").is_dir()  # spark.eventLog.dir must exist


#: What Spark's scheduler sets on an executor pod (besides its options).
EXECUTOR_ENV = {
    "SPARK_EXECUTOR_MEMORY": "6g",
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@prepare-svc.spark-nlp.svc:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "6",
    "SPARK_APPLICATION_ID": "spark-0123",
    "SPARK_EXECUTOR_POD_IP": "10.0.0.9",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "prepare-exec-3",
}


def test_an_executor_runs_the_kubernetes_executor_backend(place: dict[str, Path]) -> None:
    done = run(
        place,
        "executor",
        SPARK_JAVA_OPT_0="-Dspark.driver.port=7078",
        SPARK_JAVA_OPT_1="--add-opens=java.base/java.nio=ALL-UNNAMED",
        **EXECUTOR_ENV,
    )
    assert done.returncode == 0, done.stderr
    assert (place["log"] / "java").read_text().splitlines() == [
        "-Dspark.driver.port=7078",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "-Xms6g", "-Xmx6g",
        "-cp", f"{place['spark']}/conf:{place['spark']}/jars/*:{place['log']}",
        EXECUTOR_CLASS,
        "--driver-url", "spark://CoarseGrainedScheduler@prepare-svc.spark-nlp.svc:7078",
        "--executor-id", "3", "--cores", "6", "--app-id", "spark-0123",
        "--hostname", "10.0.0.9", "--resourceProfileId", "0", "--podName", "prepare-exec-3",
    ]  # fmt: skip


def test_an_executor_orders_options_and_class_path_as_upstream(place: dict[str, Path]) -> None:
    """Twelve options with a repeated key, and the executor's conf and Hadoop conf
    directories set: as apache/spark-docker's ``entrypoint.sh`` (4.1.2, the template of
    every release) the options come in bash's ``${!SPARK_JAVA_OPT_@}`` order (by name:
    ``_10`` and ``_11`` before ``_2``, so ``_11``'s value of the repeated key comes
    before ``_9``'s and the JVM keeps ``_9``'s, as in Spark's image), and the class path
    starts ``$SPARK_CONF_DIR:$HADOOP_CONF_DIR`` instead of ``$SPARK_HOME/conf``."""
    options = {f"SPARK_JAVA_OPT_{i}": f"-Dopt{i}=x" for i in range(12)}
    options["SPARK_JAVA_OPT_9"] = "-Dspark.network.timeout=9s"
    options["SPARK_JAVA_OPT_11"] = "-Dspark.network.timeout=11s"
    done = run(
        place,
        "executor",
        **options,
        SPARK_CONF_DIR="/opt/spark/conf-mounted",
        HADOOP_CONF_DIR="/etc/hadoop/conf",
        **EXECUTOR_ENV,
    )
    assert done.returncode == 0, done.stderr
    given = (place["log"] / "java").read_text().splitlines()
    by_name = [options[name] for name in sorted(options)]  # _0, _1, _10, _11, _2, ...
    assert given[:12] == by_name
    assert given.index("-Dspark.network.timeout=11s") < given.index("-Dspark.network.timeout=9s")
    assert given[14:16] == [
        "-cp",
        f"/opt/spark/conf-mounted:/etc/hadoop/conf:{place['spark']}/jars/*:{place['log']}",
    ]


def test_an_executor_missing_its_environment_stops(place: dict[str, Path]) -> None:
    done = run(place, "executor")
    assert done.returncode != 0
    assert "unbound variable" in done.stderr
    assert not (place["log"] / "java").exists()


@pytest.mark.parametrize("args", [(), ("submit", "x")], ids=["nothing", "other"])
def test_other_arguments_are_refused(place: dict[str, Path], args: tuple[str, ...]) -> None:
    done = run(place, *args)
    assert done.returncode == 2
    assert "expected Spark's driver or executor arguments" in done.stderr
    assert not list(place["log"].iterdir())


def test_the_executor_class_is_in_pysparks_jars() -> None:
    """What the executor command names exists in the data image's PySpark (4.3)."""
    home = Path(
        run_in("data", "-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))").strip()
    )
    (jar,) = (home / "jars").glob("spark-kubernetes_*.jar")
    with zipfile.ZipFile(jar) as archive:
        assert EXECUTOR_CLASS.replace(".", "/") + ".class" in archive.namelist()
