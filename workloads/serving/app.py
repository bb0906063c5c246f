"""The V2 (Open Inference Protocol) server: KServe's `ModelServer` with this project's
deltas, over HTTP and gRPC in one event loop (gRPC's deltas: `workloads.serving.grpc_service`).

KServe's, unchanged: its FastAPI application with the routes for liveness, readiness,
the model list, model metadata and readiness (and its v1 routes), its data plane (model
lookup, calling the model, encoding the answer), its model repository, its gRPC
servicer, its request and response types. The deltas, each where KServe 0.21 does
otherwise (the comments name the place):

- it binds where it is told, 127.0.0.1 by default (0.0.0.0 in a pod via ``--host``);
- every error is ``{"error": "<message>"}`` with the protocol's status (FastAPI's own
  are ``{"detail": ...}``), and a 4xx is logged as one line (a 5xx with its traceback);
- ``/v2/models/<m>[/versions/<v>]/infer`` reads the body itself: JSON whatever the
  content type says, unless ``Inference-Header-Content-Length`` makes it the binary
  tensor extension's JSON header plus tensor bytes; the protocol's shape, datatypes
  and parameters are checked (`workloads.serving.protocol`), requested outputs honoured;
- ``/v2/models/<m>/versions/<v>[/ready|/infer]`` answer for the version the model serves
  and 404 for any other; ``.../config`` is Triton's model configuration (tritonclient's
  ``get_model_config``);
- the repository extension (index, load, unload) exists only when the server is started
  with it, and then needs the bearer token (`protocol.ModelControl`); server metadata
  advertises it only then; an unloaded model stays known, unready, and is not loaded
  again behind the caller's back; the server is ready when all its models are;
- admission control (`workloads.serving.limits`) in front of inference.

Used by the language-model predictor (``python -m workloads.serving``) and the tabular
predictor (``python -m workloads.features serve``). It imports neither torch nor the
language-model code.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from typing import Any

import kserve
import orjson
import pydantic
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from kserve import errors
from kserve.constants.constants import FASTAPI_APP_IMPORT_STRING, INFERENCE_CONTENT_LENGTH_HEADER
from kserve.model_repository import ModelRepository
from kserve.model_server import app as kserve_app
from kserve.protocol import dataplane
from kserve.protocol.infer_type import InferRequest
from kserve.protocol.rest import server as rest_server
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from workloads.serving.limits import AdmissionControl, Limits
from workloads.serving.net import bind_socket
from workloads.serving.protocol import (
    REPOSITORY_PARAMETERS_MESSAGE,
    UNLOAD_PARAMETERS,
    ModelControl,
    ProtocolError,
    bad_request,
    check_request,
    check_version,
    error_status,
    extensions,
    not_found,
    unavailable,
    with_requested_outputs,
)

log = logging.getLogger("workloads.serving")

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
#: Triton's data types in a model configuration, by the protocol's datatype.
CONFIG_TYPES = {"BYTES": "TYPE_STRING"}


def version_of(model: Any) -> str:
    """A model's version label (``version`` attribute; empty when it has none)."""
    return str(getattr(model, "version", "") or "")


class Repository(ModelRepository):  # type: ignore[misc]  # kserve ships no types
    """KServe's model repository, keeping every model the server was started with.

    KServe's ``ModelRepository.unload`` (kserve/model_repository.py) forgets the model
    and its ``load`` does nothing, so a model unloaded through the repository extension
    could never come back; here unloading frees the model and marks it unready, and
    loading opens it again."""

    def model(self, name: str, version: str | None = None, *, ready: bool = False) -> Any:
        """The model ``name`` (at ``version``, loaded when ``ready``); `ProtocolError`
        404 or 503 otherwise."""
        model = self.get_model(name)
        if model is None:
            known = ", ".join(sorted(self.get_models()))
            raise not_found(f"unknown model {name!r}; this server serves {known}")
        check_version(name, version_of(model), version)
        if ready and not model.ready:
            raise unavailable(f"model {name!r} is not loaded")
        return model

    def load(self, name: str) -> bool:
        model = self.model(name)
        if not model.ready:
            model.load()
        return bool(model.ready)

    def unload(self, name: str) -> None:
        model = self.model(name)
        getattr(model, "unload", model.stop)()
        model.ready = False

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """The extension's index, Triton's states: every model, its version and state."""
        return [
            {
                "name": name,
                "version": version_of(model),
                "state": "READY" if model.ready else "UNAVAILABLE",
                "reason": "" if model.ready else "unloaded",
            }
            for name, model in sorted(self.get_models().items())
            if model.ready or not ready_only
        ]


class DataPlane(dataplane.DataPlane):  # type: ignore[misc]
    """KServe's data plane, truthful about extensions, readiness and versions."""

    def __init__(self, repository: Repository, control: ModelControl | None) -> None:
        super().__init__(model_registry=repository)
        self.repository = repository
        self.control = control

    def metadata(self) -> dict[str, Any]:
        # KServe's advertises "model_repository_extension" whether or not it is served
        # (DataPlane.metadata).
        return {**super().metadata(), "extensions": extensions(self.control)}

    async def ready(self) -> bool:
        # KServe's is always true for a predictor (DataPlane.ready): here the server is
        # ready when every model it was started with is loaded.
        return all(model.ready for model in self.repository.get_models().values())

    async def get_model(self, name: str) -> Any:
        # KServe's loads a model that is not ready on the next request (DataPlane.get_model),
        # undoing an unload: here it is a 503 until the extension loads it.
        return self.repository.model(name, ready=True)

    async def model_metadata(self, model_name: str, version: str | None = None) -> dict[str, Any]:
        # KServe's has no versions (DataPlane.model_metadata).
        served = version_of(self.repository.model(model_name, version))
        return {**await super().model_metadata(model_name), "versions": [served] if served else []}

    async def model_config(self, model_name: str, version: str | None = None) -> dict[str, Any]:
        """Triton's model configuration of a model (tritonclient's ``get_model_config``)."""
        meta = await self.model_metadata(model_name, version)

        def tensors(kind: str) -> list[dict[str, Any]]:
            return [
                {
                    "name": t["name"],
                    "data_type": CONFIG_TYPES.get(t["datatype"], f"TYPE_{t['datatype']}"),
                    "dims": list(t["shape"]),
                }
                for t in meta[kind]
            ]

        return {
            "name": model_name,
            "platform": "",
            "backend": "kserve",
            "max_batch_size": 0,
            "input": tensors("inputs"),
            "output": tensors("outputs"),
        }


# --- the HTTP side -----------------------------------------------------------------------


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def refusal(request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """The protocol's error body, logged as one line."""
    log.warning("%s %s -> %d: %s", request.method, request.url.path, status, message)
    if status == 401:
        headers = {**(headers or {}), "www-authenticate": "Bearer"}
    return json_response({"error": message}, status, headers)


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
    """The shape of an inference request (KServe's ``InferenceRequest`` requires
    ``data``, which the binary extension leaves out, and accepts unknown fields)."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    id: str | None = None
    parameters: dict[str, Any] | None = None
    inputs: list[_Tensor] = pydantic.Field(min_length=1)
    outputs: list[_Output] | None = None


def parse_infer_body(body: bytes, header: str | None, model_name: str) -> InferRequest:
    """An HTTP inference request: JSON, or with ``header`` the binary extension's JSON
    header of that many bytes followed by the tensors' bytes. Its shape is checked first:
    KServe's ``InferRequest.from_bytes`` answers a malformed one with a KeyError (a 500)."""
    json_length = len(body)
    if header is not None:
        try:
            json_length = int(header)
        except ValueError:
            raise bad_request(f"{INFERENCE_CONTENT_LENGTH_HEADER} must be an integer") from None
        if not 0 < json_length <= len(body):
            raise bad_request(
                f"{INFERENCE_CONTENT_LENGTH_HEADER} is {json_length} but the body has "
                f"{len(body)} bytes"
            )
    try:
        parsed = _Request.model_validate_json(body[:json_length])
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        if first["type"] == "json_invalid":
            raise bad_request(f"the request body is not valid JSON ({first['msg']})") from None
        where = ".".join(map(str, first["loc"])) or "body"
        raise bad_request(f"the request's {where}: {first['msg']}") from None
    binary_total = 0
    for tensor in parsed.inputs:
        size = (tensor.parameters or {}).get("binary_data_size")
        if tensor.data is None and (header is None or not isinstance(size, int) or size < 0):
            raise bad_request(f"input {tensor.name!r}: 'data' (or binary_data_size) is missing")
        binary_total += 0 if tensor.data is not None else size
    if header is not None and binary_total != len(body) - json_length:
        raise bad_request(
            f"the inputs' binary_data_size add up to {binary_total} bytes but the body has "
            f"{len(body) - json_length} bytes after the JSON header"
        )
    try:
        return InferRequest.from_bytes(body, json_length, model_name)
    except (TypeError, ValueError) as err:  # e.g. data that do not fit the shape
        if isinstance(err, errors.InvalidInput):
            raise
        raise bad_request(f"the request does not follow the protocol ({err})") from None


async def _repository_options(request: Request, allowed: frozenset[str] | None) -> dict[str, Any]:
    """The JSON body of a repository request (empty: ``{}``). Load and unload may carry
    parameters (a config override, files); this server loads only what it was started
    with, so load takes none and unload only Triton's ``unload_dependents`` (a boolean)."""
    body = await request.body()
    try:
        options = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError as err:
        raise bad_request(f"the request body is not valid JSON ({err})") from None
    if allowed is None:
        if not isinstance(options, dict) or not isinstance(options.get("ready", False), bool):
            raise bad_request("the index request is an object with an optional 'ready' boolean")
        return dict(options)
    parameters = options.get("parameters", {}) if isinstance(options, dict) else None
    if (
        not isinstance(parameters, dict)
        or set(options) - {"parameters"}
        or set(parameters) - allowed
        or not all(isinstance(v, bool) for v in parameters.values())
    ):
        raise bad_request(REPOSITORY_PARAMETERS_MESSAGE)
    return dict(options)


async def _not_served(request: Request) -> Response:
    raise HTTPException(404)


class RESTServer(rest_server.RESTServer):  # type: ignore[misc]
    """KServe's REST server and FastAPI application with the HTTP deltas (module
    docstring), behind admission control."""

    def __init__(self, server: ModelServer, admission: AdmissionControl) -> None:
        super().__init__(
            FASTAPI_APP_IMPORT_STRING,
            server.dataplane,
            server.model_repository_extension,
            server.http_port,
            grace_period=server.grace_period,
        )
        self.dataplane: DataPlane = server.dataplane
        self.control = server.dataplane.control
        self.admission = admission
        # RESTServer.__init__ (kserve/protocol/rest/server.py) binds 0.0.0.0, hard-coded.
        self.config.host = server.host

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
        model, version = "/v2/models/{model_name}", "/v2/models/{model_name}/versions/{model_version}"
        get, post = ["GET"], ["POST"]
        # KServe's infer route reads the body through FastAPI (a binary body without a
        # content type is parsed as JSON and refused) and its versioned routes answer 501
        # (v2_endpoints.py, V2Endpoints.infer, .model_metadata, .model_ready); it serves
        # the repository's load and unload to anyone, and no index.
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
        for path, endpoint in repository.items():
            if self.control is None:
                ours.append(Route(path, _not_served, methods=ALL_METHODS))
            else:
                ours.append(Route(path, endpoint, methods=post))
        app.router.routes[:0] = ours  # matched before KServe's, which stay behind them

    async def serve(self, sock: socket.socket) -> None:
        """`RESTServer.start` on a socket bound before (a taken port is one error), the
        application behind admission control."""
        self.create_application()
        self.config.app = self.admission
        await self._server.serve(sockets=[sock])

    # --- the routes --------------------------------------------------------------------

    async def model_metadata(self, request: Request) -> Response:
        params = request.path_params
        return json_response(
            await self.dataplane.model_metadata(params["model_name"], params["model_version"])
        )

    async def model_config(self, request: Request) -> Response:
        params = request.path_params
        return json_response(
            await self.dataplane.model_config(params["model_name"], params.get("model_version"))
        )

    async def model_ready(self, request: Request) -> Response:
        name = request.path_params["model_name"]
        self.dataplane.repository.model(name, request.path_params["model_version"], ready=True)
        return json_response({"name": name, "ready": True})

    async def infer(self, request: Request) -> Response:
        name = request.path_params["model_name"]
        version = request.path_params.get("model_version")
        self.dataplane.repository.model(name, version, ready=True)  # 404/503 before the body
        headers = dict(request.headers)
        body = await request.body()
        infer_request = parse_infer_body(body, headers.get(INFERENCE_CONTENT_LENGTH_HEADER), name)
        check_request(infer_request)
        response, _ = await self.dataplane.infer(name, infer_request, headers)
        answer = with_requested_outputs(infer_request, response, grpc_answer=False)
        encoded, response_headers = self.dataplane.encode(name, answer, headers, {})
        if isinstance(encoded, bytes):
            return Response(encoded, 200, response_headers, "application/octet-stream")
        return json_response(encoded, headers=response_headers)

    def authorize(self, request: Request) -> None:
        assert self.control is not None
        self.control.authorize(
            request.headers.get("authorization"), "'Authorization: Bearer <token>'"
        )

    async def repository_index(self, request: Request) -> Response:
        self.authorize(request)
        options = await _repository_options(request, None)
        return json_response(self.dataplane.repository.index(options.get("ready", False)))

    async def repository_load(self, request: Request) -> Response:
        self.authorize(request)
        await _repository_options(request, frozenset())
        name = request.path_params["model_name"]
        self.dataplane.repository.load(name)
        log.warning("model %s loaded through the repository extension", name)
        return json_response({})

    async def repository_unload(self, request: Request) -> Response:
        self.authorize(request)
        await _repository_options(request, UNLOAD_PARAMETERS)
        name = request.path_params["model_name"]
        self.dataplane.repository.unload(name)
        log.warning("model %s unloaded through the repository extension", name)
        return json_response({})


class ModelServer(kserve.ModelServer):  # type: ignore[misc]
    """KServe's model server, bound to ``host`` and with this project's deltas.

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
            http_port=http_port,
            grpc_port=grpc_port or 0,
            workers=1,
            registered_models=repository,
            enable_grpc=grpc_port is not None,
            enable_docs_url=False,
            enable_latency_logging=False,
            grace_period=5,
            ssl_certfile=None,
            ssl_keyfile=None,
        )
        self.dataplane = DataPlane(repository, control)
        self.host = host
        self.grpc_host = grpc_host or host
        self.limits = limits

    async def serve(self, models: Sequence[Any]) -> None:
        """`ModelServer.start` in the running event loop, on addresses bound before
        anything is served, until the process is interrupted. Raises `OSError` when a
        port cannot be bound, `ValueError` when two models have one name."""
        names = [model.name for model in models]
        if len(set(names)) != len(names):
            raise ValueError(f"two models have the same name: {', '.join(names)}")
        self._register_and_check_atleast_one_model_is_ready(list(models))
        admission = AdmissionControl(
            kserve_app, self.limits, {model.name: version_of(model) for model in models}
        )
        sock = bind_socket(self.host, self.http_port)
        self._rest_server = RESTServer(self, admission)
        self.servers = [self._rest_server.serve(sock)]
        if self.enable_grpc:
            from workloads.serving.grpc_service import GRPCServer  # noqa: PLC0415 (gRPC only here)

            self._grpc_server = GRPCServer(self, admission)
            try:
                await self._grpc_server.bind()
            except OSError:
                sock.close()
                raise
            self.servers.append(self._grpc_server.start(self.max_threads))
        self.register_signal_handler()
        await self._serve()


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
    server = ModelServer(
        host, port, limits, grpc_port=grpc_port, grpc_host=grpc_host, control=control
    )
    await server.serve(models)
