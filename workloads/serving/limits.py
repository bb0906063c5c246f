"""Admission control in front of the V2 inference endpoints: an ASGI middleware around
KServe's FastAPI application, and `AdmissionControl.grpc` around its gRPC ModelInfer.

KServe's server queues every request it accepts without bound, so an overloaded server
answers later and later until clients time out. For ``/v2/models/<name>/infer`` (and
the gRPC ModelInfer, which shares the in-flight count; gRPC's own message size limit
stands in for the body limit):

- refuses a body over ``max_body_bytes`` with 413 (announced or streamed);
- sheds load with 429 when ``max_in_flight`` requests are already being served, so
  the queue in front of the model stays bounded and the clients back off;
- ends a request still unanswered after ``timeout_s`` with 504;
- counts every answer (status code) and its latency per model and version, and every
  refusal per reason, in the predictor's metrics.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, TypeVar

import grpc  # type: ignore[import-untyped]  # no stubs; covered by tests/serving

from workloads.serving import metrics
from workloads.serving.protocol import ProtocolError, error_status

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
T = TypeVar("T")

INFER_PATH = re.compile(r"^/v2/models/(?P<model>[^/]+)(/versions/[^/]+)?/infer$")


@dataclass(frozen=True)
class Limits:
    """Bounds of one server.

    Args:
        max_body_bytes: largest request body (default 1 MiB).
        max_in_flight: requests served at once before new ones get 429.
        timeout_s: longest a request is served before it gets 504.
    """

    max_body_bytes: int = 1 << 20
    max_in_flight: int = 64
    timeout_s: float = 30.0


class _BodyTooLargeError(Exception):
    pass


class AdmissionControl:
    """The middleware (see the module docstring).

    Args:
        app: the KServe FastAPI application.
        limits: the bounds.
        versions: model name -> version label, for the metrics.
    """

    def __init__(self, app: ASGIApp, limits: Limits, versions: dict[str, str]) -> None:
        self.app = app
        self.limits = limits
        self.versions = versions
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = INFER_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        model = match["model"]
        version = self.versions.get(model, "unknown")
        started = time.perf_counter()
        status: list[int] = []

        async def record(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        try:
            await self._admit(scope, receive, record, model, version)
        finally:
            code = str(status[0]) if status else "499"  # the client went away
            metrics.REQUESTS.labels(model, version, code).inc()
            metrics.DURATION.labels(model, version).observe(time.perf_counter() - started)

    async def _admit(
        self, scope: Scope, receive: Receive, send: Send, model: str, version: str
    ) -> None:
        declared = _content_length(scope)
        if declared is not None and declared > self.limits.max_body_bytes:
            await self._refuse(send, 413, "body_too_large", model, version, self._size_message())
            return
        if self.in_flight >= self.limits.max_in_flight:
            await self._refuse(
                send, 429, "overload", model, version, self._overload_message(),
                headers=[(b"retry-after", b"1")],
            )  # fmt: skip
            return
        self.in_flight += 1
        received = 0

        async def bounded_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limits.max_body_bytes:
                raise _BodyTooLargeError
            return message

        started: list[bool] = []

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.append(True)
            await send(message)

        try:
            await asyncio.wait_for(
                self.app(scope, bounded_receive, tracked_send), timeout=self.limits.timeout_s
            )
        except _BodyTooLargeError:
            if not started:
                await self._refuse(
                    send, 413, "body_too_large", model, version, self._size_message()
                )
        except TimeoutError:
            if not started:
                await self._refuse(send, 504, "timeout", model, version, self._timeout_message())
        finally:
            self.in_flight -= 1

    async def grpc(self, model: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``'s answer under the same bounds and metrics as an HTTP request
        (``code`` is the HTTP status the gRPC status corresponds to)."""
        version = self.versions.get(model, "unknown")
        started = time.perf_counter()
        code = HTTPStatus.INTERNAL_SERVER_ERROR
        try:
            if self.in_flight >= self.limits.max_in_flight:
                metrics.REJECTED.labels(model, version, "overload").inc()
                raise ProtocolError(
                    HTTPStatus.TOO_MANY_REQUESTS,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    self._overload_message(),
                )
            self.in_flight += 1
            try:
                answer = await asyncio.wait_for(call(), timeout=self.limits.timeout_s)
            except TimeoutError:
                metrics.REJECTED.labels(model, version, "timeout").inc()
                raise ProtocolError(
                    HTTPStatus.GATEWAY_TIMEOUT,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    self._timeout_message(),
                ) from None
            finally:
                self.in_flight -= 1
            code = HTTPStatus.OK
            return answer
        except Exception as err:
            status = error_status(err)
            code = code if status is None else status.status
            raise
        finally:
            if model in self.versions:
                metrics.REQUESTS.labels(model, version, str(int(code))).inc()
                metrics.DURATION.labels(model, version).observe(time.perf_counter() - started)

    def _overload_message(self) -> str:
        return f"the server is serving {self.in_flight} requests; retry after a moment"

    def _timeout_message(self) -> str:
        return (
            f"no answer within {self.limits.timeout_s:g} s; retry, or send a smaller request "
            "(fewer prompts or max_new_tokens)"
        )

    def _size_message(self) -> str:
        return (
            f"the request body is over {self.limits.max_body_bytes} bytes; send fewer or "
            "shorter prompts per request"
        )

    async def _refuse(  # noqa: PLR0917
        self,
        send: Send,
        status: int,
        reason: str,
        model: str,
        version: str,
        message: str,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        metrics.REJECTED.labels(model, version, reason).inc()
        body = json.dumps({"error": message}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *(headers or []),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
