"""The V2 (Open Inference Protocol) server: KServe's `ModelServer`, HTTP and gRPC in one
event loop, with this project's deltas (the repository's and data plane's in
`workloads.serving.dataplane`, gRPC's in `workloads.serving.grpc_service`), each
commented where KServe 0.21 does otherwise:

- it binds where it is told, 127.0.0.1 by default (0.0.0.0 in a pod via ``--host``);
- every error is ``{"error": "<message>"}`` with the protocol's status, a 4xx logged as
  one line (a 5xx with its traceback);
- its own infer route: the binary tensor extension whatever the content type says, the
  protocol's checks (`workloads.serving.protocol`), admission (`workloads.serving.limits`);
- versioned paths answer for the version served, 404 for another; ``.../config`` is
  Triton's model configuration;
- the repository extension only when enabled, behind the bearer token, and an unloaded
  model stays known and unready until loaded again.

Used by the language-model predictor (``python -m workloads.serving``) and the tabular
predictor (``python -m workloads.features serve``).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from typing import Any, TypeVar

import kserve
import orjson
import pydantic
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from kserve import errors
from kserve.constants.constants import INFERENCE_CONTENT_LENGTH_HEADER as BINARY_HEADER
from kserve.protocol.infer_type import InferRequest
from kserve.protocol.rest import server as rest_server
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from workloads.serving.dataplane import DataPlane, Repository, version_of
from workloads.serving.grpc_service import GRPCServer
from workloads.serving.limits import Admission, Limits
from workloads.serving.net import bind_socket
from workloads.serving.protocol import (
    REPOSITORY_PARAMETERS_MESSAGE,
    UNLOAD_PARAMETERS,
    ModelControl,
    ProtocolError,
    bad_request,
    error_status,
)

log = logging.getLogger("workloads.serving")
ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


# --- HTTP ---------------------------------------------------------------------------------


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def refusal(
    request: Request, status: int, message: str, headers: dict[str, str] | None = None
) -> Response:
    """The protocol's error body, logged as one line."""
    log.warning("%s %s -> %d: %s", request.method, request.url.path, status, message)
    extra = {401: {"www-authenticate": "Bearer"}, 429: {"retry-after": "1"}}.get(status, {})
    return json_response({"error": message}, status, {**(headers or {}), **extra})


async def error_handler(request: Request, exc: Exception) -> Response:
    status = error_status(exc)
    if status is None:  # a server fault: Starlette re-raises it and uvicorn logs its traceback
        return json_response({"error": f"internal error: {type(exc).__name__}"}, 500)
    return refusal(request, int(status.status), status.message)


class _Tensor(pydantic.BaseModel):
    name: str
    datatype: str
    shape: list[pydantic.NonNegativeInt]
    parameters: dict[str, Any] | None = None
    data: list[Any] | None = None


class _Output(pydantic.BaseModel):
    name: str
    parameters: dict[str, Any] | None = None


class _Request(pydantic.BaseModel):
    """An inference request's shape. KServe's ``InferenceRequest`` model (kserve/protocol/
    rest/v2_datamodels.py) requires ``data``, which the binary extension leaves out, and
    accepts unknown fields."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    id: str | None = None
    parameters: dict[str, Any] | None = None
    inputs: list[_Tensor] = pydantic.Field(min_length=1)
    outputs: list[_Output] | None = None


class _Index(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True)
    ready: bool = False


class _Control(pydantic.BaseModel):
    """Load's and unload's body: parameters (a config override, files, Triton's
    ``unload_dependents``), of which this server takes only ``unload_dependents``: it
    loads only what it was started with."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    parameters: dict[str, bool] = {}


Body = TypeVar("Body", bound=pydantic.BaseModel)


def parse(kind: type[Body], body: bytes) -> Body:
    """A JSON body of the shape ``kind`` (empty: ``{}``); a 400 naming what is wrong."""
    try:
        return kind.model_validate_json(body if body.strip() else b"{}")
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        if first["type"] == "json_invalid":
            raise bad_request(f"the request body is not valid JSON ({first['msg']})") from None
        where = ".".join(map(str, first["loc"])) or "body"
        raise bad_request(f"the request's {where}: {first['msg']}") from None


def parse_infer_body(body: bytes, header: str | None, model_name: str) -> InferRequest:
    """An HTTP inference request: JSON, or with ``header`` the binary extension's JSON
    header of that many bytes followed by the tensors' bytes. Its shape is checked first:
    ``InferRequest.from_bytes`` (kserve/protocol/infer_type.py) answers a malformed one
    with a KeyError (a 500)."""
    json_length = len(body)
    if header is not None:
        json_length = int(header) if header.isdigit() else -1
        if not 0 < json_length <= len(body):
            raise bad_request(f"{BINARY_HEADER} is {header!r}; the body has {len(body)} bytes")
    parsed = parse(_Request, body[:json_length])
    sizes: list[Any] = [(t.parameters or {}).get("binary_data_size") for t in parsed.inputs
                        if t.data is None]  # fmt: skip
    if any(not isinstance(s, int) or s < 0 for s in sizes) or (sizes and header is None):
        raise bad_request("every input needs 'data', or binary_data_size with the binary extension")
    if header is not None and sum(sizes) != len(body) - json_length:
        raise bad_request(
            f"the inputs' binary_data_size add up to {sum(sizes)} bytes but the body has "
            f"{len(body) - json_length} bytes after the JSON header"
        )
    try:
        return InferRequest.from_bytes(body, json_length, model_name)
    except (TypeError, ValueError) as err:  # e.g. data that do not fit the shape
        if isinstance(err, errors.InvalidInput):
            raise
        raise bad_request(f"the request does not follow the protocol ({err})") from None


async def _not_served(request: Request) -> Response:
    raise HTTPException(404)


class RESTServer(rest_server.RESTServer):  # type: ignore[misc]
    """KServe's REST server and FastAPI application with the HTTP deltas."""

    def __init__(self, server: ModelServer, admission: Admission) -> None:
        super().__init__(
            "kserve.model_server:app",
            server.dataplane,
            server.model_repository_extension,
            server.http_port,
            grace_period=server.grace_period,
        )
        self.dataplane: DataPlane = server.dataplane
        self.repository = server.dataplane.repository
        self.control = server.dataplane.control
        self.admission = admission
        # RESTServer.__init__ (kserve/protocol/rest/server.py) binds 0.0.0.0, hard-coded.
        self.config.host = server.host

    async def serve(self, sock: socket.socket) -> None:
        """``RESTServer.start`` on a socket bound before anything is served."""
        self.create_application()
        await self._server.serve(sockets=[sock])

    def _add_exception_handlers(self, app: FastAPI) -> None:
        # KServe's handlers (kserve/errors.py) log every 4xx with its traceback, and
        # FastAPI's answer {"detail": ...}.
        for kind in (
            ProtocolError, errors.InvalidInput, errors.InferenceError, errors.ModelNotFound,
            errors.ModelNotReady, NotImplementedError, errors.UnsupportedProtocol,
            errors.ServerNotLive, errors.ServerNotReady, RequestValidationError, Exception,
        ):  # fmt: skip
            app.add_exception_handler(kind, error_handler)
        app.add_exception_handler(HTTPException, self.http_error)

    async def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"no such endpoint: {request.method} {request.url.path}"
            if request.url.path.startswith("/v2/repository") and self.control is None:
                message += (
                    " (the model repository extension is off; start the server with "
                    "--enable-model-control and a token to serve it)"
                )
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        return refusal(request, exc.status_code, message, dict(exc.headers or {}))

    def _register_endpoints(self, app: FastAPI) -> None:
        super()._register_endpoints(app)
        model = "/v2/models/{model_name}"
        version = f"{model}/versions/{{model_version}}"
        get, post = ["GET"], ["POST"]
        # Ahead of KServe's (kserve/protocol/rest/v2_endpoints.py): V2Endpoints.infer reads
        # the body through FastAPI (a binary body without a content type is parsed as JSON
        # and refused), the versioned routes answer 501 (V2Endpoints.infer, .model_metadata,
        # .model_ready), load and unload are open to anyone, and there is no index.
        ours = [
            Route(f"{model}/infer", self.infer, methods=post),
            Route(f"{version}/infer", self.infer, methods=post),
            Route(version, self.model_metadata, methods=get),
            Route(f"{version}/ready", self.model_ready, methods=get),
            Route(f"{model}/config", self.model_config, methods=get),
            Route(f"{version}/config", self.model_config, methods=get),
        ]
        repository = {
            "/v2/repository/index": self.repository_index,
            "/v2/repository/models/{model_name}/load": self.repository_load,
            "/v2/repository/models/{model_name}/unload": self.repository_unload,
        }
        # KServe also registers its V1 protocol (kserve/protocol/rest/v1_endpoints.py,
        # register_v1_endpoints), whose predict goes to the data plane past this server's
        # admission and request checks: the server speaks V2 only, so V1 is not served.
        ours.append(Route("/v1/{path:path}", _not_served, methods=ALL_METHODS))
        for path, endpoint in repository.items():
            if self.control is None:
                ours.append(Route(path, _not_served, methods=ALL_METHODS))
            else:
                ours.append(Route(path, endpoint, methods=post))
        app.router.routes[:0] = ours

    # --- the routes --------------------------------------------------------------------

    async def model_metadata(self, request: Request) -> Response:
        params = request.path_params
        meta = await self.dataplane.model_metadata(params["model_name"], params["model_version"])
        return json_response(meta)

    async def model_config(self, request: Request) -> Response:
        name, version = request.path_params["model_name"], request.path_params.get("model_version")
        return json_response(await self.dataplane.model_config(name, version))

    async def model_ready(self, request: Request) -> Response:
        name = request.path_params["model_name"]
        self.repository.model(name, request.path_params["model_version"], ready=True)
        return json_response({"name": name, "ready": True})

    async def infer(self, request: Request) -> Response:
        name = request.path_params["model_name"]
        return await self.admission.run(name, lambda: self._infer(request, name))

    async def _infer(self, request: Request, name: str) -> Response:
        self.repository.model(name, request.path_params.get("model_version"), ready=True)
        headers = dict(request.headers)
        body = await self.admission.read_body(headers.get("content-length"), request.stream())
        infer_request = parse_infer_body(body, headers.get(BINARY_HEADER), name)
        answer = await self.dataplane.answer(name, infer_request, headers, grpc_answer=False)
        encoded, response_headers = self.dataplane.encode(name, answer, headers, {})
        if isinstance(encoded, bytes):
            return Response(encoded, 200, response_headers, "application/octet-stream")
        return json_response(encoded, headers=response_headers)

    def authorize(self, request: Request) -> None:
        assert self.control is not None
        authorization = request.headers.get("authorization")
        self.control.authorize(authorization, "'Authorization: Bearer <token>'")

    async def repository_index(self, request: Request) -> Response:
        self.authorize(request)
        options = parse(_Index, await request.body())
        return json_response(self.repository.index(options.ready))

    async def control_request(self, request: Request, allowed: frozenset[str]) -> None:
        self.authorize(request)
        if set(parse(_Control, await request.body()).parameters) - allowed:
            raise bad_request(REPOSITORY_PARAMETERS_MESSAGE)

    async def repository_load(self, request: Request) -> Response:
        await self.control_request(request, frozenset())
        self.repository.load(request.path_params["model_name"])
        return json_response({})

    async def repository_unload(self, request: Request) -> Response:
        await self.control_request(request, UNLOAD_PARAMETERS)
        self.repository.unload(request.path_params["model_name"])
        return json_response({})


class ModelServer(kserve.ModelServer):  # type: ignore[misc]
    """KServe's model server, bound to ``host``, with this project's deltas.

    Args:
        host: address to bind HTTP (127.0.0.1; 0.0.0.0 in a pod).
        http_port: HTTP port.
        limits: admission bounds of inference requests.
        grpc_port: gRPC port (``None``: no gRPC).
        grpc_host: address to bind gRPC (default ``host``).
        control: the repository extension's token (``None``: not served).
    """

    def __init__(
        self,
        host: str,
        http_port: int,
        limits: Limits,
        *,
        grpc_port: int | None = None,
        grpc_host: str | None = None,
        control: ModelControl | None = None,
    ) -> None:
        repository = Repository()
        super().__init__(
            http_port=http_port, grpc_port=grpc_port or 0, enable_grpc=grpc_port is not None,
            registered_models=repository, enable_latency_logging=False, grace_period=5,
            enable_docs_url=False, ssl_certfile=None, ssl_keyfile=None,
        )  # fmt: skip
        self.dataplane = DataPlane(repository, control)
        self.host, self.grpc_host, self.limits = host, grpc_host or host, limits

    async def serve(self, models: Sequence[Any]) -> None:
        """``ModelServer.start`` in the running event loop, every address bound before
        anything is served, until the process is interrupted. Raises `OSError` when a
        port cannot be bound."""
        self._register_and_check_atleast_one_model_is_ready(list(models))
        admission = Admission(self.limits, {model.name: version_of(model) for model in models})
        sock = bind_socket(self.host, self.http_port)
        if self.enable_grpc:
            self._grpc_server = GRPCServer(
                self.dataplane, self.grpc_host, self.grpc_port, self.grace_period, admission
            )
            try:
                self._grpc_server.bind()
            except OSError:
                sock.close()
                raise
        self._rest_server = RESTServer(self, admission)
        self.servers = [self._rest_server.serve(sock)]
        if self._grpc_server is not None:
            self.servers.append(self._grpc_server.start(self.max_threads))
        self.register_signal_handler()
        await self._serve()


async def serve_models(
    models: Sequence[Any], host: str, port: int, limits: Limits, **options: Any
) -> None:
    """Serve loaded KServe ``models`` (each with a ``version`` label) on ``host:port``
    until the process is interrupted (``options``: `ModelServer`'s gRPC and control).
    Raises `OSError` when a port cannot be bound."""
    await ModelServer(host, port, limits, **options).serve(models)
