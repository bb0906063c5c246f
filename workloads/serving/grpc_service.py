"""The gRPC side of the V2 server (`inference.GRPCInferenceService`): KServe's gRPC
server and servicer with this project's deltas, each commented where KServe 0.21 does
otherwise. ServerLive, ServerReady and ServerMetadata are KServe's, over the data plane
of `workloads.serving.app`; ModelReady, ModelMetadata and ModelInfer add versions, every
parameter, the protocol's checks and admission; errors are the protocol's codes, a
client error logged as one line; the repository methods are Triton's, behind the token,
or not served at all.
"""

from __future__ import annotations

import functools
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc  # type: ignore[import-untyped]  # no stubs; covered by tests/serving
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet
from grpc import aio
from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as pb_grpc
from kserve.protocol.grpc import server as grpc_server
from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor
from kserve.protocol.grpc.servicer import InferenceServicer
from kserve.protocol.infer_type import InferRequest
from kserve.utils.utils import to_headers

from workloads.serving.dataplane import DataPlane
from workloads.serving.limits import Admission
from workloads.serving.net import bind_socket
from workloads.serving.protocol import (
    REPOSITORY_PARAMETERS_MESSAGE,
    UNLOAD_PARAMETERS,
    bad_request,
    error_status,
)

log = logging.getLogger("workloads.serving")

REPOSITORY_METHODS = ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload")


def grpc_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A gRPC parameter map as plain values. KServe's ``InferParameter`` lacks Triton's
    ``double_param`` (4) and ``uint64_param`` (5), so tritonclient's ``temperature=0.7``
    is an unknown field that ``InferRequest.from_grpc`` (kserve/protocol/infer_type.py)
    passes on as a raw message; here it is read, and a parameter with no value refused."""
    values = {}
    for key, parameter in parameters.items():
        which = parameter.WhichOneof("parameter_choice")
        unknown = {(f.field_number, f.wire_type): f.data for f in UnknownFieldSet(parameter)}
        if which is not None:
            values[key] = getattr(parameter, which)
        elif (4, 1) in unknown:  # double_param, fixed64
            values[key] = struct.unpack("<d", struct.pack("<Q", unknown[4, 1]))[0]
        elif (5, 0) in unknown:  # uint64_param, varint
            values[key] = int(unknown[5, 0])
        else:
            raise bad_request(f"parameter {key!r} has no value of a type this server reads")
    return values


def infer_request(message: Any) -> InferRequest:
    """KServe's `InferRequest` of a ``ModelInferRequest``, every parameter kept."""
    InferenceServicer.validate_grpc_request(message)
    request = InferRequest.from_grpc(message)
    request.parameters = grpc_parameters(message.parameters)
    targets = [*request.inputs, *(request.request_outputs or [])]
    for target, source in zip(targets, [*message.inputs, *message.outputs], strict=True):
        target.parameters = grpc_parameters(source.parameters)
    return request


#: Triton's messages this server answers in (model_config.proto and grpc_service.proto as
#: tritonclient sends and reads them; of ModelConfig, ModelInput and ModelOutput only the
#: fields served), for a private descriptor pool, so that they never clash with KServe's
#: or tritonclient's in the default pool.
_DATA_TYPES = ["INVALID", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
               "INT32", "INT64", "FP16", "FP32", "FP64", "STRING", "BF16"]  # fmt: skip
_DATA_TYPE_ENUM = " ".join(
    f'value {{ name: "TYPE_{name}" number: {number} }}' for number, name in enumerate(_DATA_TYPES)
)
_MODEL_CONFIG_PROTO = (
    f'enum_type {{ name: "DataType" {_DATA_TYPE_ENUM} }}'
    + """
name: "workloads_serving_model_config.proto" package: "inference" syntax: "proto3"
message_type { name: "ModelInput"
  field { name: "name" number: 1 type: TYPE_STRING }
  field { name: "data_type" number: 2 type: TYPE_ENUM type_name: ".inference.DataType" }
  field { name: "dims" number: 4 type: TYPE_INT64 label: LABEL_REPEATED } }
message_type { name: "ModelOutput"
  field { name: "name" number: 1 type: TYPE_STRING }
  field { name: "data_type" number: 2 type: TYPE_ENUM type_name: ".inference.DataType" }
  field { name: "dims" number: 3 type: TYPE_INT64 label: LABEL_REPEATED } }
message_type { name: "ModelConfig"
  field { name: "name" number: 1 type: TYPE_STRING }
  field { name: "platform" number: 2 type: TYPE_STRING }
  field { name: "backend" number: 17 type: TYPE_STRING }
  field { name: "max_batch_size" number: 4 type: TYPE_INT32 }
  field { name: "input" number: 5 type: TYPE_MESSAGE label: LABEL_REPEATED
          type_name: ".inference.ModelInput" }
  field { name: "output" number: 6 type: TYPE_MESSAGE label: LABEL_REPEATED
          type_name: ".inference.ModelOutput" } }
"""
)
_SERVICE_PROTO = """
name: "workloads_serving_service.proto" package: "inference" syntax: "proto3"
dependency: "workloads_serving_model_config.proto"
message_type { name: "ModelConfigRequest"
  field { name: "name" number: 1 type: TYPE_STRING }
  field { name: "version" number: 2 type: TYPE_STRING } }
message_type { name: "ModelConfigResponse"
  field { name: "config" number: 1 type: TYPE_MESSAGE type_name: ".inference.ModelConfig" } }
message_type { name: "RepositoryIndexRequest"
  field { name: "repository_name" number: 1 type: TYPE_STRING }
  field { name: "ready" number: 2 type: TYPE_BOOL } }
message_type { name: "RepositoryIndexResponse"
  field { name: "models" number: 1 type: TYPE_MESSAGE label: LABEL_REPEATED
          type_name: ".inference.RepositoryIndexResponse.ModelIndex" }
  nested_type { name: "ModelIndex"
    field { name: "name" number: 1 type: TYPE_STRING }
    field { name: "version" number: 2 type: TYPE_STRING }
    field { name: "state" number: 3 type: TYPE_STRING }
    field { name: "reason" number: 4 type: TYPE_STRING } } }
message_type { name: "ModelRepositoryParameter"
  field { name: "bool_param" number: 1 type: TYPE_BOOL oneof_index: 0 }
  field { name: "int64_param" number: 2 type: TYPE_INT64 oneof_index: 0 }
  field { name: "string_param" number: 3 type: TYPE_STRING oneof_index: 0 }
  field { name: "bytes_param" number: 4 type: TYPE_BYTES oneof_index: 0 }
  oneof_decl { name: "parameter_choice" } }
""" + "".join(
    f"""
message_type {{ name: "RepositoryModel{verb}Request"
  field {{ name: "repository_name" number: 1 type: TYPE_STRING }}
  field {{ name: "model_name" number: 2 type: TYPE_STRING }}
  field {{ name: "parameters" number: 3 type: TYPE_MESSAGE label: LABEL_REPEATED
          type_name: ".inference.RepositoryModel{verb}Request.ParametersEntry" }}
  nested_type {{ name: "ParametersEntry" options {{ map_entry: true }}
    field {{ name: "key" number: 1 type: TYPE_STRING }}
    field {{ name: "value" number: 2 type: TYPE_MESSAGE
            type_name: ".inference.ModelRepositoryParameter" }} }} }}
message_type {{ name: "RepositoryModel{verb}Response" }}
"""
    for verb in ("Load", "Unload")
)


@functools.cache
def _triton_messages() -> dict[str, type[Message]]:
    """Triton's service messages (grpc_service.proto's, by name) the server answers in."""
    pool = descriptor_pool.DescriptorPool()
    for text in (_MODEL_CONFIG_PROTO, _SERVICE_PROTO):
        pool.Add(text_format.Parse(text, descriptor_pb2.FileDescriptorProto()))
    service = pool.FindFileByName("workloads_serving_service.proto")
    return {
        name: message_factory.GetMessageClass(descriptor)
        for name, descriptor in service.message_types_by_name.items()
    }


class Servicer(InferenceServicer):  # type: ignore[misc]  # kserve ships no types
    """KServe's servicer, with versions: its ModelReady and ModelMetadata ignore the
    version and drop ``versions`` (kserve/protocol/grpc/servicer.py)."""

    def __init__(self, dataplane: DataPlane, admission: Admission) -> None:
        # No repository extension: the repository methods are Triton's (triton_handlers).
        super().__init__(dataplane, None)
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
    UNIMPLEMENTED), whether or not KServe's service has them: KServe's servicer serves
    RepositoryModelLoad and RepositoryModelUnload to anyone, with ``model_name`` at
    field 1 where Triton's message has ``repository_name`` (kserve/protocol/grpc/
    grpc_predict_v2.proto), and has no RepositoryIndex."""

    def __init__(self, handlers: Mapping[str, grpc.RpcMethodHandler | None]) -> None:
        self.handlers = handlers

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        method = details.method.rsplit("/", 1)[-1]
        if method in self.handlers:
            return self.handlers[method]
        return await continuation(details)


def triton_handlers(dataplane: DataPlane) -> dict[str, grpc.RpcMethodHandler | None]:
    """The methods answered in Triton's layout (the messages tritonclient sends and
    reads): ModelConfig, which KServe's service lacks, and the repository extension's,
    behind the token, or none without model control. Load takes no parameters, unload
    only Triton's ``unload_dependents`` (there are no dependents here)."""
    repository, control, triton = dataplane.repository, dataplane.control, _triton_messages()

    def authorized(request: Any, context: Any, allowed: frozenset[str] | None) -> None:
        assert control is not None
        metadata = dict(context.invocation_metadata())
        control.authorize(metadata.get("authorization"), "'authorization: Bearer <token>' metadata")
        if allowed is not None and (set(request.parameters) - allowed or UnknownFieldSet(request)):
            raise bad_request(REPOSITORY_PARAMETERS_MESSAGE)

    async def model_config(request: Any, context: Any) -> Any:
        config = await dataplane.model_config(request.name, request.version)
        return triton["ModelConfigResponse"](config=config)

    async def index(request: Any, context: Any) -> Any:
        authorized(request, context, None)
        response = triton["RepositoryIndexResponse"]()
        for entry in repository.index(request.ready):
            response.models.add(**entry)
        return response

    async def load(request: Any, context: Any) -> Any:
        authorized(request, context, frozenset())
        repository.load(request.model_name)
        return triton["RepositoryModelLoadResponse"]()

    async def unload(request: Any, context: Any) -> Any:
        authorized(request, context, UNLOAD_PARAMETERS)
        repository.unload(request.model_name)
        return triton["RepositoryModelUnloadResponse"]()

    methods = {"ModelConfig": model_config}
    if control is not None:
        methods |= dict(zip(REPOSITORY_METHODS, (index, load, unload), strict=True))
    return {
        **dict.fromkeys(REPOSITORY_METHODS),
        **{
            name: grpc.unary_unary_rpc_method_handler(
                method,
                request_deserializer=triton[f"{name}Request"].FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )
            for name, method in methods.items()
        },
    }


class GRPCServer(grpc_server.GRPCServer):  # type: ignore[misc]
    """KServe's gRPC server with this project's servicer, interceptors and address."""

    def __init__(
        self, dataplane: DataPlane, host: str, port: int, grace_period: int, admission: Admission
    ) -> None:
        super().__init__(port, dataplane, None, kwargs={}, grace_period=grace_period)
        self.host = host
        self.admission = admission

    def bind(self) -> None:
        """Create the server and bind it (plaintext: on a cluster it is reached through
        the TLS proxy only); raises `OSError` when the port cannot be bound. KServe's
        ``GRPCServer.start`` (kserve/protocol/grpc/server.py) binds ``[::]``, hard-coded."""
        dataplane = self._data_plane
        self._server = aio.server(
            interceptors=(
                StatusInterceptor(),
                MethodOverrides(triton_handlers(dataplane)),
            ),
            options=[
                ("grpc.max_receive_message_length", self.admission.limits.max_body_bytes),
                ("grpc.max_send_message_length", 64 << 20),
                ("grpc.so_reuseport", 0),
            ],
        )
        servicer = Servicer(dataplane, self.admission)
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
