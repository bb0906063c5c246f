"""The gRPC side of the V2 server (`inference.GRPCInferenceService`).

The core methods (ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata,
ModelInfer) use KServe's messages (`grpc_predict_v2_pb2`), which have the same field
numbers as Triton's ``grpc_service.proto`` that tritonclient speaks. Two places differ
and are handled here:

- Triton's ``InferParameter`` has ``double_param`` (4) and ``uint64_param`` (5), which
  KServe's lacks: tritonclient sends ``temperature=0.7`` as a double, which KServe's
  message keeps only as an unknown field. `grpc_parameters` reads those fields (and
  refuses a parameter with no value at all) instead of dropping them silently.
- KServe's ``RepositoryModelLoadRequest`` puts ``model_name`` at field 1, where
  Triton's has ``repository_name`` (``model_name`` is 2), and KServe has no
  ``RepositoryIndex``. The repository methods therefore use Triton's message layout
  (`_triton_messages`, built in a private descriptor pool so that they never clash with
  KServe's or tritonclient's in the default pool), and exist only when model control
  is enabled; they need ``authorization: Bearer <token>`` metadata. Load takes no
  parameters (no config override or files: the server loads only what it was started
  with); unload takes Triton's ``unload_dependents`` (there are no dependents here).

Every answer is counted in the predictor's metrics like an HTTP one (``code`` is the
HTTP status the gRPC status corresponds to), in-flight requests share the HTTP side's
bound, and a request still unanswered after the timeout gets DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any

import grpc  # type: ignore[import-untyped]  # no stubs; covered by tests/serving
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, unknown_fields
from google.protobuf.message import Message
from grpc import aio
from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve.protocol.grpc.servicer import InferenceServicer
from kserve.protocol.infer_type import InferRequest

from workloads.serving import metrics
from workloads.serving.limits import AdmissionControl
from workloads.serving.protocol import (
    GRPC_TO_HTTP,
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
)
from workloads.serving.registry import ServedModels, version_of

log = logging.getLogger("workloads.serving")

SERVICE = "inference.GRPCInferenceService"
#: Triton's InferParameter fields that KServe's message does not have.
_DOUBLE_FIELD, _UINT64_FIELD = 4, 5
_WIRE_VARINT, _WIRE_FIXED64 = 0, 1


def _parameter_value(key: str, parameter: Any) -> Any:
    which = parameter.WhichOneof("parameter_choice")
    if which is not None:
        return getattr(parameter, which)
    for field in unknown_fields.UnknownFieldSet(parameter):
        if field.field_number == _DOUBLE_FIELD and field.wire_type == _WIRE_FIXED64:
            return struct.unpack("<d", struct.pack("<Q", field.data))[0]
        if field.field_number == _UINT64_FIELD and field.wire_type == _WIRE_VARINT:
            return int(field.data)
    raise bad_request(f"parameter {key!r} has no value of a type this server reads")


def grpc_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A gRPC parameter map as plain values (bool, int, str, float)."""
    return {key: _parameter_value(key, value) for key, value in parameters.items()}


def infer_request(message: Any) -> InferRequest:
    """KServe's `InferRequest` of a ``ModelInferRequest``, every parameter kept."""
    InferenceServicer.validate_grpc_request(message)
    request = InferRequest.from_grpc(message)
    request.parameters = grpc_parameters(message.parameters)
    for tensor, source in zip(request.inputs, message.inputs, strict=True):
        tensor.parameters = grpc_parameters(source.parameters)
    for output, source_output in zip(request.request_outputs or [], message.outputs, strict=True):
        output.parameters = grpc_parameters(source_output.parameters)
    return request


def _triton_messages() -> dict[str, type[Message]]:
    """Triton's repository messages (grpc_service.proto, the layout tritonclient sends),
    without the load parameters (a request carrying them is refused)."""
    string, boolean, message = (
        descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
        descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
    )
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    repeated = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    proto = descriptor_pb2.FileDescriptorProto(
        name="workloads_serving_repository.proto", package="inference", syntax="proto3"
    )

    def add(name: str, *fields: tuple[str, int, int, int, str]) -> descriptor_pb2.DescriptorProto:
        msg = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            field = msg.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = type_name
        return msg

    add("RepositoryIndexRequest", ("repository_name", 1, string, optional, ""),
        ("ready", 2, boolean, optional, ""))  # fmt: skip
    index = add(
        "RepositoryIndexResponse",
        ("models", 1, message, repeated, ".inference.RepositoryIndexResponse.ModelIndex"),
    )
    entry = index.nested_type.add(name="ModelIndex")
    for number, field_name in enumerate(("name", "version", "state", "reason"), start=1):
        entry.field.add(name=field_name, number=number, type=string, label=optional)
    parameter = add(
        "ModelRepositoryParameter",
        ("bool_param", 1, boolean, optional, ""),
        ("int64_param", 2, descriptor_pb2.FieldDescriptorProto.TYPE_INT64, optional, ""),
        ("string_param", 3, string, optional, ""),
        ("bytes_param", 4, descriptor_pb2.FieldDescriptorProto.TYPE_BYTES, optional, ""),
    )
    parameter.oneof_decl.add(name="parameter_choice")
    for field in parameter.field:
        field.oneof_index = 0
    for verb in ("Load", "Unload"):
        request = add(
            f"RepositoryModel{verb}Request",
            ("repository_name", 1, string, optional, ""),
            ("model_name", 2, string, optional, ""),
            ("parameters", 3, message, repeated,
             f".inference.RepositoryModel{verb}Request.ParametersEntry"),
        )  # fmt: skip
        entry_type = request.nested_type.add(name="ParametersEntry")
        entry_type.options.map_entry = True
        entry_type.field.add(name="key", number=1, type=string, label=optional)
        entry_type.field.add(
            name="value", number=2, type=message, label=optional,
            type_name=".inference.ModelRepositoryParameter",
        )  # fmt: skip
        add(f"RepositoryModel{verb}Response")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{m.name}"))
        for m in proto.message_type
    }


class Servicer:
    """The service's methods over ``served`` (see the module docstring)."""

    def __init__(
        self, served: ServedModels, admission: AdmissionControl, control: ModelControl | None
    ) -> None:
        self.served = served
        self.admission = admission
        self.control = control
        self.triton = _triton_messages() if control is not None else {}

    async def ServerLive(self, request: Any, context: Any) -> Any:  # noqa: N802 (the rpc's name)
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:  # noqa: N802
        return pb.ServerReadyResponse(ready=self.served.all_ready())

    async def ModelReady(self, request: Any, context: Any) -> Any:  # noqa: N802
        return pb.ModelReadyResponse(ready=self.served.is_ready(request.name, request.version))

    async def ServerMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802
        return pb.ServerMetadataResponse(
            name=SERVER_NAME, version=server_version(), extensions=extensions(self.control)
        )

    async def ModelMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802
        meta = await self.served.metadata(request.name, request.version)
        return pb.ModelMetadataResponse(**meta)

    async def ModelInfer(self, request: Any, context: Any) -> Any:  # noqa: N802
        name = request.model_name
        version = version_of(self.served.models[name]) if name in self.served.models else ""
        started = time.perf_counter()
        code = 500
        try:
            if self.admission.in_flight >= self.admission.limits.max_in_flight:
                metrics.REJECTED.labels(name, version, "overload").inc()
                code = 429
                raise ProtocolError(
                    HTTPStatus.TOO_MANY_REQUESTS,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"the server is serving {self.admission.in_flight} requests; retry after "
                    "a moment",
                )
            self.admission.in_flight += 1
            try:
                response = await asyncio.wait_for(
                    self._infer(request, context), timeout=self.admission.limits.timeout_s
                )
            except TimeoutError:
                metrics.REJECTED.labels(name, version, "timeout").inc()
                code = 504
                raise ProtocolError(
                    HTTPStatus.GATEWAY_TIMEOUT,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no answer within {self.admission.limits.timeout_s:g} s; retry, or send a "
                    "smaller request",
                ) from None
            finally:
                self.admission.in_flight -= 1
            code = 200
            return response
        except Exception as err:
            status = error_status(err)
            if status is not None:
                code = GRPC_TO_HTTP.get(status.code, 500)
            raise
        finally:
            if name in self.served.models:
                metrics.REQUESTS.labels(name, version, str(code)).inc()
                metrics.DURATION.labels(name, version).observe(time.perf_counter() - started)

    async def _infer(self, message: Any, context: Any) -> Any:
        request = infer_request(message)
        headers = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        response = await self.served.infer(
            message.model_name, message.model_version, request, headers, grpc_answer=True
        )
        return response.to_grpc()

    # --- the repository extension (only with model control) ---------------------------

    def _authorize(self, context: Any) -> None:
        assert self.control is not None
        metadata = dict(context.invocation_metadata())
        if not self.control.authorized(metadata.get("authorization")):
            raise unauthenticated("model control needs 'authorization: Bearer <token>' metadata")

    @staticmethod
    def _parameters(request: Any, allowed: frozenset[str]) -> None:
        given = set(request.parameters)
        if given - allowed or unknown_fields.UnknownFieldSet(request):
            raise bad_request(REPOSITORY_PARAMETERS_MESSAGE)

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:  # noqa: N802
        self._authorize(context)
        entries = self.served.index()
        if request.ready:
            entries = [e for e in entries if e["state"] == "READY"]
        response = self.triton["RepositoryIndexResponse"]()
        for entry in entries:
            response.models.add(**entry)
        return response

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:  # noqa: N802
        self._authorize(context)
        self._parameters(request, frozenset())
        self.served.load(request.model_name)
        return self.triton["RepositoryModelLoadResponse"]()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:  # noqa: N802
        self._authorize(context)
        self._parameters(request, UNLOAD_PARAMETERS)
        self.served.unload(request.model_name)
        return self.triton["RepositoryModelUnloadResponse"]()


Handler = Callable[[Any, Any], Awaitable[Any]]


def _guarded(method: str, handler: Handler) -> Handler:
    """Every exception becomes a gRPC status with its message; a client error is one
    log line, a server fault is logged with its traceback."""

    async def run(request: Any, context: Any) -> Any:
        try:
            return await handler(request, context)
        except Exception as err:  # every error is a status with a message
            status = error_status(err)
            if status is None:
                log.exception("gRPC %s: server error", method)
                await context.abort(
                    grpc.StatusCode.INTERNAL, f"internal error: {type(err).__name__}"
                )
            else:
                log.warning("gRPC %s -> %s: %s", method, status.code.name, status.message)
                await context.abort(status.code, status.message)
            raise AssertionError("unreachable: abort raises") from err

    return run


def _handlers(servicer: Servicer) -> dict[str, grpc.RpcMethodHandler]:
    kserve_methods = {
        "ServerLive": (pb.ServerLiveRequest, servicer.ServerLive),
        "ServerReady": (pb.ServerReadyRequest, servicer.ServerReady),
        "ModelReady": (pb.ModelReadyRequest, servicer.ModelReady),
        "ServerMetadata": (pb.ServerMetadataRequest, servicer.ServerMetadata),
        "ModelMetadata": (pb.ModelMetadataRequest, servicer.ModelMetadata),
        "ModelInfer": (pb.ModelInferRequest, servicer.ModelInfer),
    }
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            _guarded(name, method),
            request_deserializer=request_type.FromString,
            response_serializer=lambda m: m.SerializeToString(),
        )
        for name, (request_type, method) in kserve_methods.items()
    }
    if servicer.control is not None:
        triton = servicer.triton
        repository = {
            "RepositoryIndex": (triton["RepositoryIndexRequest"], servicer.RepositoryIndex),
            "RepositoryModelLoad": (
                triton["RepositoryModelLoadRequest"],
                servicer.RepositoryModelLoad,
            ),
            "RepositoryModelUnload": (
                triton["RepositoryModelUnloadRequest"],
                servicer.RepositoryModelUnload,
            ),
        }
        for name, (request_type, method) in repository.items():
            handlers[name] = grpc.unary_unary_rpc_method_handler(
                _guarded(name, method),
                request_deserializer=request_type.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )
    return handlers


async def start_grpc(
    served: ServedModels,
    admission: AdmissionControl,
    host: str,
    port: int,
    control: ModelControl | None,
) -> aio.Server:
    """Start the gRPC server on ``host:port`` (plaintext: on a cluster it is reached
    through the TLS proxy only). Raises `OSError` when the port cannot be bound."""
    server = aio.server(
        options=[
            ("grpc.max_receive_message_length", admission.limits.max_body_bytes),
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.so_reuseport", 0),
        ]
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE, _handlers(Servicer(served, admission, control))
            ),
        )
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as err:
        raise OSError(98, f"cannot bind gRPC to {address} ({err})") from err
    if bound == 0:
        raise OSError(98, f"cannot bind gRPC to {address}")
    await server.start()
    return server
