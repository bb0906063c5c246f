"""What the Open Inference Protocol (V2) asks of a server beyond what KServe's model
server checks, shared by its HTTP and gRPC endpoints (`workloads.serving.app`).

- **Errors**: every refusal is a `ProtocolError` with the HTTP status and gRPC code it
  maps to; KServe's own exceptions map the same way (`error_status`).
- **Versions**: a model serves one version (its ``version`` label, e.g. ``step-60``);
  a request for another is a 404 naming the one served (`check_version`).
- **Tensors**: JSON data must match its declared datatype (`check_request`): JSON has
  no integer type of its own, and numpy would silently turn ``1.5`` or ``"5"`` into 5.
- **Parameters**: `model_parameters` leaves out the request parameters the protocol
  itself defines; a model refuses any other it does not know.
- **Outputs** (`with_requested_outputs`): a requested output's ``binary_data``, else the
  request's ``binary_data_output``, decides JSON or binary per output (HTTP); gRPC
  answers always in ``raw_output_contents``, as Triton does and tritonclient reads.
- **Model control** (`ModelControl`): the repository extension is off unless the server
  is started with it, and then needs a bearer token.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]  # no stubs; covered by tests/serving
from fastapi.exceptions import RequestValidationError
from kserve.errors import (
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    ServerNotLive,
    ServerNotReady,
    UnsupportedProtocol,
)
from kserve.protocol.infer_type import InferRequest, InferResponse, RequestedOutput

#: Request parameters the protocol defines (not a model's): HTTP's binary output switch.
PROTOCOL_PARAMETERS = frozenset({"binary_data_output"})
OUTPUT_PARAMETERS = frozenset({"binary_data"})
INPUT_PARAMETERS = frozenset({"binary_data_size"})
#: Unload's one parameter (Triton's; a model here has no dependents to unload with it).
UNLOAD_PARAMETERS = frozenset({"unload_dependents"})
REPOSITORY_PARAMETERS_MESSAGE = (
    "load takes no parameters and unload only unload_dependents: this server loads only the "
    "models it was started with (no configuration override or files)"
)
#: Where the control token may also come from (a file is preferred: `--control-token-file`).
TOKEN_ENV = "MODEL_CONTROL_TOKEN"
MIN_TOKEN_LENGTH = 16

_DATA_TYPES = {  # datatype -> (accepted JSON element types, what to say)
    **dict.fromkeys(
        ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"),
        ((int,), "integers"),
    ),
    **dict.fromkeys(("FP16", "FP32", "FP64", "BF16"), ((int, float), "numbers")),
    "BOOL": ((bool,), "true or false"),
    "BYTES": ((str, bytes), "strings"),
}


class ProtocolError(Exception):
    """A refusal: its HTTP status, gRPC code, a message naming what to fix and, for a
    request refused before inference, the reason the metrics count it under."""

    def __init__(
        self, status: HTTPStatus, code: grpc.StatusCode, message: str, reason: str = ""
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.reason = reason


def bad_request(message: str) -> ProtocolError:
    return ProtocolError(HTTPStatus.BAD_REQUEST, grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> ProtocolError:
    return ProtocolError(HTTPStatus.NOT_FOUND, grpc.StatusCode.NOT_FOUND, message)


def unavailable(message: str) -> ProtocolError:
    return ProtocolError(HTTPStatus.SERVICE_UNAVAILABLE, grpc.StatusCode.UNAVAILABLE, message)


def unauthenticated(message: str) -> ProtocolError:
    return ProtocolError(HTTPStatus.UNAUTHORIZED, grpc.StatusCode.UNAUTHENTICATED, message)


def error_status(err: BaseException) -> ProtocolError | None:
    """The protocol error an exception stands for; ``None`` for a server fault (500)."""
    if isinstance(err, ProtocolError):
        return err
    if isinstance(err, InvalidInput | UnsupportedProtocol | RequestValidationError):
        return bad_request(str(err))
    if isinstance(err, ModelNotFound):
        return not_found(str(err))
    if isinstance(err, ModelNotReady | ServerNotReady | ServerNotLive):
        return unavailable(str(err))
    if isinstance(err, NotImplementedError):
        return ProtocolError(HTTPStatus.NOT_IMPLEMENTED, grpc.StatusCode.UNIMPLEMENTED, str(err))
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


def check_request(request: InferRequest) -> None:
    """The protocol's own checks of every request: JSON tensor data of the declared type
    (never ``true`` or ``1.5`` for an INT, a number for BYTES) and no input or output
    parameter the protocol does not define."""
    for tensor in request.inputs:
        known = _DATA_TYPES.get(tensor.datatype)
        if known is None:
            raise bad_request(f"input {tensor.name!r}: unknown datatype {tensor.datatype!r}")
        types, want = known
        if isinstance(tensor.data, list):  # binary and gRPC contents are typed already
            for index, value in enumerate(_flat(tensor.data)):
                if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                    raise bad_request(
                        f"input {tensor.name!r} is {tensor.datatype}, so its data must be "
                        f"{want}; element {index} is {value!r}"
                    )
        _check_parameters("input", tensor.name, tensor.parameters, INPUT_PARAMETERS)
    for output in request.request_outputs or []:
        _check_parameters("output", output.name, output.parameters, OUTPUT_PARAMETERS)
        if not isinstance((output.parameters or {}).get("binary_data", False), bool):
            raise bad_request(f"output {output.name!r}: binary_data must be true or false")
    if not isinstance((request.parameters or {}).get("binary_data_output", False), bool):
        raise bad_request("binary_data_output must be true or false")


def _check_parameters(kind: str, name: str, given: Any, allowed: frozenset[str]) -> None:
    unknown = sorted(set(given or {}) - allowed)
    if unknown:
        raise bad_request(
            f"{kind} {name!r} has unknown parameter(s) {', '.join(unknown)}; {kind}s take only "
            f"{', '.join(sorted(allowed))}"
        )


def model_parameters(request: InferRequest) -> dict[str, Any]:
    """The request's parameters that are the model's (the protocol's own left out)."""
    return {k: v for k, v in (request.parameters or {}).items() if k not in PROTOCOL_PARAMETERS}


def with_requested_outputs(
    request: InferRequest, response: InferResponse, *, grpc_answer: bool
) -> InferResponse:
    """The model's answer restricted to, and encoded as, what the request asked for.

    Raises `ProtocolError` (400) for a requested output the model did not produce."""
    produced = {output.name: output for output in response.outputs}
    requested = request.request_outputs or []
    for output in requested:
        if output.name not in produced:
            raise bad_request(
                f"output {output.name!r} is not produced for this request; it produces "
                f"{', '.join(produced)}"
            )
    default_binary = bool((request.parameters or {}).get("binary_data_output", False))
    outputs = [
        RequestedOutput(
            o.name, {"binary_data": (o.parameters or {}).get("binary_data", default_binary)}
        )
        for o in requested
    ]
    return InferResponse(
        response_id=response.id,
        model_name=response.model_name,
        infer_outputs=[produced[o.name] for o in requested] or list(response.outputs),
        model_version=response.model_version,
        parameters=response.parameters,
        use_binary_outputs=grpc_answer or default_binary,
        requested_outputs=None if grpc_answer else outputs or None,
    )


@dataclass(frozen=True)
class ModelControl:
    """The repository extension's index, load and unload, enabled with a bearer token.

    Args:
        token: the secret callers send as ``Authorization: Bearer <token>``.
    """

    token: str

    def authorize(self, authorization: str | None, where: str) -> None:
        """Refuse (401) an ``Authorization`` value without the token (constant time);
        ``where`` says how to send it."""
        expected = f"Bearer {self.token}".encode()
        if not authorization or not hmac.compare_digest(authorization.encode(), expected):
            raise unauthenticated(f"model control needs {where}")


def control_from_args(
    enabled: bool, token_file: Path | None, environ: Mapping[str, str] | None = None
) -> ModelControl | None:
    """`ModelControl` with the token of ``token_file``, else of ``$MODEL_CONTROL_TOKEN``,
    when enabled; ``None`` (the extension is not served at all) otherwise. Raises
    `ValueError` with a message naming what to fix."""
    if not enabled:
        if token_file is not None:
            raise ValueError("--control-token-file is given without --enable-model-control")
        return None
    where = f"--control-token-file {token_file}" if token_file else f"${TOKEN_ENV}"
    environ = os.environ if environ is None else environ
    try:
        token = token_file.read_text(encoding="utf-8") if token_file else environ.get(TOKEN_ENV, "")
    except OSError as err:
        raise ValueError(f"{where}: cannot read it ({err.strerror})") from err
    token = token.strip()
    if len(token) < MIN_TOKEN_LENGTH:
        raise ValueError(
            f"--enable-model-control needs a token of at least {MIN_TOKEN_LENGTH} "
            f"characters in {where} (e.g. `openssl rand -hex 32 > token`)"
        )
    return ModelControl(token)


def extensions(control: ModelControl | None) -> list[str]:
    """What server metadata advertises: only what is implemented and enabled."""
    return ["binary_tensor_data", *(["model_repository"] if control is not None else [])]
