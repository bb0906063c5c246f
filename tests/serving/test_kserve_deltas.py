"""What the server adds to KServe's `ModelServer` beyond the conformance checks
(tests/serving/test_conformance.py): it binds loopback only unless told otherwise
(KServe 0.21 binds every interface, hard-coded), a taken port is one line and exit 2,
tritonclient's ``get_model_config`` reads Triton's model configuration (HTTP and gRPC),
and
``make bench-serve`` measures it against KServe's own server in one run."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from tests.serving.conftest import ROOT, Server, run_kserve_snippet
from tests.workloads.helpers import free_port


@pytest.fixture(scope="module")
def server(start_server: Callable[..., Server]) -> Server:
    return start_server("--threads", "1")


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=10):
            return True
    except OSError:
        return False


def test_it_listens_on_loopback_only(server: Server) -> None:
    """127.0.0.2 is this machine too, but not the address the server bound: a server on
    every interface (KServe's 0.0.0.0 / [::]) would answer there."""
    for address in (server.http, server.grpc):
        port = int(address.rsplit(":", 1)[1])
        assert reachable("127.0.0.1", port)
        assert not reachable("127.0.0.2", port), address


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/models/tiny-int8"), ("POST", "/v1/models/tiny-int8:predict")],
)
def test_kserves_v1_protocol_is_not_served(server: Server, method: str, path: str) -> None:
    """KServe registers V1 beside V2; its predict would skip admission and the checks."""
    request = urllib.request.Request(
        f"http://{server.http}{path}", data=b"{}" if method == "POST" else None, method=method
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 404
    assert json.loads(refused.value.read()) == {"error": f"no such endpoint: {method} {path}"}


@pytest.mark.parametrize("which", ["--port", "--grpc-port"])
def test_a_taken_port_is_one_line_and_exit_2(export_dir: Path, which: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = {"--port": str(free_port()), "--grpc-port": str(free_port())}
        ports[which] = str(taken.getsockname()[1])
        result = subprocess.run(
            [sys.executable, "-m", "workloads.serving", "--model-dir", str(export_dir),
             "--threads", "1", *(item for pair in ports.items() for item in pair)],
            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("error: cannot listen"), result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_get_model_config_reads_tritons_configuration(server: Server, export_dir: Path) -> None:
    client = thttp.InferenceServerClient(server.http)
    config = client.get_model_config("tiny-int8")
    assert config["name"] == "tiny-int8"
    assert {t["name"]: t["data_type"] for t in config["input"]} == {
        "text": "TYPE_STRING",
        "token_ids": "TYPE_INT64",
    }
    assert {t["name"]: t["data_type"] for t in config["output"]} == {
        "text": "TYPE_STRING",
        "logits": "TYPE_FP32",
    }
    version = client.get_model_metadata("tiny-int8")["versions"][0]
    assert client.get_model_config("tiny-int8", version) == config
    with pytest.raises(InferenceServerException) as unknown:
        client.get_model_config("tiny-int8", "step-99999")
    assert unknown.value.status() == "404"


def test_bench_serve_compares_with_kserves_own_server(export_dir: Path) -> None:
    """A very short `make bench-serve` run with ``--compare-kserve``: both servers answer
    every request, over HTTP and gRPC, and the table has their ratio."""
    result = subprocess.run(
        [sys.executable, "-m", "workloads.serving.loadtest", "--model-dir", str(export_dir),
         "--compare-kserve", "--clients", "1", "--seconds", "0.3", "--input", "ids",
         "--threads", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| grpc |")]
    rows += [line for line in result.stdout.splitlines() if line.startswith("| http |")]
    assert len(rows) == 2, result.stdout
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        new_rps, kserve_rps, ratio, errors = (
            float(cells[3]), float(cells[4]), float(cells[5]), cells[-1]
        )  # fmt: skip
        assert new_rps > 0 and kserve_rps > 0 and errors == "0", row
        assert ratio == pytest.approx(new_rps / kserve_rps, abs=0.01), row


def test_get_model_config_over_grpc(server: Server) -> None:
    """gRPC ModelConfig, which KServe's service lacks, in Triton's messages."""
    client = tgrpc.InferenceServerClient(server.grpc)
    config = client.get_model_config("tiny", as_json=True)["config"]
    assert config["name"] == "tiny"
    assert {t["name"]: t["data_type"] for t in config["input"]} == {
        "text": "TYPE_STRING",
        "token_ids": "TYPE_INT64",
    }
    dims = {t["name"]: t["dims"] for t in config["output"]}
    assert dims["text"] == ["-1"]  # int64, which JSON gives as strings
    with pytest.raises(InferenceServerException) as unknown:
        client.get_model_config("nope")
    assert unknown.value.status() == "StatusCode.NOT_FOUND"


def test_the_model_config_messages_are_tritons() -> None:
    """The private ModelConfig, ModelInput and ModelOutput (grpc_service.py) have the
    field numbers and types of Triton's model_config.proto for every field they have
    (a subset); checked from a subprocess, since KServe's messages cannot share this
    process with tritonclient's."""
    ours = json.loads(run_kserve_snippet(CONFIG_FIELDS))
    assert set(ours) == {"ModelConfig", "ModelInput", "ModelOutput"}
    for name, fields in ours.items():
        theirs = {
            f.name: [f.number, f.type] for f in getattr(model_config_pb2, name).DESCRIPTOR.fields
        }
        assert fields == {k: theirs[k] for k in fields}, name
    values = {v.name: v.number for v in model_config_pb2.DataType.DESCRIPTOR.values}
    assert json.loads(run_kserve_snippet(DATA_TYPES)) == values


CONFIG_FIELDS = """
import json
from workloads.serving.grpc_service import _triton_messages
config = _triton_messages()["ModelConfigResponse"].DESCRIPTOR.fields_by_name["config"].message_type
out = {config.name: {f.name: [f.number, f.type] for f in config.fields}}
for tensor in ("input", "output"):
    message = config.fields_by_name[tensor].message_type
    out[message.name] = {f.name: [f.number, f.type] for f in message.fields}
print(json.dumps(out))
"""

DATA_TYPES = """
import json
from workloads.serving.grpc_service import _triton_messages
config = _triton_messages()["ModelConfigResponse"].DESCRIPTOR.fields_by_name["config"].message_type
enum = config.fields_by_name["input"].message_type.fields_by_name["data_type"].enum_type
print(json.dumps({v.name: v.number for v in enum.values}))
"""
