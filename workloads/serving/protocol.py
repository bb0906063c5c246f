"""What the Open Inference Protocol (V2) asks of a server, shared by its HTTP and gRPC
endpoints (`workloads.serving.app`, `workloads.serving.grpc_service`).

- **Errors**: every refusal is a `ProtocolError` with the HTTP status and gRPC code it
  maps to; KServe's own exceptions map the same way (`error_status`). HTTP bodies are
  ``{"error": "<message>"}``; gRPC answers carry the message as the status details.
- **Versions**: a model serves one version (its ``version`` label, e.g. ``step-60``);
  a request for another is a 404 naming the one served (`check_version`).
- **Tensors**: JSON data must match its declared datatype (`check_json_data`): JSON has
  no integer type of its own, and numpy would silently turn ``1.5`` or ``"5"`` into 5.
- **Parameters**: `protocol_parameters` holds the request parameters the protocol
  itself defines; a model refuses any other it does not know.
- **Binary outputs** (`with_requested_outputs`): a requested output's ``binary_data``,
  else the request's ``binary_data_output``, decides JSON or binary per output (HTTP);
  gRPC answers always in ``raw_output_contents``, as Triton does and tritonclient reads.
- **Model control** (`ModelControl`): the repository extension's load and unload are
  off unless the server is started with them, and then need a bearer token.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from importlib import metadata as package_metadata
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]  # no stubs; covered by tests/serving
from kserve.errors import (
    InferenceError,
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    ServerNotLive,
    ServerNotReady,
    UnsupportedProtocol,
)
from kserve.protocol.infer_type import InferRequest, InferResponse, RequestedOutput

#: What server metadata names (KServe's model server, at its installed version).
SERVER_NAME = "kserve"


def server_version() -> str:
    return package_metadata.version("kserve")


#: Request parameters the protocol defines (not a model's): HTTP's binary output switch.
PROTOCOL_PARAMETERS = frozenset({"binary_data_output"})
#: Output parameters the protocol defines.
OUTPUT_PARAMETERS = frozenset({"binary_data"})
#: Input parameters the protocol defines (the binary tensor extension's size).
INPUT_PARAMETERS = frozenset({"binary_data_size"})
#: The extensions this server implements fully (server metadata ``extensions``).
BINARY_EXTENSION = "binary_tensor_data"
#: Triton's name of the model repository extension (index, load, unload).
REPOSITORY_EXTENSION = "model_repository"
#: Unload's one parameter (Triton's; a model here has no dependents to unload with it).
UNLOAD_PARAMETERS = frozenset({"unload_dependents"})
REPOSITORY_PARAMETERS_MESSAGE = (
    "load takes no parameters and unload only unload_dependents: this server loads only the "
    "models it was started with (no configuration override or files)"
)
#: Where the control token may also come from (a file is preferred: `--control-token-file`).
TOKEN_ENV = "MODEL_CONTROL_TOKEN"
MIN_TOKEN_LENGTH = 16

_INTEGER_TYPES = frozenset(
    {"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"}
)
_FLOAT_TYPES = frozenset({"FP16", "FP32", "FP64", "BF16"})


class ProtocolError(Exception):
    """A refusal: its HTTP status, gRPC code and a message naming what to fix."""

    def __init__(self, status: HTTPStatus, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def bad_request(message: str) -> ProtocolError:
    return ProtocolError(HTTPStatus.BAD_REQUEST, grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> ProtocolError:
    return ProtocolError(HTTPStatus.NOT_FOUND, grpc.StatusCode.NOT_FOUND, message)


def unavailable(message: str) -> ProtocolError:
    return ProtocolError(HTTPStatus.SERVICE_UNAVAILABLE, grpc.StatusCode.UNAVAILABLE, message)


def unauthenticated(message: str) -> ProtocolError:
    return ProtocolError(HTTPStatus.UNAUTHORIZED, grpc.StatusCode.UNAUTHENTICATED, message)


#: HTTP status -> gRPC code, for the metrics of gRPC answers (their ``code`` label is the
#: HTTP status they correspond to, so the 5xx alert counts both protocols).
GRPC_TO_HTTP = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


def error_status(err: BaseException) -> ProtocolError | None:
    """The protocol error an exception stands for; ``None`` for a server fault (500)."""
    if isinstance(err, ProtocolError):
        return err
    if isinstance(err, InvalidInput):
        return bad_request(str(err))
    if isinstance(err, ModelNotFound):
        return not_found(str(err))
    if isinstance(err, ModelNotReady | ServerNotReady | ServerNotLive):
        return unavailable(str(err))
    if isinstance(err, UnsupportedProtocol):
        return bad_request(str(err))
    if isinstance(err, InferenceError):
        return None
    return None


def check_version(model_name: str, served: str, requested: str | None) -> None:
    """Refuse a request for a version other than the one ``model_name`` serves."""
    if requested and requested != served:
        raise not_found(
            f"model {model_name!r} has no version {requested!r}; it serves version {served!r}"
        )


def _flat(values: Any) -> Iterable[Any]:
    if isinstance(values, list | tuple):
        for value in values:
            yield from _flat(value)
    else:
        yield values


def check_json_data(name: str, datatype: str, data: Any) -> None:
    """Refuse JSON tensor data whose elements are not of the declared datatype: integers
    for INT/UINT (never ``true`` or ``1.5``), numbers for FP, booleans for BOOL, strings
    for BYTES."""
    if not isinstance(data, list):
        return  # binary or gRPC contents: typed by their encoding
    for index, value in enumerate(_flat(data)):
        if datatype in _INTEGER_TYPES:
            ok = isinstance(value, int) and not isinstance(value, bool)
            want = "integers"
        elif datatype in _FLOAT_TYPES:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            want = "numbers"
        elif datatype == "BOOL":
            ok = isinstance(value, bool)
            want = "true or false"
        elif datatype == "BYTES":
            ok = isinstance(value, str | bytes)
            want = "strings"
        else:
            raise bad_request(f"input {name!r}: unknown datatype {datatype!r}")
        if not ok:
            raise bad_request(
                f"input {name!r} is {datatype}, so its data must be {want}; element {index} "
                f"is {value!r}"
            )


def check_request(request: InferRequest) -> None:
    """The protocol's own checks of every request: tensor data of the declared type and
    no input or output parameter the protocol does not define."""
    for tensor in request.inputs:
        check_json_data(tensor.name, tensor.datatype, tensor.data)
        unknown = sorted(set(tensor.parameters or {}) - INPUT_PARAMETERS)
        if unknown:
            raise bad_request(
                f"input {tensor.name!r} has unknown parameter(s) {', '.join(unknown)}; "
                f"inputs take only {', '.join(sorted(INPUT_PARAMETERS))}"
            )
    for output in request.request_outputs or []:
        parameters = output.parameters or {}
        unknown = sorted(set(parameters) - OUTPUT_PARAMETERS)
        if unknown:
            raise bad_request(
                f"output {output.name!r} has unknown parameter(s) {', '.join(unknown)}; "
                f"outputs take only {', '.join(sorted(OUTPUT_PARAMETERS))}"
            )
        if "binary_data" in parameters and not isinstance(parameters["binary_data"], bool):
            raise bad_request(f"output {output.name!r}: binary_data must be true or false")
    binary = (request.parameters or {}).get("binary_data_output")
    if binary is not None and not isinstance(binary, bool):
        raise bad_request("binary_data_output must be true or false")


def model_parameters(request: InferRequest) -> dict[str, Any]:
    """The request's parameters that are the model's (the protocol's own left out)."""
    return {k: v for k, v in (request.parameters or {}).items() if k not in PROTOCOL_PARAMETERS}


def with_requested_outputs(
    request: InferRequest, response: InferResponse, *, grpc_answer: bool
) -> InferResponse:
    """The model's answer restricted to, and encoded as, what the request asked for.

    Raises `ProtocolError` (400) for a requested output the model did not produce."""
    produced = [output.name for output in response.outputs]
    requested = request.request_outputs or []
    for output in requested:
        if output.name not in produced:
            raise bad_request(
                f"output {output.name!r} is not produced for this request; it produces "
                f"{', '.join(produced)}"
            )
    default_binary = bool((request.parameters or {}).get("binary_data_output", False))
    outputs = None
    if requested:
        outputs = [
            RequestedOutput(
                o.name, {"binary_data": (o.parameters or {}).get("binary_data", default_binary)}
            )
            for o in requested
        ]
        by_name = {o.name: o for o in response.outputs}
        infer_outputs = [by_name[o.name] for o in requested]
    else:
        infer_outputs = list(response.outputs)
    return InferResponse(
        response_id=response.id,
        model_name=response.model_name,
        infer_outputs=infer_outputs,
        model_version=response.model_version,
        parameters=response.parameters,
        use_binary_outputs=True if grpc_answer else default_binary,
        requested_outputs=None if grpc_answer else outputs,
    )


@dataclass(frozen=True)
class ModelControl:
    """The repository extension's load and unload, enabled with a bearer token.

    Args:
        token: the secret callers send as ``Authorization: Bearer <token>``.
    """

    token: str

    def authorized(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value carries the token (constant time)."""
        if not authorization:
            return False
        return hmac.compare_digest(authorization.encode(), f"Bearer {self.token}".encode())

    @classmethod
    def from_sources(cls, token_file: Path | None, environ: Mapping[str, str]) -> ModelControl:
        """The token from ``token_file``, else from ``$MODEL_CONTROL_TOKEN``; raises
        `ValueError` with a message naming what to fix."""
        if token_file is not None:
            try:
                token = token_file.read_text(encoding="utf-8").strip()
            except OSError as err:
                raise ValueError(
                    f"--control-token-file {token_file}: cannot read it ({err.strerror})"
                ) from err
            where = f"--control-token-file {token_file}"
        else:
            token = environ.get(TOKEN_ENV, "").strip()
            where = f"${TOKEN_ENV}"
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(
                f"--enable-model-control needs a token of at least {MIN_TOKEN_LENGTH} "
                f"characters in {where} (e.g. `openssl rand -hex 32 > token`)"
            )
        return cls(token)


def control_from_args(
    enabled: bool, token_file: Path | None, environ: Mapping[str, str] | None = None
) -> ModelControl | None:
    """`ModelControl` when enabled, else ``None`` (load/unload not served at all)."""
    if not enabled:
        if token_file is not None:
            raise ValueError("--control-token-file is given without --enable-model-control")
        return None
    return ModelControl.from_sources(token_file, os.environ if environ is None else environ)


def extensions(control: ModelControl | None) -> list[str]:
    """What server metadata advertises: only what is implemented and enabled."""
    return [BINARY_EXTENSION, *([REPOSITORY_EXTENSION] if control is not None else [])]


def metadata_tensors(types: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"name": t["name"], "datatype": t["datatype"], "shape": list(t["shape"])} for t in types
    ]
