"""The V2 (Open Inference Protocol) server around any KServe models: HTTP and gRPC.

`serve_models` serves loaded KServe models on ``host:port`` over HTTP and, when given a
``grpc_port``, over gRPC, both in one event loop over the same models (one batcher, one
drift window per model). It binds where it is told (127.0.0.1 by default; 0.0.0.0 in a
pod) and has admission control in front (`workloads.serving.limits`).

The HTTP endpoints are the protocol's, written here over KServe's request and response
types (`InferRequest`, `InferResponse`) rather than KServe's FastAPI routes, because
those answer a malformed body with FastAPI's ``{"detail": [...]}``, a versioned path
with 501, log every 4xx with a traceback, reload an unloaded model on the next request
and leave load/unload open to anyone. Here:

- every error is ``{"error": "<message>"}`` with the status the protocol gives it, and
  a 4xx is logged as one line (a 5xx, a server fault, with its traceback);
- a body without ``Inference-Header-Content-Length`` is JSON whatever its content type
  says (the protocol's rule; tritonclient sends JSON bodies with no content type), and
  a body with it is the binary tensor extension's JSON header plus tensor bytes;
- ``/v2/models/<m>/versions/<v>[/ready|/infer]`` answer for the version the model
  serves and 404 for any other;
- the repository extension (``/v2/repository/index``, ``.../models/<m>/load``,
  ``.../unload``) exists only when the server is started with it, and then needs the
  bearer token (`protocol.ModelControl`); server metadata advertises it only then.

Used by the language-model predictor (``python -m workloads.serving``) and the tabular
predictor (``python -m workloads.features serve``). It imports neither torch nor the
language-model code.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
import uvicorn
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferRequest, InferResponse
from prometheus_client import REGISTRY, exposition
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from workloads.serving.limits import AdmissionControl, Limits
from workloads.serving.net import bind_socket
from workloads.serving.protocol import (
    REPOSITORY_PARAMETERS_MESSAGE,
    SERVER_NAME,
    UNLOAD_PARAMETERS,
    ModelControl,
    ProtocolError,
    bad_request,
    error_status,
    extensions,
    server_version,
    unauthenticated,
    unavailable,
)
from workloads.serving.registry import ServedModels

log = logging.getLogger("workloads.serving")

BINARY_HEADER = "inference-header-content-length"
Endpoint = Callable[[Request], Awaitable[Response]]


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def error_response(err: ProtocolError, headers: dict[str, str] | None = None) -> Response:
    return json_response({"error": err.message}, int(err.status), headers)


def _guarded(endpoint: Endpoint) -> Endpoint:
    """Every exception becomes the protocol's error body; a 4xx is one log line."""

    async def run(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as err:  # the protocol answers every error with a body
            status = error_status(err)
            where = f"{request.method} {request.url.path}"
            if status is None:
                log.exception("%s: server error", where)
                return json_response({"error": f"internal error: {type(err).__name__}"}, 500)
            log.warning("%s -> %d: %s", where, int(status.status), status.message)
            headers = {"www-authenticate": "Bearer"} if int(status.status) == 401 else None
            return error_response(status, headers)

    return run


# --- request bodies -------------------------------------------------------------------


def _check_structure(body: Any, binary_bytes: int | None) -> None:
    """The shape of an inference request's JSON, checked before KServe reads it (which
    would fail with a KeyError or TypeError, a 500, on a malformed one)."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object with an 'inputs' list")
    unknown = sorted(set(body) - {"id", "parameters", "inputs", "outputs"})
    if unknown:
        raise bad_request(
            f"unknown request field(s) {', '.join(unknown)}; a request has id, parameters, "
            "inputs and outputs"
        )
    if not isinstance(body.get("id", ""), str):
        raise bad_request("'id' must be a string")
    if not isinstance(body.get("parameters", {}), dict):
        raise bad_request("'parameters' must be an object")
    inputs = body.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise bad_request("'inputs' must be a non-empty list of tensors")
    binary_total = 0
    for index, tensor in enumerate(inputs):
        where = f"inputs[{index}]"
        if not isinstance(tensor, dict):
            raise bad_request(f"{where} must be an object with name, datatype, shape, data")
        name, datatype, shape = tensor.get("name"), tensor.get("datatype"), tensor.get("shape")
        if not isinstance(name, str) or not isinstance(datatype, str):
            raise bad_request(f"{where}: 'name' and 'datatype' must be strings")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise bad_request(f"{where} ({name}): 'shape' must be a list of integers >= 0")
        parameters = tensor.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise bad_request(f"{where} ({name}): 'parameters' must be an object")
        size = parameters.get("binary_data_size")
        if "data" in tensor:
            if not isinstance(tensor["data"], list):
                raise bad_request(f"{where} ({name}): 'data' must be a list")
        elif size is not None and binary_bytes is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise bad_request(f"{where} ({name}): binary_data_size must be an integer >= 0")
            binary_total += size
        else:
            raise bad_request(f"{where} ({name}): 'data' is missing")
    if binary_bytes is not None and binary_total != binary_bytes:
        raise bad_request(
            f"the inputs' binary_data_size add up to {binary_total} bytes but the body has "
            f"{binary_bytes} bytes after the JSON header"
        )
    outputs = body.get("outputs", [])
    if not isinstance(outputs, list) or not all(
        isinstance(o, dict) and isinstance(o.get("name"), str) for o in outputs
    ):
        raise bad_request("'outputs' must be a list of objects with a 'name'")
    for output in outputs:
        if not isinstance(output.get("parameters", {}), dict):
            raise bad_request(f"output {output['name']!r}: 'parameters' must be an object")


def parse_infer_body(body: bytes, header: str | None, model_name: str) -> InferRequest:
    """An HTTP inference request: JSON, or with ``header`` the binary extension's JSON
    header of that many bytes followed by the tensors' bytes."""
    if header is None:
        json_length = len(body)
    else:
        try:
            json_length = int(header)
        except ValueError:
            raise bad_request(f"{BINARY_HEADER} must be an integer, got {header!r}") from None
        if not 0 < json_length <= len(body):
            raise bad_request(
                f"{BINARY_HEADER} is {json_length} but the body has {len(body)} bytes"
            )
    try:
        parsed = orjson.loads(body[:json_length])
    except orjson.JSONDecodeError as err:
        raise bad_request(f"the request body is not valid JSON ({err})") from None
    _check_structure(parsed, None if header is None else len(body) - json_length)
    try:
        return InferRequest.from_bytes(body, json_length, model_name)
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, InvalidInput):
            raise
        raise bad_request(f"the request does not follow the protocol ({err})") from None


def encode_response(response: InferResponse) -> Response:
    body, json_size = response.to_rest()
    if isinstance(body, bytes):
        return Response(
            body,
            200,
            {BINARY_HEADER: str(json_size)},
            media_type="application/octet-stream",
        )
    return json_response(body)


# --- the application --------------------------------------------------------------------


def build_app(served: ServedModels, control: ModelControl | None) -> Starlette:
    """The HTTP application of ``served`` (see the module docstring)."""

    async def server_metadata(request: Request) -> Response:
        return json_response(
            {"name": SERVER_NAME, "version": server_version(), "extensions": extensions(control)}
        )

    async def live(request: Request) -> Response:
        return json_response({"live": True})

    async def ready(request: Request) -> Response:
        if not served.all_ready():
            raise unavailable(f"not ready: model(s) {', '.join(served.unready())} not loaded")
        return json_response({"ready": True})

    async def models(request: Request) -> Response:
        return json_response({"models": sorted(served.models)})

    async def model_metadata(request: Request) -> Response:
        params = request.path_params
        return json_response(await served.metadata(params["model"], params.get("version")))

    async def model_ready(request: Request) -> Response:
        params = request.path_params
        name = params["model"]
        served.ready_model(name, params.get("version"))
        return json_response({"name": name, "ready": True})

    async def infer(request: Request) -> Response:
        params = request.path_params
        name = params["model"]
        served.ready_model(name, params.get("version"))  # 404/503 before reading the body
        body = await request.body()
        infer_request = parse_infer_body(body, request.headers.get(BINARY_HEADER), name)
        response = await served.infer(
            name, params.get("version"), infer_request, dict(request.headers), grpc_answer=False
        )
        return encode_response(response)

    async def metrics(request: Request) -> Response:
        encoder, content_type = exposition.choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(REGISTRY), headers={"content-type": content_type})

    def authorize(request: Request) -> None:
        assert control is not None
        if not control.authorized(request.headers.get("authorization")):
            raise unauthenticated("model control needs 'Authorization: Bearer <token>'")

    async def repository_index(request: Request) -> Response:
        authorize(request)
        body = await request.body()
        try:
            options = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError as err:
            raise bad_request(f"the request body is not valid JSON ({err})") from None
        if not isinstance(options, dict) or not isinstance(options.get("ready", False), bool):
            raise bad_request("the index request is an object with an optional 'ready' boolean")
        entries = served.index()
        if options.get("ready"):
            entries = [e for e in entries if e["state"] == "READY"]
        return json_response(entries)

    async def repository_load(request: Request) -> Response:
        authorize(request)
        await _repository_parameters(request, frozenset())
        served.load(request.path_params["model"])
        return json_response({})

    async def repository_unload(request: Request) -> Response:
        authorize(request)
        await _repository_parameters(request, UNLOAD_PARAMETERS)
        served.unload(request.path_params["model"])
        return json_response({})

    get, post = ["GET"], ["POST"]
    routes = [
        Route("/", live, methods=get),
        Route("/metrics", metrics, methods=get),
        Route("/v2", server_metadata, methods=get),
        Route("/v2/health/live", live, methods=get),
        Route("/v2/health/ready", ready, methods=get),
        Route("/v2/models", models, methods=get),
        Route("/v2/models/{model}", model_metadata, methods=get),
        Route("/v2/models/{model}/versions/{version}", model_metadata, methods=get),
        Route("/v2/models/{model}/ready", model_ready, methods=get),
        Route("/v2/models/{model}/versions/{version}/ready", model_ready, methods=get),
        Route("/v2/models/{model}/infer", infer, methods=post),
        Route("/v2/models/{model}/versions/{version}/infer", infer, methods=post),
    ]
    if control is not None:
        routes += [
            Route("/v2/repository/index", repository_index, methods=post),
            Route("/v2/repository/models/{model}/load", repository_load, methods=post),
            Route("/v2/repository/models/{model}/unload", repository_unload, methods=post),
        ]
    routes = [Route(r.path, _guarded(r.endpoint), methods=r.methods) for r in routes]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        where = f"{request.method} {request.url.path}"
        if exc.status_code == 404:
            message = f"no such endpoint: {where}"
            if request.url.path.startswith("/v2/repository") and control is None:
                message += (
                    " (the model repository extension is off; start the server with "
                    "--enable-model-control and a token to serve it)"
                )
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        log.warning("%s -> %d: %s", where, exc.status_code, message)
        return json_response({"error": message}, exc.status_code, dict(exc.headers or {}))

    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


async def _repository_parameters(request: Request, allowed: frozenset[str]) -> None:
    """The extension's load/unload may carry parameters (a config override, files); this
    server loads only what it was started with, so load takes none and unload only
    Triton's ``unload_dependents`` (a boolean)."""
    body = await request.body()
    if not body.strip():
        return
    try:
        options = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise bad_request(f"the request body is not valid JSON ({err})") from None
    parameters = options.get("parameters", {}) if isinstance(options, dict) else None
    if (
        not isinstance(parameters, dict)
        or set(options) - {"parameters"}
        or set(parameters) - allowed
        or not all(isinstance(v, bool) for v in parameters.values())
    ):
        raise bad_request(REPOSITORY_PARAMETERS_MESSAGE)


async def serve_models(
    models: Sequence[Any],
    host: str,
    port: int,
    limits: Limits,
    *,
    grpc_port: int | None = None,
    grpc_host: str | None = None,
    control: ModelControl | None = None,
) -> None:
    """Serve loaded KServe ``models`` (each with a ``version`` label) on ``host:port``
    over HTTP and, with ``grpc_port``, on ``grpc_host`` (default ``host``) over gRPC,
    until the process is interrupted. Raises `OSError` when a port cannot be bound."""
    served = ServedModels(models)
    admission = AdmissionControl(
        build_app(served, control), limits, {m.name: getattr(m, "version", "") for m in models}
    )
    sock = bind_socket(host, port)
    config = uvicorn.Config(
        admission,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=5,
        lifespan="off",
    )
    http = uvicorn.Server(config)
    if grpc_port is None:
        await http.serve(sockets=[sock])
        return
    from workloads.serving.grpc_service import start_grpc  # noqa: PLC0415  (grpc only here)

    try:
        grpc_server = await start_grpc(served, admission, grpc_host or host, grpc_port, control)
    except OSError:
        sock.close()
        raise
    try:
        await http.serve(sockets=[sock])
    finally:
        await grpc_server.stop(grace=5)
