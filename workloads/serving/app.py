"""The V2 (Open Inference Protocol) HTTP server around any KServe models.

KServe's `ModelServer.start` binds every interface and parses the process's own command
line; `serve_models` reuses KServe's data plane, endpoints and error handlers but builds
the server itself, so it binds where it is told (127.0.0.1 by default; 0.0.0.0 in a pod)
and has admission control in front (`workloads.serving.limits`). gRPC is not started:
the REST endpoints are the ones the InferenceService routes to.

Used by the language-model predictor (``python -m workloads.serving``) and the tabular
predictor (``python -m workloads.features serve``). It imports neither torch nor the
language-model code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import uvicorn
from kserve.model_repository import ModelRepository
from kserve.protocol.dataplane import DataPlane
from kserve.protocol.model_repository_extension import ModelRepositoryExtension
from kserve.protocol.rest.server import RESTServer

from workloads.serving.limits import AdmissionControl, ASGIApp, Limits, Receive, Scope, Send


class JsonWithoutHeader:
    """The Open Inference Protocol's rule for a body without the binary extension's
    ``Inference-Header-Content-Length`` header: it is all JSON. KServe's data plane reads
    any body not labelled ``content-type: application/json`` as binary and refuses it for
    want of that header, so clients that follow the protocol (tritonclient.http sends
    JSON bodies with no content type) get 400. This labels such bodies as JSON; requests
    with the binary header, or any content type already, pass unchanged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST":
            names = {name.lower() for name, _ in scope.get("headers", [])}
            if b"content-type" not in names and b"inference-header-content-length" not in names:
                scope = dict(scope)
                scope["headers"] = [*scope["headers"], (b"content-type", b"application/json")]
        await self.app(scope, receive, send)


async def serve_models(models: Sequence[Any], host: str, port: int, limits: Limits) -> None:
    """Serve loaded KServe ``models`` (each with a ``version`` label for the metrics) on
    ``host:port`` until the process is interrupted."""
    repository = ModelRepository()
    for model in models:
        repository.update(model)
    dataplane = DataPlane(model_registry=repository)
    rest = RESTServer(
        "kserve.model_server:app",
        dataplane,
        ModelRepositoryExtension(model_registry=repository),
        port,
    )
    rest.create_application()  # KServe's endpoints and error handlers on its app
    from kserve.model_server import app as kserve_app  # noqa: PLC0415  (built just above)

    app = JsonWithoutHeader(
        AdmissionControl(kserve_app, limits, {m.name: m.version for m in models})
    )
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5
    )
    await uvicorn.Server(config).serve()
