"""The gRPC side of the V2 server: KServe's gRPC server and servicer
(`inference.GRPCInferenceService`) with this project's deltas.

KServe's servicer answers ServerLive, ServerReady and ServerMetadata (through the data
plane of `workloads.serving.app`, truthful about readiness and extensions). Replaced
here, each where KServe 0.21 does otherwise:

- it binds where it is told (``GRPCServer.start`` binds ``[::]``, hard-coded);
- ModelReady and ModelMetadata answer for the version the model serves and NOT_FOUND
  for another (KServe's ignore the version), and metadata lists the version;
- ModelInfer reads every parameter: Triton's ``InferParameter`` has ``double_param``
  (4) and ``uint64_param`` (5), which KServe's message lacks, so tritonclient's
  ``temperature=0.7`` is an unknown field to KServe and dropped; it is read here
  (`grpc_parameters`), and a parameter with no value is refused. The request is
  checked and answered as over HTTP, within the same admission bounds and metrics;
- errors: one log line per client error (KServe's interceptor logs each with its
  traceback), the protocol's codes (NOT_FOUND for a version, UNAUTHENTICATED, ...);
- the repository methods: KServe's ``RepositoryModelLoadRequest`` puts ``model_name``
  at field 1, where Triton's has ``repository_name`` (``model_name`` is 2), KServe has
  no ``RepositoryIndex``, and serves load and unload to anyone. Here the three use
  Triton's message layout (`_triton_messages`, built in a private descriptor pool so
  that they never clash with KServe's or tritonclient's in the default pool), exist
  only when model control is enabled (else UNIMPLEMENTED), and need
  ``authorization: Bearer <token>`` metadata. Load takes no parameters; unload takes
  Triton's ``unload_dependents`` (there are no dependents here).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import grpc  # type: ignore[import-untyped]  # no stubs; covered by tests/serving
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, unknown_fields
from google.protobuf.message import Message
from grpc import aio
from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as pb_grpc
from kserve.protocol.grpc import server as grpc_server
from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor
from kserve.protocol.grpc.servicer import InferenceServicer
from kserve.protocol.infer_type import InferRequest
from kserve.utils.utils import to_headers

from workloads.serving.limits import Admission
from workloads.serving.net import bind_socket
from workloads.serving.protocol import (
    REPOSITORY_PARAMETERS_MESSAGE,
    UNLOAD_PARAMETERS,
    ModelControl,
    bad_request,
    error_status,
)

if TYPE_CHECKING:
    from workloads.serving.app import DataPlane, ModelServer, Repository

log = logging.getLogger("workloads.serving")

#: Triton's InferParameter fields that KServe's message does not have.
_DOUBLE_FIELD, _UINT64_FIELD = 4, 5
_WIRE_VARINT, _WIRE_FIXED64 = 0, 1
REPOSITORY_METHODS = ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload")


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


class Servicer(InferenceServicer):  # type: ignore[misc]  # kserve ships no types
    """KServe's servicer with versions, typed parameters and admission (module docstring)."""

    def __init__(self, dataplane: DataPlane, extension: Any, admission: Admission) -> None:
        super().__init__(dataplane, extension)
        self.dataplane = dataplane
        self.admission = admission

    async def ModelReady(self, request: Any, context: Any) -> Any:  # noqa: N802 (the rpc's name)
        model = self.dataplane.repository.model(request.name, request.version)
        return pb.ModelReadyResponse(ready=bool(model.ready))

    async def ModelMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802
        meta = await self.dataplane.model_metadata(request.name, request.version)
        return pb.ModelMetadataResponse(**meta)

    async def ModelInfer(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.admission.run(request.model_name, lambda: self._infer(request, context))

    async def _infer(self, message: Any, context: Any) -> Any:
        name = message.model_name
        self.dataplane.repository.model(name, message.model_version, ready=True)
        request = infer_request(message)
        answer = await self.dataplane.answer(name, request, to_headers(context), grpc_answer=True)
        return answer.to_grpc()


class StatusInterceptor(ExceptionToStatusInterceptor):  # type: ignore[misc]
    """Every exception becomes a gRPC status with its message. KServe's
    (ExceptionToStatusInterceptor.handle_exception, kserve/protocol/grpc/interceptors.py)
    logs every client error with its traceback; here a client error is one line and
    only a server fault has its traceback."""

    async def handle_exception(
        self, ex: Exception, request_or_iterator: Any, context: Any, method_name: str
    ) -> None:
        method = str(method_name).rsplit("/", 1)[-1]
        status = error_status(ex)
        if status is None:
            log.error("gRPC %s: server error", method, exc_info=ex)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(ex).__name__}")
        else:
            log.warning("gRPC %s -> %s: %s", method, status.code.name, status.message)
            await context.abort(status.code, status.message)


class MethodOverrides(aio.ServerInterceptor):  # type: ignore[misc]
    """Methods answered by ``handlers`` instead of the servicer (``None``: not served,
    UNIMPLEMENTED), whether or not KServe's service has them."""

    def __init__(self, handlers: Mapping[str, grpc.RpcMethodHandler | None]) -> None:
        self.handlers = handlers

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        method = details.method.rsplit("/", 1)[-1]
        if method in self.handlers:
            return self.handlers[method]
        return await continuation(details)


def repository_handlers(
    repository: Repository, control: ModelControl | None
) -> dict[str, grpc.RpcMethodHandler | None]:
    """The repository extension's methods in Triton's layout, behind the token; none
    without model control."""
    if control is None:
        return dict.fromkeys(REPOSITORY_METHODS)
    triton = _triton_messages()

    def authorized(request: Any, context: Any, allowed: frozenset[str] | None) -> None:
        metadata = dict(context.invocation_metadata())
        control.authorize(metadata.get("authorization"), "'authorization: Bearer <token>' metadata")
        if allowed is not None and (
            set(request.parameters) - allowed or unknown_fields.UnknownFieldSet(request)
        ):
            raise bad_request(REPOSITORY_PARAMETERS_MESSAGE)

    async def index(request: Any, context: Any) -> Any:
        authorized(request, context, None)
        response = triton["RepositoryIndexResponse"]()
        for entry in repository.index(request.ready):
            response.models.add(**entry)
        return response

    async def load(request: Any, context: Any) -> Any:
        authorized(request, context, frozenset())
        repository.load(request.model_name)
        log.warning("model %s loaded through the repository extension", request.model_name)
        return triton["RepositoryModelLoadResponse"]()

    async def unload(request: Any, context: Any) -> Any:
        authorized(request, context, UNLOAD_PARAMETERS)
        repository.unload(request.model_name)
        log.warning("model %s unloaded through the repository extension", request.model_name)
        return triton["RepositoryModelUnloadResponse"]()

    return {
        name: grpc.unary_unary_rpc_method_handler(
            method,
            request_deserializer=triton[f"{name}Request"].FromString,
            response_serializer=lambda m: m.SerializeToString(),
        )
        for name, method in zip(REPOSITORY_METHODS, (index, load, unload), strict=True)
    }


class GRPCServer(grpc_server.GRPCServer):  # type: ignore[misc]
    """KServe's gRPC server with this project's servicer, interceptors and address."""

    def __init__(self, server: ModelServer, admission: Admission) -> None:
        super().__init__(
            server.grpc_port,
            server.dataplane,
            server.model_repository_extension,
            kwargs={},
            grace_period=server.grace_period,
        )
        self.host = server.grpc_host
        self.admission = admission

    def bind(self) -> None:
        """Create the server and bind it (plaintext: on a cluster it is reached through
        the TLS proxy only); raises `OSError` when the port cannot be bound. KServe's
        ``GRPCServer.start`` (kserve/protocol/grpc/server.py) binds ``[::]``, hard-coded."""
        dataplane = self._data_plane
        self._server = aio.server(
            interceptors=(
                StatusInterceptor(),
                MethodOverrides(repository_handlers(dataplane.repository, dataplane.control)),
            ),
            options=[
                ("grpc.max_receive_message_length", self.admission.limits.max_body_bytes),
                ("grpc.max_send_message_length", 64 << 20),
                ("grpc.so_reuseport", 0),
            ],
        )
        servicer = Servicer(dataplane, self._model_repository_extension, self.admission)
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, self._server)
        # A plain socket first: gRPC would log its own error line before raising.
        bind_socket(self.host, self._port).close()
        address = f"[{self.host}]:{self._port}" if ":" in self.host else f"{self.host}:{self._port}"
        try:
            bound = self._server.add_insecure_port(address)
        except RuntimeError as err:
            raise OSError(98, f"cannot bind gRPC to {address} ({err})") from err
        if bound == 0:
            raise OSError(98, f"cannot bind gRPC to {address}")

    async def start(self, max_workers: int) -> None:
        await self._server.start()
        await self._server.wait_for_termination()
