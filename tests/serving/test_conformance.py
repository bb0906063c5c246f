"""The V2 server as its clients see it: tritonclient (HTTP and gRPC), the Open Inference
Protocol's official client, against the server started as `make serve` starts it.

Each test names the check of issue 19's "The V2 server conforms" it covers.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from tests.serving.conftest import Server
from workloads.inference import OnnxLM

TOKEN = "0123456789abcdef-test-token"
BAD_TOKEN = "0123456789abcdef-wrong-token"


@pytest.fixture(scope="module")
def server(start_server: Callable[..., Server]) -> Server:
    return start_server("--threads", "1")


@pytest.fixture(scope="module")
def control_server(
    start_server: Callable[..., Server], tmp_path_factory: pytest.TempPathFactory
) -> Server:
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN + "\n")
    return start_server(
        "--threads", "1", "--enable-model-control", "--control-token-file", str(token_file)
    )


@pytest.fixture(scope="module")
def version(export_dir: Path) -> str:
    return f"step-{OnnxLM.load(export_dir).card.source['step']}"


def raw(server: Server, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    """One request with exactly these headers (http.client adds no Content-Type)."""
    host, port = server.http.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def error_of(status_body: tuple[int, dict[str, str], bytes]) -> tuple[int, str]:
    """The status and message of an error answer, which must be exactly the protocol's
    ``{"error": "<message>"}``."""
    status, _, body = status_body
    parsed = json.loads(body)
    assert set(parsed) == {"error"} and isinstance(parsed["error"], str) and parsed["error"], parsed
    return status, parsed["error"]


def text_input_http(prompts: list[str], binary: bool) -> thttp.InferInput:
    tensor = thttp.InferInput("text", [len(prompts)], "BYTES")
    tensor.set_data_from_numpy(np.array([p.encode() for p in prompts], dtype=object), binary)
    return tensor


def text_input_grpc(prompts: list[str]) -> tgrpc.InferInput:
    tensor = tgrpc.InferInput("text", [len(prompts)], "BYTES")
    tensor.set_data_from_numpy(np.array([p.encode() for p in prompts], dtype=object))
    return tensor


def ids_input_http(rows: list[list[int]], binary: bool) -> thttp.InferInput:
    tensor = thttp.InferInput("token_ids", [len(rows), len(rows[0])], "INT64")
    tensor.set_data_from_numpy(np.asarray(rows, dtype=np.int64), binary)
    return tensor


PROMPTS = ["The ", "Abu Dhabi is"]


# --- JSON without a Content-Type ----------------------------------------------------------


def test_json_tensors_without_content_type(server: Server, export_dir: Path) -> None:
    """Check: JSON tensors without a Content-Type header work (tritonclient.http with
    binary_data=False sends none)."""
    lm = OnnxLM.load(export_dir, variant="fp32")
    client = thttp.InferenceServerClient(server.http)
    result = client.infer(
        "tiny",
        [text_input_http(PROMPTS, binary=False)],
        outputs=[thttp.InferRequestedOutput("text", binary_data=False)],
        parameters={"max_new_tokens": 8},
    )
    assert result.get_response()["outputs"][0]["data"] == lm.generate_text(PROMPTS, 8)
    body = json.dumps(
        {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["The "]}],
         "parameters": {"max_new_tokens": 4}}
    ).encode()  # fmt: skip
    status, _, answer = raw(server, "POST", "/v2/models/tiny/infer", body)
    assert status == 200, answer
    assert json.loads(answer)["outputs"][0]["data"] == lm.generate_text(["The "], 4)


# --- the error shape -----------------------------------------------------------------------


MALFORMED: dict[str, tuple[str, str, bytes | None, int]] = {
    "truncated JSON": ("POST", "/v2/models/tiny/infer", b'{"inputs": [', 400),
    "not an object": ("POST", "/v2/models/tiny/infer", b"[1, 2]", 400),
    "inputs not a list": ("POST", "/v2/models/tiny/infer", b'{"inputs": 3}', 400),
    "tensor without shape": (
        "POST", "/v2/models/tiny/infer",
        b'{"inputs": [{"name": "text", "datatype": "BYTES", "data": ["a"]}]}', 400,
    ),
    "unknown request field": (
        "POST", "/v2/models/tiny/infer",
        b'{"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}],'
        b' "input": []}', 400,
    ),
    "binary header past the body": ("POST", "/v2/models/tiny/infer", b"{}", 400),
    "unknown model": ("GET", "/v2/models/nope", None, 404),
    "unknown model ready": ("GET", "/v2/models/nope/ready", None, 404),
    "unknown endpoint": ("GET", "/v2/nothing/here", None, 404),
    "wrong method": ("GET", "/v2/models/tiny/infer", None, 405),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MALFORMED))
def test_every_error_has_the_protocol_shape(server: Server, case: str) -> None:
    """Check: every error uses the protocol's {"error": "..."} shape (HTTP), including
    malformed bodies; no FastAPI {"detail": ...}."""
    method, path, body, code = MALFORMED[case]
    headers = {"Inference-Header-Content-Length": "99"} if case.startswith("binary") else {}
    status, message = error_of(raw(server, method, path, body, headers))
    assert status == code, message


def test_errors_reach_tritonclient_decoded(server: Server, version: str) -> None:
    """Check: tritonclient decodes the server's errors (HTTP status and message; gRPC
    status and details)."""
    client = thttp.InferenceServerClient(server.http)
    with pytest.raises(InferenceServerException) as http_error:
        client.get_model_metadata("nope")
    assert http_error.value.status() == "404" and "nope" in http_error.value.message()
    grpc_client = tgrpc.InferenceServerClient(server.grpc)
    with pytest.raises(InferenceServerException) as grpc_error:
        grpc_client.get_model_metadata("nope")
    assert grpc_error.value.status() == "StatusCode.NOT_FOUND"
    assert "nope" in grpc_error.value.message()


# --- versions ------------------------------------------------------------------------------


def test_the_reported_version_is_addressable(server: Server, version: str) -> None:
    """Check: the reported version can be addressed (metadata, readiness, infer) and an
    unknown version is a 404 with the error shape; over HTTP and gRPC."""
    client = thttp.InferenceServerClient(server.http)
    result = client.infer("tiny", [ids_input_http([[84, 104]], binary=True)], model_version=version)
    assert result.get_response()["model_version"] == version
    assert client.get_model_metadata("tiny", version)["versions"] == [version]
    assert client.is_model_ready("tiny", version)
    status, message = error_of(raw(server, "GET", "/v2/models/tiny/versions/step-99999"))
    assert status == 404 and version in message
    status, _ = error_of(raw(server, "GET", "/v2/models/tiny/versions/step-99999/ready"))
    assert status == 404
    assert not client.is_model_ready("tiny", "step-99999")
    grpc_client = tgrpc.InferenceServerClient(server.grpc)
    assert grpc_client.is_model_ready("tiny", version)
    assert grpc_client.get_model_metadata("tiny", version, as_json=True)["versions"] == [version]
    grpc_result = grpc_client.infer("tiny", [text_input_grpc(["The "])], model_version=version)
    assert grpc_result.get_response(as_json=True)["model_version"] == version
    with pytest.raises(InferenceServerException) as unknown:
        grpc_client.is_model_ready("tiny", "step-99999")
    assert unknown.value.status() == "StatusCode.NOT_FOUND"


# --- repository extension and model control -------------------------------------------------


def test_the_repository_extension_is_not_advertised_without_model_control(server: Server) -> None:
    """Check: the repository extension is complete or not advertised: off by default,
    so absent from server metadata and not served (HTTP 404, gRPC UNIMPLEMENTED)."""
    client = thttp.InferenceServerClient(server.http)
    assert not any("repository" in e for e in client.get_server_metadata()["extensions"])
    with pytest.raises(InferenceServerException) as index:
        client.get_model_repository_index()
    assert index.value.status() == "404"
    grpc_client = tgrpc.InferenceServerClient(server.grpc)
    extensions = grpc_client.get_server_metadata(as_json=True)["extensions"]
    assert not any("repository" in e for e in extensions)
    with pytest.raises(InferenceServerException) as grpc_index:
        grpc_client.get_model_repository_index()
    assert grpc_index.value.status() == "StatusCode.UNIMPLEMENTED"


def assert_served(server: Server, name: str = "tiny") -> None:
    client = thttp.InferenceServerClient(server.http)
    assert client.is_server_ready() and client.is_model_ready(name)
    result = client.infer(name, [text_input_http(["The "], binary=True)])
    assert result.as_numpy("text").shape == (1,)


def test_unauthenticated_unload_changes_nothing(server: Server, control_server: Server) -> None:
    """Check: load/unload are off unless enabled; enabled, they need the bearer token;
    an unauthenticated POST .../unload changes nothing and health/ready stay true."""
    for target, code in ((server, 404), (control_server, 401)):
        for headers in ({}, {"Authorization": f"Bearer {BAD_TOKEN}"}):
            status, message = error_of(
                raw(target, "POST", "/v2/repository/models/tiny/unload", b"", headers)
            )
            assert status == code, message
        assert_served(target)
    grpc_client = tgrpc.InferenceServerClient(control_server.grpc)
    with pytest.raises(InferenceServerException) as denied:
        grpc_client.unload_model("tiny", headers={"authorization": f"Bearer {BAD_TOKEN}"})
    assert denied.value.status() == "StatusCode.UNAUTHENTICATED"
    with pytest.raises(InferenceServerException):
        thttp.InferenceServerClient(control_server.http).unload_model("tiny")
    assert_served(control_server)


def test_the_repository_extension_is_complete_with_the_token(control_server: Server) -> None:
    """Check: with model control the extension is complete (index, load, unload) over
    HTTP and gRPC, advertised, and readiness tells the truth about an unloaded model."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    client = thttp.InferenceServerClient(control_server.http)
    grpc_client = tgrpc.InferenceServerClient(control_server.grpc)
    assert "model_repository" in client.get_server_metadata()["extensions"]
    index = {m["name"]: m["state"] for m in client.get_model_repository_index(headers=auth)}
    assert index == {"tiny": "READY", "tiny-int8": "READY"}
    client.unload_model("tiny-int8", headers=auth)
    assert not client.is_model_ready("tiny-int8")
    assert not client.is_server_ready()  # it no longer serves all it was started with
    status, message = error_of(raw(control_server, "POST", "/v2/models/tiny-int8/infer",
                                   b'{"inputs": [{"name": "text", "datatype": "BYTES", '
                                   b'"shape": [1], "data": ["a"]}]}'))  # fmt: skip
    assert status == 503 and "not loaded" in message
    grpc_index = grpc_client.get_model_repository_index(
        headers={"authorization": f"Bearer {TOKEN}"}, as_json=True
    )
    assert {m["name"]: m["state"] for m in grpc_index["models"]}["tiny-int8"] == "UNAVAILABLE"
    grpc_client.load_model("tiny-int8", headers={"authorization": f"Bearer {TOKEN}"})
    assert client.is_model_ready("tiny-int8") and client.is_server_ready()
    assert_served(control_server, "tiny-int8")


def test_the_repository_messages_are_tritons() -> None:
    """The repository methods' private messages (grpc_service.py) have the field numbers
    and types of Triton's grpc_service.proto as tritonclient ships it; checked from a
    subprocess, since KServe's messages cannot share this process with tritonclient's."""
    from tests.serving.conftest import run_kserve_snippet  # noqa: PLC0415

    ours = json.loads(run_kserve_snippet(MESSAGE_FIELDS))
    for name, fields in ours.items():
        message = getattr(service_pb2, name.split(".")[0])
        if "." in name:
            message = getattr(message, name.split(".")[1])
        theirs = {f.name: [f.number, f.type] for f in message.DESCRIPTOR.fields}
        assert fields == theirs, name


MESSAGE_FIELDS = """
import json
from workloads.serving.grpc_service import _triton_messages
out = {}
for name, cls in _triton_messages().items():
    out[name] = {f.name: [f.number, f.type] for f in cls.DESCRIPTOR.fields}
    for nested in cls.DESCRIPTOR.nested_types:
        out[f"{name}.{nested.name}"] = {f.name: [f.number, f.type] for f in nested.fields}
print(json.dumps(out))
"""


# --- parameters and inputs -----------------------------------------------------------------


REFUSED_HTTP: dict[str, tuple[str, dict[str, Any], str]] = {
    "misspelt parameter": ("text", {"max_tokens": 4}, "max_tokens"),
    "fractional max_new_tokens": ("text", {"max_new_tokens": 1.5}, "integer"),
    "max_new_tokens as a string": ("text", {"max_new_tokens": "4"}, "integer"),
    "parameters on a logits request": ("ids", {"max_new_tokens": 4}, "no parameters"),
    "an unknown output": ("unknown-output", {}, "not produced"),
}


@pytest.mark.parametrize("case", list(REFUSED_HTTP))
def test_ill_typed_or_unknown_parameters_are_refused(server: Server, case: str) -> None:
    """Check: unknown or ill-typed parameters (max_tokens, max_new_tokens: 1.5) and
    unknown outputs are refused with 400 (tritonclient.http)."""
    kind, parameters, expected = REFUSED_HTTP[case]
    outputs = None
    if kind == "ids":
        inputs = [ids_input_http([[1, 2]], binary=False)]
    else:
        inputs = [text_input_http(["The "], binary=False)]
    if kind == "unknown-output":
        outputs = [thttp.InferRequestedOutput("logits", binary_data=False)]
    client = thttp.InferenceServerClient(server.http)
    with pytest.raises(InferenceServerException) as refused:
        client.infer("tiny", inputs, outputs=outputs, parameters=parameters or None)
    assert refused.value.status() == "400", refused.value.message()
    assert expected in refused.value.message()


ILL_TYPED_DATA = {
    "a number given as BYTES data": ("text", "BYTES", [1], [5], "strings"),
    "a fraction given as INT64 data": ("token_ids", "INT64", [1, 2], [1, 1.5], "integers"),
    "a string given as INT64 data": ("token_ids", "INT64", [1, 1], ["7"], "integers"),
    "a boolean given as INT64 data": ("token_ids", "INT64", [1, 1], [True], "integers"),
}


@pytest.mark.parametrize("case", list(ILL_TYPED_DATA))
def test_ill_typed_tensor_data_is_refused(server: Server, case: str) -> None:
    """Check: a number given as BYTES data (and other data not of its declared type,
    which numpy would otherwise coerce) is refused with 400 (hand-written JSON: the
    official client cannot send it)."""
    name, datatype, shape, data, expected = ILL_TYPED_DATA[case]
    body = {"inputs": [{"name": name, "datatype": datatype, "shape": shape, "data": data}]}
    status, message = error_of(
        raw(server, "POST", "/v2/models/tiny/infer", json.dumps(body).encode())
    )
    assert status == 400 and expected in message, message


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({"max_tokens": 4}, "max_tokens"),
        ({"max_new_tokens": 1.5}, "integer"),
        ({"temperature": "hot"}, "number"),
    ],
)
def test_grpc_refuses_them_too(server: Server, parameters: dict[str, Any], expected: str) -> None:
    """Check: the same refusals over gRPC (INVALID_ARGUMENT); a float temperature, which
    tritonclient sends as Triton's double_param, is read, not dropped."""
    client = tgrpc.InferenceServerClient(server.grpc)
    with pytest.raises(InferenceServerException) as refused:
        client.infer("tiny", [text_input_grpc(["The "])], parameters=parameters)
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert expected in refused.value.message()
    sampled = client.infer(
        "tiny", [text_input_grpc(["The "])],
        parameters={"max_new_tokens": 4, "temperature": 0.8, "seed": 3, "top_k": 5},
    )  # fmt: skip
    again = client.infer(
        "tiny", [text_input_grpc(["The "])],
        parameters={"max_new_tokens": 4, "temperature": 0.8, "seed": 3, "top_k": 5},
    )  # fmt: skip
    assert sampled.as_numpy("text").tolist() == again.as_numpy("text").tolist()


# --- binary outputs ------------------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False])
def test_binary_output_is_honoured(server: Server, export_dir: Path, binary: bool) -> None:
    """Check: binary output when asked for (InferRequestedOutput(name, binary_data=True)),
    JSON when not; the values equal the inference library's either way."""
    lm = OnnxLM.load(export_dir, variant="fp32")
    rows = [[84, 104, 101], [65, 98, 117]]
    client = thttp.InferenceServerClient(server.http)
    result = client.infer(
        "tiny",
        [ids_input_http(rows, binary=True)],
        outputs=[thttp.InferRequestedOutput("logits", binary_data=binary)],
    )
    output = result.get_response()["outputs"][0]
    if binary:
        assert "data" not in output
        assert output["parameters"]["binary_data_size"] == 2 * 3 * lm.vocab_size * 4
    else:
        assert "data" in output and "binary_data_size" not in output.get("parameters", {})
    np.testing.assert_allclose(result.as_numpy("logits"), lm.logits(rows), rtol=1e-5, atol=1e-5)
    text = client.infer(
        "tiny", [text_input_http(PROMPTS, binary=True)],
        outputs=[thttp.InferRequestedOutput("text", binary_data=binary)],
        parameters={"max_new_tokens": 6},
    )  # fmt: skip
    decoded = [t.decode() if isinstance(t, bytes) else t for t in text.as_numpy("text").tolist()]
    assert decoded == lm.generate_text(PROMPTS, 6)
    grpc_result = tgrpc.InferenceServerClient(server.grpc).infer(
        "tiny", [text_input_grpc(PROMPTS)], parameters={"max_new_tokens": 6}
    )
    assert [t.decode() for t in grpc_result.as_numpy("text").tolist()] == decoded


# --- startup and logs ----------------------------------------------------------------------


def test_make_serve_prints_both_addresses_and_4xx_are_one_line(server: Server) -> None:
    """Check: `make serve` starts gRPC and prints both addresses; a 4xx is logged as one
    line, without a traceback."""
    output = server.output()
    assert f"HTTP: http://{server.http}/v2/models/<model>/infer" in output
    assert f"gRPC: {server.grpc}" in output
    before = output.count("\n")
    for _ in range(3):
        raw(server, "POST", "/v2/models/tiny/infer", b'{"inputs": [')
    tgrpc_client = tgrpc.InferenceServerClient(server.grpc)
    with pytest.raises(InferenceServerException):
        tgrpc_client.infer("tiny", [text_input_grpc(["a"])], parameters={"max_tokens": 1})
    after = server.output()
    new = after.splitlines()[before:]
    assert "Traceback" not in after
    assert sum("-> 400: the request body is not valid JSON" in line for line in new) == 3
    assert sum("gRPC ModelInfer -> INVALID_ARGUMENT" in line for line in new) == 1
    assert len(new) == 4, new
