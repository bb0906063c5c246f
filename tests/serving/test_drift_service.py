"""The drift service turns KServe request-logger CloudEvents into the drift metric the
alert and dashboard read, for both runtimes' payloads.

The events are real CloudEvents in HTTP binary mode (the `cloudevents` SDK's
``to_binary``, as KServe's agent sends them with the Go SDK: ``ce-*`` headers, the
request body as data, the ``metadata`` and ``annotations`` extensions as JSON strings),
carrying V2 request bodies built by tritonclient's own encoder
(``InferenceServerClient.generate_request_body``): the CPU predictor's JSON ``text``
requests and Triton's binary ``token_ids`` tensors. The service runs as its own process
(`python -m workloads.serving.drift_service`), bound to 127.0.0.1.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as thttp
from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent

from tests.support.environments import run_in
from tests.workloads.helpers import free_port
from workloads.inference.drift import REFERENCE_FILE, DriftReference, DriftWindow, corpus_prompts
from workloads.serving import drift_service

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "workloads" / "data" / "corpus.txt"
ISVC = "example-uae-gpt"


@pytest.fixture(scope="module")
def references(export_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two registered versions' directories as the init container lays them out: the
    export's drift reference and model card (version 2's card says step 40)."""
    root = tmp_path_factory.mktemp("drift")
    out = {}
    for version in ("1", "2"):
        directory = root / f"v{version}"
        directory.mkdir()
        shutil.copy(export_dir / REFERENCE_FILE, directory / REFERENCE_FILE)
        card = json.loads((export_dir / "model_card.json").read_text())
        card["source"]["step"] = "20" if version == "1" else "40"
        (directory / "model_card.json").write_text(json.dumps(card))
        out[version] = directory
    return out


@pytest.fixture(scope="module")
def service(
    references: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    port, metrics_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("drift-log") / "drift.log"
    command = [
        sys.executable, "-m", "workloads.serving.drift_service", "--model", ISVC,
        "--reference", f"1={references['1']}", "--reference", f"2={references['2']}",
        "--port", str(port), "--metrics-port", str(metrics_port), "--window", "200",
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    events, metrics = f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the drift service did not start: {log.read_text()}")
                time.sleep(0.3)
        yield events, metrics
    finally:
        process.terminate()
        process.wait(timeout=20)


# --- payloads, as the two runtimes receive them ----------------------------------------------


def cpu_request(prompts: list[str]) -> tuple[bytes, dict[str, Any]]:
    """The CPU predictor's request: JSON ``text`` (tritonclient, binary_data=False)."""
    tensor = thttp.InferInput("text", [len(prompts)], "BYTES")
    tensor.set_data_from_numpy(np.array([p.encode() for p in prompts], dtype=object), False)
    body, json_size = thttp.InferenceServerClient.generate_request_body(
        [tensor], parameters={"max_new_tokens": 8}
    )
    assert json_size is None  # all JSON
    return body, {}


def triton_request(rows: list[list[int]], log_header: bool = True) -> tuple[bytes, dict[str, Any]]:
    """Triton's request: ``token_ids`` INT64 as a binary tensor (tritonclient's default);
    the binary header is logged as metadata when the logger's metadataHeaders has it."""
    tensor = thttp.InferInput("token_ids", [len(rows), len(rows[0])], "INT64")
    tensor.set_data_from_numpy(np.asarray(rows, dtype=np.int64), binary_data=True)
    body, json_size = thttp.InferenceServerClient.generate_request_body([tensor])
    assert json_size is not None and json_size < len(body)
    metadata = {"Inference-Header-Content-Length": [str(json_size)]} if log_header else {}
    return body, metadata


def binary_text_request(prompts: list[str]) -> tuple[bytes, dict[str, Any]]:
    tensor = thttp.InferInput("text", [len(prompts)], "BYTES")
    tensor.set_data_from_numpy(np.array([p.encode() for p in prompts], dtype=object), True)
    body, json_size = thttp.InferenceServerClient.generate_request_body([tensor])
    return body, {"Inference-Header-Content-Length": [str(json_size)]}


def logged_event(
    body: bytes,
    metadata: dict[str, Any],
    version: str | None,
    kind: str = drift_service.REQUEST_EVENT,
    service: str = ISVC,
) -> tuple[dict[str, str], bytes]:
    """A CloudEvent as KServe's agent (pkg/logger/worker.go) sends it, binary mode."""
    attributes = {
        "type": kind,
        "source": "example-uae-gpt-v1-predictor-7d9f",
        "id": f"req-{random.random()}",
        "inferenceservicename": service,
        "namespace": "team-analytics",
        "component": "predictor",
        "endpoint": "",
        "metadata": json.dumps(metadata),
        "datacontenttype": "application/json",
    }
    if version is not None:
        attributes["annotations"] = json.dumps({drift_service.VERSION_ANNOTATION: version})
    headers, data = to_binary(CloudEvent(attributes, body), data_marshaller=lambda d: d)
    return dict(headers), data


def post(url: str, event: tuple[dict[str, str], bytes]) -> tuple[int, Any]:
    headers, data = event
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def scores(metrics_url: str) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(metrics_url, timeout=30) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("uae_predictor_drift_score{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            assert labels["model"] == ISVC
            out[(labels["version"], labels["statistic"])] = float(line.rsplit(" ", 1)[1])
    return out


def test_both_runtimes_payloads_become_the_drift_metric(
    service: tuple[str, str], references: dict[str, Path]
) -> None:
    """In-distribution prompts logged from the CPU predictor (JSON text) into version 1
    and from Triton (binary token ids) into version 2 give exactly the scores of a
    drift window fed the same prompts, under each version's label."""
    events, metrics = service
    prompts = corpus_prompts(CORPUS)
    random.Random(0).shuffle(prompts)
    texts = [bytes(p).decode("utf-8", "replace") for p in prompts[:60]]
    rows = [p[:16] for p in prompts[60:120] if len(p) >= 16][:40]
    expected = {v: DriftWindow(DriftReference.read(references[v] / REFERENCE_FILE), 200)
                for v in ("1", "2")}  # fmt: skip
    for start in range(0, len(texts), 4):
        batch = texts[start : start + 4]
        assert post(events, logged_event(*cpu_request(batch), "1"))[0] == 200
        for text in batch:
            expected["1"].add(list(text.encode()))
    for start in range(0, len(rows), 5):
        batch = rows[start : start + 5]
        log_header = start % 10 == 0  # with and without the logged binary header
        assert post(events, logged_event(*triton_request(batch, log_header), "2"))[0] == 200
        for row in batch:
            expected["2"].add(row)
    found = scores(metrics)
    for version, label in (("1", "step-20"), ("2", "step-40")):
        for statistic, value in expected[version].scores().items():
            assert found[(label, statistic)] == pytest.approx(value, rel=1e-12), (label, statistic)
    assert set(found) == {(label, s) for label in ("step-20", "step-40")
                          for s in ("token_js", "prompt_length_psi")}  # fmt: skip


def test_shifted_traffic_crosses_the_alert_thresholds(service: tuple[str, str]) -> None:
    """Arabic prompts (bytes the English corpus never has) in binary BYTES tensors push
    token_js above the ModelInputDrift threshold of the shipped defaults."""
    from tests.serving.test_drift import TOKEN_JS_THRESHOLD  # noqa: PLC0415

    events, metrics = service
    earlier = scores(metrics)
    before = earlier[("step-20", "token_js")]
    for _ in range(60):
        post(events, logged_event(*binary_text_request(["مرحبا", "بالعالم"]), "1"))
    after = scores(metrics)
    assert before < TOKEN_JS_THRESHOLD < after[("step-20", "token_js")]
    # The other version's window is untouched.
    assert after[("step-40", "token_js")] == earlier[("step-40", "token_js")]


REFUSED = {
    "an unknown event type": lambda: logged_event(*cpu_request(["a"]), "1", kind="com.example"),
    "another InferenceService's event": lambda: logged_event(*cpu_request(["a"]), "1", service="x"),
    "a version without a reference": lambda: logged_event(*cpu_request(["a"]), "7"),
    "no version with two references": lambda: logged_event(*cpu_request(["a"]), None),
    "a body that is not V2": lambda: logged_event(b'{"instances": [1]}', {}, "1"),
    "no text or token_ids input": lambda: logged_event(
        b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}', {}, "1"
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_events_it_cannot_use_are_refused_and_counted(service: tuple[str, str], case: str) -> None:
    events, _ = service
    status, answer = post(events, REFUSED[case]())
    assert status == 400 and set(answer) == {"error"}, answer


def test_response_events_are_counted_not_used(service: tuple[str, str]) -> None:
    events, metrics = service
    before = scores(metrics)
    body = (
        b'{"model_name": "m", "outputs": [{"name": "text", "datatype": "BYTES", "shape": [1], '
        b'"data": ["x"]}]}'
    )
    assert post(events, logged_event(body, {}, "1", kind=drift_service.RESPONSE_EVENT))[0] == 200
    assert scores(metrics) == before
    with urllib.request.urlopen(metrics, timeout=30) as response:
        text = response.read().decode()
    assert re.search(
        rf'uae_drift_events_total{{outcome="ignored",type="{drift_service.RESPONSE_EVENT}"}} 1',
        text,
    ), text


def test_the_metric_is_the_one_the_alert_and_dashboard_read() -> None:
    """The drift service's gauge has the name and labels the ModelInputDrift alert and
    the dashboard query (modules/k8s/serving/observability.py, plan environment)."""
    read = json.loads(run_in("plan", "-c", OBSERVED))
    assert read["metric"] == drift_service.DRIFT_NAME
    assert all(drift_service.DRIFT_NAME in expr for expr in read["alert"])
    assert {"model", "version", "statistic"} == set(drift_service.DRIFT_LABELS)
    assert any(drift_service.DRIFT_NAME in expr for expr in read["panels"])


OBSERVED = """
import json
from modules.k8s.serving import observability as o
from modules.k8s.serving.spec import ServingSpec
spec = ServingSpec()
alert = [r.expr for r in o.serving_alert_rules(spec) if r.alert == "ModelInputDrift"]
dash = json.dumps(o.serving_dashboard(spec))
print(json.dumps({"metric": o.DRIFT, "alert": alert,
                  "panels": [p for p in [dash] if o.DRIFT in p]}))
"""


def test_bad_configuration_is_one_message_and_exit_2(tmp_path: Path) -> None:
    for args in (["--reference", "1"], ["--reference", f"1={tmp_path}"], []):
        result = subprocess.run(
            [sys.executable, "-m", "workloads.serving.drift_service", "--model", "m", *args],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 2, result
        assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
