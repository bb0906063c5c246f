"""The driver container's stage script (`modules.k8s.spark.spec.STAGE_SCRIPT`) run by
bash with Spark's own arguments, against stand-ins for Hadoop's file system shell (a
local directory per bucket) and ``spark-submit`` (a job that writes a dataset or fails):
it passes Spark's ``spark.hadoop.*`` settings, unescaped, to the shell; stages in, runs
the driver as Spark's image entrypoint would and stages out; and refuses to write over
an existing dataset, or to upload anything after a failed job.

The script's scratch paths (``/work/...``) are pointed at a temporary directory; nothing
else of it is changed. The last test runs the real thing: the data job (``python -m
workloads.data.prepare`` through the application's main file) under the data
environment's own ``spark-submit``, with a Kubernetes master in its properties as the
driver pod has them, and Hadoop's own FsShell staging from and to ``file://`` (the data
environment has no S3A; the stores are directories)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from modules.k8s.spark import spec as ss
from tests.support.environments import python

KEY = "arn:aws:kms:me-central-1:123456789012:key/00000000-0000-4000-8000-000000000001"
BUCKET = "gpu-test-data"
INPUT = f"s3a://{BUCKET}/teams/a/raw/corpus/"
OUTPUT = f"s3a://{BUCKET}/teams/a/datasets/corpus-v1/"
LOGS = f"s3a://{BUCKET}/spark-events/a/"

# Hadoop's FsShell, on a local directory standing in for the store: records its -D
# settings and commands, and does what -test -e, -mkdir -p, -copyToLocal and -put do.
FS_SHELL = r"""#!/bin/bash
set -eu
[ "$1" = org.apache.hadoop.fs.FsShell ] || { echo "not FsShell: $1" >&2; exit 9; }
shift
while [ "$1" = -D ]; do echo "$2" >> "$LOG/settings"; shift 2; done
echo "$*" >> "$LOG/fs"
local_path() { echo "$STORE/${1#s3a://}"; }
case "$1" in
  -test) [ -n "${FS_TEST_FAILS:-}" ] && exit 255; [ -e "$(local_path "$3")" ] && exit 0 || exit 1 ;;
  -mkdir) mkdir -p "$(local_path "$3")" ;;
  -copyToLocal) cp -r "$(local_path "$2")" "$3" ;;
  -put) [ "$2" = -d ] || exit 9; shift 2; target=$(local_path "${@: -1}")
        [ -d "$target" ] || { echo "put: $target: No such file or directory" >&2; exit 1; }
        for source in "${@:1:$#-1}"; do cp -r "$source" "$target"; done ;;
  *) echo "unexpected: $*" >&2; exit 9 ;;
esac
"""
# spark-submit with the data job: reads the staged input, writes the dataset (or fails).
SPARK_SUBMIT = r"""#!/bin/bash
set -eu
echo "$*" > "$LOG/submit"
[ -f "$WORK/input/part-0.txt" ] || { echo "input not staged" >&2; exit 9; }
[ "${JOB_EXIT:-0}" = 0 ] || exit "$JOB_EXIT"
mkdir -p "$WORK/output"
echo '{"digest": "sha256:x"}' > "$WORK/output/manifest.json"
echo tokens > "$WORK/output/train_000000.bin"
"""
PROPERTIES = (
    "#Java properties built from Kubernetes config map with name: spark-drv-conf-map\n"
    "spark.app.name=prepare-corpus\n"
    "spark.eventLog.dir=s3a\\://gpu-test-data/spark-events/a/\n"
    "spark.hadoop.fs.s3a.encryption.algorithm=SSE-KMS\n"
    f"spark.hadoop.fs.s3a.encryption.key={KEY.replace(':', chr(92) + ':')}\n"
    "spark.hadoop.fs.s3a.endpoint.region=me-central-1\n"
)


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    dirs = {name: tmp_path / name for name in ("bin", "log", "store", "work", "conf")}
    for directory in dirs.values():
        directory.mkdir()
    for name, text in (("spark-class", FS_SHELL), ("spark-submit", SPARK_SUBMIT)):
        (dirs["bin"] / name).write_text(text)
        (dirs["bin"] / name).chmod(0o755)
    raw = dirs["store"] / BUCKET / "teams/a/raw/corpus"
    raw.mkdir(parents=True)
    (raw / "part-0.txt").write_text("one document\n")
    (dirs["conf"] / "spark.properties").write_text(PROPERTIES)
    return dirs


def run(place: dict[str, Path], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = ss.STAGE_SCRIPT.replace(f"{ss.WORK_DIR}/", f"{place['work']}/")
    assert script.count(f"{place['work']}/") == ss.STAGE_SCRIPT.count(f"{ss.WORK_DIR}/") > 0
    spark_args = args or (
        "driver",
        "--properties-file", str(place["conf"] / "spark.properties"),
        "--class", "org.apache.spark.deploy.PythonRunner",
        ss.MAIN_FILE, *ss.job_arguments(
            ss.SparkJobSpec(name="prepare-corpus", team="a", source="corpus", dataset="corpus-v1")
        ),
    )  # fmt: skip
    environment = {
        "PATH": f"{place['bin']}:{os.environ['PATH']}",
        "LOG": str(place["log"]),
        "STORE": str(place["store"]),
        "WORK": str(place["work"]),
        "SPARK_DRIVER_BIND_ADDRESS": "10.0.0.5",
        ss.ENV_INPUT: INPUT,
        ss.ENV_OUTPUT: OUTPUT,
        ss.ENV_EVENT_LOG: LOGS,
        **env,
    }
    return subprocess.run(
        ["/bin/bash", "-c", script, "stage", *spark_args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_job_is_staged_in_run_as_the_driver_and_staged_out(place: dict[str, Path]) -> None:
    done = run(place)
    assert done.returncode == 0, done.stderr
    settings = (place["log"] / "settings").read_text().splitlines()
    # Each FsShell call gets Spark's spark.hadoop.* settings, the key unescaped.
    assert settings[:3] == [
        "fs.s3a.encryption.algorithm=SSE-KMS",
        f"fs.s3a.encryption.key={KEY}",
        "fs.s3a.endpoint.region=me-central-1",
    ]
    assert (place["log"] / "fs").read_text().splitlines() == [
        f"-mkdir -p {LOGS}",
        f"-test -e {OUTPUT}",
        f"-copyToLocal {INPUT} {place['work']}/input",
        f"-mkdir -p {OUTPUT}",
        f"-put -d {place['work']}/output/manifest.json {place['work']}/output/train_000000.bin "
        f"{OUTPUT}",
    ]
    submitted = (place["log"] / "submit").read_text().split()
    assert submitted[:6] == [
        "--conf", "spark.driver.bindAddress=10.0.0.5",
        "--conf", "spark.executorEnv.SPARK_DRIVER_POD_IP=10.0.0.5",
        "--deploy-mode", "client",
    ]  # fmt: skip
    assert submitted[6:8] == ["--properties-file", str(place["conf"] / "spark.properties")]
    assert "driver" not in submitted and ss.MAIN_FILE in submitted
    written = place["store"] / BUCKET / "teams/a/datasets/corpus-v1"
    assert sorted(p.name for p in written.iterdir()) == ["manifest.json", "train_000000.bin"]


def test_an_existing_dataset_is_never_written_over(place: dict[str, Path]) -> None:
    existing = place["store"] / BUCKET / "teams/a/datasets/corpus-v1"
    existing.mkdir(parents=True)
    (existing / "manifest.json").write_text("the earlier version")
    done = run(place)
    assert done.returncode == 2
    assert "exists; a dataset is written once" in done.stderr
    assert not (place["log"] / "submit").exists()
    assert [p.name for p in existing.iterdir()] == ["manifest.json"]
    assert (existing / "manifest.json").read_text() == "the earlier version"


def test_a_failed_job_uploads_nothing_and_keeps_its_exit_status(place: dict[str, Path]) -> None:
    done = run(place, JOB_EXIT="3")
    assert done.returncode == 3
    assert not (place["store"] / BUCKET / "teams/a/datasets").exists()
    assert not any(
        line.startswith("-put") for line in (place["log"] / "fs").read_text().splitlines()
    )


def test_an_unreadable_store_stops_before_the_job(place: dict[str, Path]) -> None:
    done = run(place, FS_TEST_FAILS="1")
    assert done.returncode == 2
    assert "cannot tell whether" in done.stderr
    assert not (place["log"] / "submit").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("executor", "--properties-file", "x"), "expected Spark's driver arguments"),
        (("driver", "--class", "x"), "no readable --properties-file"),
    ],
    ids=["not-a-driver", "no-properties"],
)
def test_other_arguments_are_refused(
    place: dict[str, Path], args: tuple[str, ...], message: str
) -> None:
    done = run(place, *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert not (place["log"] / "fs").exists()


@pytest.mark.slow
def test_the_data_job_runs_through_the_stage_script_under_spark_submit(tmp_path: Path) -> None:
    """About a minute and a half on a 2-core machine: Spark in local mode, Presidio."""
    data_bin = python("data").parent
    store, work, main = tmp_path / "store", tmp_path / "work", tmp_path / "main"
    raw = store / "raw" / "corpus"
    for directory in (raw, work, main):
        directory.mkdir(parents=True)
    lines = [f"record {i} of the corpus, written in the region" for i in range(40)]
    lines.append("reach me on +971 50 123 4567 or a.b@example.ae")
    (raw / "part-0.txt").write_text("\n".join(lines) + "\n")
    (main / "main.py").write_text(ss.MAIN_SOURCE)
    events = f"file://{store}/spark-events/a/"
    output = f"file://{store}/datasets/corpus-v1/"
    properties = tmp_path / "spark.properties"
    # What spark-submit in the operator writes for the driver pod (Java properties).
    properties.write_text(
        "\n".join(
            f"{key}={value.replace(':', chr(92) + ':')}"
            for key, value in {
                "spark.master": "k8s://https://kubernetes.default.svc:443",
                "spark.submit.deployMode": "cluster",
                "spark.kubernetes.submitInDriver": "true",
                "spark.app.name": "prepare-corpus",
                "spark.driver.memory": "1g",
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": events,
                "spark.ui.enabled": "false",
                "spark.hadoop.fs.s3a.encryption.algorithm": "SSE-KMS",
            }.items()
        )
        + "\n"
    )
    job = ss.SparkJobSpec(name="prepare-corpus", team="a", source="corpus", dataset="corpus-v1",
                          cores=2)  # fmt: skip
    arguments = [a.replace(f"{ss.WORK_DIR}/", f"{work}/") for a in ss.job_arguments(job)]
    script = ss.STAGE_SCRIPT.replace(f"{ss.WORK_DIR}/", f"{work}/")
    done = subprocess.run(
        ["/bin/bash", "-c", script, "stage", "driver", "--properties-file", str(properties),
         "--class", "org.apache.spark.deploy.PythonRunner", f"local://{main}/main.py",
         *arguments],
        env={
            "PATH": f"{data_bin}:{os.environ['PATH']}",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            "HOME": str(tmp_path),
            "SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1",
            ss.ENV_INPUT: f"file://{raw}/",
            ss.ENV_OUTPUT: output,
            ss.ENV_EVENT_LOG: events,
        },
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "prepare: dataset corpus-v1 version" in done.stderr + done.stdout
    dataset = store / "datasets" / "corpus-v1"
    manifest = json.loads((dataset / "manifest.json").read_text())
    report = json.loads((dataset / "report.json").read_text())
    assert {s["name"] for s in manifest["shards"]} <= {p.name for p in dataset.iterdir()}
    assert report["pii"]["hits_by_type"]["PHONE_NUMBER"] == 1
    assert list((store / "spark-events" / "a").iterdir())  # the event log
    # A second run is refused before Spark starts: the dataset is written once.
    again = subprocess.run(
        ["/bin/bash", "-c", script, "stage", "driver", "--properties-file", str(properties)],
        env={"PATH": f"{data_bin}:{os.environ['PATH']}", "HOME": str(tmp_path),
             ss.ENV_INPUT: f"file://{raw}/", ss.ENV_OUTPUT: output, ss.ENV_EVENT_LOG: events},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert again.returncode == 2 and "written once" in again.stderr
