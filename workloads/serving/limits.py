"""Admission control of inference requests, HTTP and gRPC alike (`Admission.run`).

KServe's server queues every request it accepts without bound, so an overloaded server
answers later and later until clients time out. Here each inference request:

- is refused with 429 (gRPC RESOURCE_EXHAUSTED) when ``max_in_flight`` requests are
  already being served, so the queue in front of the model stays bounded and clients
  back off;
- is ended with 504 (DEADLINE_EXCEEDED) when still unanswered after ``timeout_s``;
- is refused with 413 when its body is over ``max_body_bytes`` (`read_body`; gRPC's own
  message limit says RESOURCE_EXHAUSTED);
- is counted with its status code (a gRPC answer under the HTTP status it corresponds
  to) and latency per model and version, and every refusal per reason, in the
  predictor's metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TypeVar

import grpc  # type: ignore[import-untyped]  # no stubs; covered by tests/serving

from workloads.serving import metrics
from workloads.serving.protocol import ProtocolError, error_status

T = TypeVar("T")


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


@dataclass
class Admission:
    """The bounds of one server's inference requests (module docstring).

    Args:
        limits: the bounds.
        versions: model name -> version label (the metrics count these models only).
    """

    limits: Limits
    versions: dict[str, str]
    in_flight: int = field(default=0, init=False)

    async def run(self, model: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``'s answer, within the bounds; counted."""
        version = self.versions.get(model, "")
        started = time.perf_counter()
        code = HTTPStatus.INTERNAL_SERVER_ERROR
        try:
            if self.in_flight >= self.limits.max_in_flight:
                raise ProtocolError(
                    HTTPStatus.TOO_MANY_REQUESTS,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"the server is serving {self.in_flight} requests; retry after a moment",
                    reason="overload",
                )
            self.in_flight += 1
            try:
                async with asyncio.timeout(self.limits.timeout_s):  # no task per request
                    answer = await call()
            except TimeoutError:
                raise ProtocolError(
                    HTTPStatus.GATEWAY_TIMEOUT,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no answer within {self.limits.timeout_s:g} s; retry, or send a smaller "
                    "request (fewer prompts or max_new_tokens)",
                    reason="timeout",
                ) from None
            finally:
                self.in_flight -= 1
            code = HTTPStatus.OK
            return answer
        except Exception as err:
            status = error_status(err)
            if status is not None:
                code = status.status
                if status.reason and model in self.versions:
                    metrics.REJECTED.labels(model, version, status.reason).inc()
            raise
        finally:
            if model in self.versions:
                metrics.REQUESTS.labels(model, version, str(int(code))).inc()
                metrics.DURATION.labels(model, version).observe(time.perf_counter() - started)

    async def read_body(self, declared: str | None, chunks: AsyncIterator[bytes]) -> bytes:
        """An HTTP body of at most ``max_body_bytes``, announced (``declared``, the
        Content-Length) or streamed; `ProtocolError` 413 otherwise."""
        limit = self.limits.max_body_bytes
        body, size = [], 0
        if not (declared and declared.isdigit() and int(declared) > limit):
            async for chunk in chunks:
                body.append(chunk)
                size += len(chunk)
                if size > limit:
                    break
            else:
                return b"".join(body)
        raise ProtocolError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"the request body is over {limit} bytes; send fewer or shorter prompts per request",
            reason="body_too_large",
        )
