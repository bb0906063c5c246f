"""The CPU predictor served locally (`python -m workloads.serving`, bound to 127.0.0.1,
killed at the end): V2 ready/metadata/infer equal to the inference library, batching of
concurrent requests, a 4xx for every bad input with the server staying up and the error
counted, load shed with 429 instead of unbounded queueing.

Runs in the serving environment, which has no torch, as the predictor image has none:
the model it serves is trained and exported by the training and lifecycle environments."""

from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.serving.conftest import run_kserve_snippet
from tests.support.environments import run_in
from tests.support.model_server import model_server
from tests.workloads.helpers import free_port
from workloads.inference import OnnxLM, drift

ROOT = Path(__file__).resolve().parents[2]
MAX_BODY = 4096
MAX_IN_FLIGHT = 4


@pytest.fixture(scope="module")
def server(export_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    command = [
        "timeout", "600", sys.executable, "-m", "workloads.serving",
        "--model-dir", str(export_dir), "--port", str(port),
        "--max-body-bytes", str(MAX_BODY), "--max-in-flight", str(MAX_IN_FLIGHT),
        "--timeout-s", "60", "--threads", "1", "--grpc-port", "0",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("serving-log") / "server.log"
    with model_server(command, lambda: get(f"{url}/v2/models/tiny/ready")[0] == 200, log, poll_s=1):
        yield url


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def post(url: str, body: bytes | dict[str, Any]) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def text_request(prompts: list[str], new_tokens: int = 8) -> dict[str, Any]:
    return {
        "inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(prompts)], "data": prompts}],
        "parameters": {"max_new_tokens": new_tokens},
    }


def ids_request(rows: list[list[int]], datatype: str = "INT64") -> dict[str, Any]:
    shape = [len(rows), len(rows[0]) if rows else 0]
    flat = [t for row in rows for t in row]
    return {"inputs": [{"name": "token_ids", "datatype": datatype, "shape": shape, "data": flat}]}


def metric(url: str, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_ready_and_metadata(server: str) -> None:
    for model in ("tiny", "tiny-int8"):
        assert get(f"{server}/v2/models/{model}/ready") == (200, {"name": model, "ready": True})
        status, meta = get(f"{server}/v2/models/{model}")
        assert status == 200
        assert {i["name"] for i in meta["inputs"]} == {"text", "token_ids"}
        assert {o["name"] for o in meta["outputs"]} == {"text", "logits"}


@pytest.mark.parametrize(("model", "variant"), [("tiny", "fp32"), ("tiny-int8", "int8")])
def test_outputs_equal_the_inference_library(
    server: str, export_dir: Path, model: str, variant: str
) -> None:
    lm = OnnxLM.load(export_dir, variant=variant)  # type: ignore[arg-type]
    prompts = ["The ", "Abu Dhabi is"]
    status, answer = post(f"{server}/v2/models/{model}/infer", text_request(prompts, 8))
    assert status == 200, answer
    assert answer["model_version"] == "step-20"
    assert answer["outputs"][0]["data"] == lm.generate_text(prompts, 8)
    rows = [[84, 104, 101], [65, 98, 117]]
    status, answer = post(f"{server}/v2/models/{model}/infer", ids_request(rows))
    assert status == 200, answer
    out = answer["outputs"][0]
    assert out["name"] == "logits" and out["shape"] == [2, 3, lm.vocab_size]
    served = np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])
    np.testing.assert_allclose(served, lm.logits(rows), rtol=1e-5, atol=1e-5)


def test_concurrent_requests_are_batched(server: str) -> None:
    before_sum = metric(server, "uae_predictor_batch_size_sum", model="tiny")
    before_count = metric(server, "uae_predictor_batch_size_count", model="tiny")
    with concurrent.futures.ThreadPoolExecutor(MAX_IN_FLIGHT) as pool:
        answers = list(
            pool.map(
                lambda i: post(f"{server}/v2/models/tiny/infer", text_request([f"Prompt {i}"], 24)),
                range(3 * MAX_IN_FLIGHT),
            )
        )
    assert {status for status, _ in answers} <= {200, 429}
    served = sum(1 for status, _ in answers if status == 200)
    requests = metric(server, "uae_predictor_batch_size_sum", model="tiny") - before_sum
    calls = metric(server, "uae_predictor_batch_size_count", model="tiny") - before_count
    assert requests == served
    assert calls < served, f"{served} requests in {calls} model calls: nothing was batched"


def one_input(name: str, datatype: str, shape: list[int], data: list[Any]) -> dict[str, Any]:
    return {"inputs": [{"name": name, "datatype": datatype, "shape": shape, "data": data}]}


BAD_REQUESTS: dict[str, tuple[bytes | dict[str, Any], int]] = {
    "malformed JSON": (b'{"inputs": [', 400),
    "no inputs": ({"inputs": []}, 400),
    "unknown input name": (one_input("x", "INT64", [1, 1], [1]), 400),
    "wrong dtype": (ids_request([[1, 2]], "FP32"), 400),
    "wrong shape": (one_input("token_ids", "INT64", [3], [1, 2, 3]), 400),
    "data does not fit the shape": (one_input("token_ids", "INT64", [2, 2], [1, 2, 3]), 400),
    "empty batch": (one_input("text", "BYTES", [0], []), 400),
    "token id outside the vocabulary": (ids_request([[1, 999]]), 400),
    "text over the context length": (text_request(["x" * 1000], 8), 400),
    "too many new tokens": (text_request(["The "], 100_000), 400),
    "body over the size limit": (text_request(["x" * (2 * MAX_BODY)]), 413),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_every_bad_input_is_a_4xx_and_counted(server: str, case: str) -> None:
    body, code = BAD_REQUESTS[case]
    before = metric(server, "uae_predictor_requests_total", model="tiny", code=str(code))
    status, answer = post(f"{server}/v2/models/tiny/infer", body)
    assert status == code, answer
    assert set(answer) == {"error"} and answer["error"], answer
    assert (
        metric(server, "uae_predictor_requests_total", model="tiny", code=str(code)) == before + 1
    )
    assert get(f"{server}/v2/models/tiny/ready")[0] == 200


def test_text_whose_data_does_not_fit_its_shape_says_so(server: str) -> None:
    """Two prompts declared, one sent: the shape is the problem, not the text's encoding."""
    status, answer = post(f"{server}/v2/models/tiny/infer", one_input("text", "BYTES", [2], ["a"]))
    assert status == 400, answer
    assert "'text': the data does not match shape [2]" in answer["error"], answer
    assert "UTF-8" not in answer["error"]


def test_unknown_model_is_404(server: str) -> None:
    status, answer = post(f"{server}/v2/models/nope/infer", text_request(["The "]))
    assert status == 404 and "nope" in answer["error"]


def test_overload_is_shed_with_429_and_the_server_stays_up(server: str) -> None:
    before = metric(server, "uae_predictor_rejected_total", model="tiny", reason="overload")
    with concurrent.futures.ThreadPoolExecutor(8 * MAX_IN_FLIGHT) as pool:
        answers = list(
            pool.map(
                lambda i: post(f"{server}/v2/models/tiny/infer", text_request([f"Load {i}"], 48)),
                range(8 * MAX_IN_FLIGHT),
            )
        )
    codes = [status for status, _ in answers]
    assert set(codes) <= {200, 429}, codes
    assert 429 in codes and 200 in codes
    shed = metric(server, "uae_predictor_rejected_total", model="tiny", reason="overload") - before
    assert shed == codes.count(429)
    assert get(f"{server}/v2/models/tiny/ready")[0] == 200


def test_drift_scores_are_exported_per_model_version(server: str) -> None:
    post(f"{server}/v2/models/tiny-int8/infer", text_request(["The desert", "In 1971"]))
    for statistic in drift.STATISTICS:
        labels = {"model": "tiny-int8", "version": "step-20", "statistic": statistic}
        assert metric(server, "uae_predictor_drift_score", **labels) > 0


def test_a_missing_export_is_one_message_and_exit_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "workloads.serving", "--model-dir", str(tmp_path / "none")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr


def test_kserve_runtime_arguments_are_understood() -> None:
    """The ServingRuntime passes KServe's conventions (modules/k8s/serving/manifests.py),
    read from the plan environment (the only one with Pulumi), and the server's parser
    (in a subprocess: it imports KServe) understands them."""
    runtime = json.loads(run_in("plan", "-c", RUNTIME_ARGS))
    args = [a.replace("{{.Name}}", "uae-gpt") for a in runtime["args"]]
    parsed = json.loads(run_kserve_snippet(PARSE, [json.dumps(args)]))
    assert parsed == {
        "model_name": "uae-gpt",
        "model_dir": runtime["model_dir"],
        "port": 8080,
        "grpc_port": runtime["grpc_port"],
        "grpc_host": "127.0.0.1",
        "drift_window": 0,
    }


PARSE = """
import json, sys
from workloads.serving.__main__ import build_parser
a = build_parser().parse_args(json.loads(sys.argv[1]))
print(json.dumps({"model_name": a.model_name, "model_dir": str(a.model_dir), "port": a.port,
                  "grpc_port": a.grpc_port, "grpc_host": a.grpc_host,
                  "drift_window": a.drift_window}))
"""

RUNTIME_ARGS = """
import json
from modules.k8s.serving.manifests import MODEL_DIR, PREDICTOR_GRPC_PORT, cpu_runtime
from modules.k8s.serving.spec import ServingSpec
container = cpu_runtime(ServingSpec(registry="registry.example.ae/gpu"))["spec"]["containers"][0]
print(json.dumps({"args": container["args"], "model_dir": MODEL_DIR,
                  "grpc_port": PREDICTOR_GRPC_PORT}))
"""
