"""`make pipeline` end to end on a tiny corpus, with KFP's local runner and a real MLflow
server (the lifecycle environment's, as `make track` starts it):

1. the first run goes from raw files with planted personal data to a registered model
   version, the registry's ``champion``, whose run names the dataset (an MLflow dataset
   input whose digest is the dataset's manifest digest); the planted values are not in
   the shards; the canary step plans the first version as the stable one;
2. a second run whose model is worse (one training step) stops at the evaluation gate
   with its message and exit status 3, and registers nothing.

Slow (two pipeline runs, each a Spark job and a training run; minutes on a shared
2-core machine): the tiny preset, a 40 kB corpus, a few steps. The registry is read through
MLflow's REST API from this process (the pipelines environment has no MLflow client).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.environments import python
from workloads.pipelines.local import EXIT_GATE, EXIT_OK

ROOT = Path(__file__).resolve().parents[2]
MODEL = "e2e-tiny"
PLANTED = {
    "EMAIL_ADDRESS": "layla.haddad@example.ae",
    "PHONE_NUMBER": "050 123 4567",
}

#: JVM options for a JVM that lives a minute (see `run_pipeline`).
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def tracking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`make track`'s server (workloads.tracking.server) on a free port, store in a
    temporary directory; stopped at the end, and by `timeout` whatever happens."""
    root = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    log = (root / "server.log").open("wb")
    process = subprocess.Popen(
        ["timeout", "2700", str(python("lifecycle")), "-m", "workloads.tracking.server",
         "--port", str(port), "--root", str(root / "store")],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((root / "server.log").read_text()[-2000:]) from None
                time.sleep(0.2)
        yield uri
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("raw")
    corpus = (ROOT / "workloads/data/corpus.txt").read_bytes()[:40_000]
    (folder / "corpus.txt").write_bytes(corpus[: corpus.rfind(b"\n") + 1])
    records = [
        f"Write to {PLANTED['EMAIL_ADDRESS']} about the shipment.",
        f"The driver can be reached on {PLANTED['PHONE_NUMBER']} after noon.",
    ]
    (folder / "notes.jsonl").write_text("".join(json.dumps({"text": r}) + "\n" for r in records))
    return folder


def run_pipeline(
    source: Path, uri: str, root: Path, steps: int
) -> subprocess.CompletedProcess[str]:
    # The steps inherit the environment. One OpenMP thread for their PyTorch: on the tiny
    # model a second thread adds no speed, and on a busy machine its spin-waiting costs
    # several times the CPU of the training itself. The Spark job's JVM lives a minute over
    # a few hundred records: C1 alone compiles well enough for that (no C2 recompiling in
    # the background) and the serial collector needs no GC threads (as tests/data's JVMs).
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "JAVA_TOOL_OPTIONS": f"{SHORT_LIVED_JVM} {os.environ.get('JAVA_TOOL_OPTIONS', '')}".strip(),
    }
    return subprocess.run(
        [sys.executable, "-m", "workloads.pipelines.local", str(source), "--tracking-uri", uri,
         "--name", MODEL, "--steps", str(steps), "--nproc", "1", "--spark-workers", "1",
         "--root", str(root)],
        cwd=ROOT, capture_output=True, text=True, timeout=1500, check=False,
        env=env,
    )  # fmt: skip


def _api(uri: str, endpoint: str, query: dict[str, str] | None = None, body: Any = None) -> Any:
    """One call of MLflow's REST API (what its client sends), from this process: a GET
    with ``query``, or a POST of ``body``."""
    url = f"{uri}/api/2.0/mlflow/{endpoint}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)


def registry(uri: str) -> dict[str, Any]:
    """The model's versions, aliases and, per version, its run's dataset inputs and
    evaluation figures, read through MLflow's REST API."""
    out: dict[str, Any] = {"versions": {}, "runs": {}, "aliases": {}}
    models = _api(uri, "registered-models/search", {"filter": f"name = '{MODEL}'"})
    for model in models.get("registered_models", []):
        out["aliases"] = {a["alias"]: str(a["version"]) for a in model.get("aliases", [])}
    versions = _api(uri, "model-versions/search", {"filter": f"name = '{MODEL}'"})
    for v in versions.get("model_versions", []):
        tags = {t["key"]: t["value"] for t in v.get("tags", [])}
        out["versions"][str(v["version"])] = {"run_id": v["run_id"], "tags": tags}
    experiments = _api(uri, "experiments/search", body={"max_results": 1000})
    ids = [e["experiment_id"] for e in experiments.get("experiments", [])]
    for run in _api(uri, "runs/search", body={"experiment_ids": ids}).get("runs", []):
        inputs = run.get("inputs", {}).get("dataset_inputs", [])
        out["runs"][run["info"]["run_id"]] = {
            "datasets": [
                {
                    "name": d["dataset"]["name"],
                    "digest": d["dataset"]["digest"],
                    "context": {t["key"]: t["value"] for t in d.get("tags", [])}.get(
                        "mlflow.data.context"
                    ),
                }
                for d in inputs
            ],
            "metrics": {m["key"]: m["value"] for m in run["data"].get("metrics", [])},
            "tags": {
                t["key"]: t["value"]
                for t in run["data"].get("tags", [])
                if t["key"].startswith("eval.")
            },
        }
    return out


def tokens(text: str) -> bytes:
    """Text as it is in a shard: byte-level tokens, each UTF-8 byte a little-endian uint16."""
    return bytes(x for b in text.encode() for x in (b, 0))


def only_run(root: Path, before: set[Path]) -> Path:
    runs = set(root.glob("data-to-model-*")) - before
    assert len(runs) == 1, runs
    return runs.pop()


@pytest.fixture(scope="module")
def first(
    tracking: str, source: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess[str], Path]:
    root = tmp_path_factory.mktemp("runs")
    result = run_pipeline(source, tracking, root, steps=30)
    assert result.returncode == EXIT_OK, result.stdout[-6000:] + result.stderr[-3000:]
    return result, only_run(root, set())


def test_a_first_run_ends_in_a_registered_champion_that_names_its_dataset(
    tracking: str, source: Path, first: tuple[subprocess.CompletedProcess[str], Path]
) -> None:
    result, run_dir = first
    manifest = json.loads((run_dir / "prepare/dataset/manifest.json").read_text())
    found = registry(tracking)
    assert list(found["versions"]) == ["1"]
    assert found["aliases"] == {"champion": "1"}
    run = found["runs"][found["versions"]["1"]["run_id"]]
    # The registered version's run names its data: the dataset input, whose digest is
    # the manifest's (the dataset version), logged by the trainer.
    assert run["datasets"] == [
        {"name": manifest["name"], "digest": manifest["digest"], "context": "training"}
    ]
    assert manifest["name"] == source.name  # the driver names the dataset after SOURCE
    assert run["tags"] == {"eval.champion_version": "none", "eval.gate": "passed"}
    assert run["metrics"]["eval.heldout_loss"] > 0
    # The pipeline's output and the canary's plan name the version; a first version is
    # served as the stable one (no champion to run a canary beside).
    assert "The model version is 1" in result.stdout
    plan = json.loads((run_dir / "canary/plan").read_text())
    assert (plan["version"], plan["alias"], plan["mode"]) == ("1", "champion", "stable")
    assert any("modelVersion' 1" in line for line in plan["commands"])
    assert plan["storage_path"] == found["versions"]["1"]["tags"]["storage_path.triton"]


def test_the_planted_personal_data_is_not_in_the_shards(
    first: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, run_dir = first
    dataset = run_dir / "prepare/dataset"
    shards = b"".join(p.read_bytes() for p in sorted(dataset.glob("*_*.bin")))
    for value in PLANTED.values():
        assert tokens(value) not in shards, value
    assert tokens("<EMAIL_ADDRESS>") in shards and tokens("<PHONE_NUMBER>") in shards
    report = json.loads((dataset / "report.json").read_text())
    assert report["pii"]["hits_by_type"]["EMAIL_ADDRESS"] >= 1
    assert report["pii"]["hits_by_type"]["PHONE_NUMBER"] >= 1
    # The ingest step's copy and listing are what the data step read.
    listing = json.loads((run_dir / "ingest/snapshot/ingest.json").read_text())
    assert [f["path"] for f in listing["files"]] == ["corpus.txt", "notes.jsonl"]


def test_a_worse_model_stops_at_the_gate_and_registers_nothing(
    tracking: str, source: Path, first: tuple[subprocess.CompletedProcess[str], Path]
) -> None:
    root = first[1].parent
    before = set(root.glob("data-to-model-*"))
    result = run_pipeline(source, tracking, root, steps=1)
    assert result.returncode == EXIT_GATE, result.stdout[-6000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "pipeline: stopped at evaluate (exit status 1)" in result.stderr
    assert "nothing was exported or registered" in result.stderr
    assert "is WORSE than the champion (model 'e2e-tiny' version 1)" in result.stdout
    run_dir = only_run(root, before)
    assert not (run_dir / "export").exists() and not (run_dir / "register").exists()
    found = registry(tracking)
    assert list(found["versions"]) == ["1"]
    assert found["aliases"] == {"champion": "1"}
    gated = [r for r in found["runs"].values() if r["tags"].get("eval.gate") == "failed"]
    assert len(gated) == 1
    assert gated[0]["tags"]["eval.champion_version"] == "1"
    assert (
        gated[0]["metrics"]["eval.heldout_loss"] > gated[0]["metrics"]["eval.champion_heldout_loss"]
    )
