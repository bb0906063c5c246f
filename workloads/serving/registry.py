"""The models one server serves, as both protocols see them (`ServedModels`).

Every model the server was started with stays known for its lifetime: unloading one
(only through the repository extension, when it is enabled) marks it unavailable and
frees it, and loading it opens it again. KServe's own repository forgets an unloaded
model and its data plane reloads a model that is not ready on the next request, so
neither is used here: readiness is what the endpoints say it is.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

from kserve.protocol.infer_type import InferRequest, InferResponse

from workloads.serving.protocol import (
    check_request,
    check_version,
    metadata_tensors,
    not_found,
    unavailable,
    with_requested_outputs,
)

log = logging.getLogger(__name__)


def version_of(model: Any) -> str:
    """A model's version label (``version`` attribute; empty when it has none)."""
    return str(getattr(model, "version", "") or "")


class ServedModels:
    """The loaded KServe models of one server, by name.

    Args:
        models: loaded KServe ``Model`` objects, each with a unique ``name`` and a
            ``version`` label.
    """

    def __init__(self, models: Sequence[Any]) -> None:
        self.models: dict[str, Any] = {}
        for model in models:
            if model.name in self.models:
                raise ValueError(f"two models are named {model.name!r}")
            self.models[model.name] = model

    def get(self, name: str, version: str | None = None) -> Any:
        """The model ``name`` (at ``version``, if given); `ProtocolError` 404 otherwise."""
        model = self.models.get(name)
        if model is None:
            known = ", ".join(sorted(self.models))
            raise not_found(f"unknown model {name!r}; this server serves {known}")
        check_version(name, version_of(model), version)
        return model

    def ready_model(self, name: str, version: str | None = None) -> Any:
        """The model, if it is loaded; `ProtocolError` 404 or 503 otherwise."""
        model = self.get(name, version)
        if not model.ready:
            raise unavailable(f"model {name!r} is not loaded")
        return model

    def is_ready(self, name: str, version: str | None = None) -> bool:
        return bool(self.get(name, version).ready)

    def all_ready(self) -> bool:
        """The server is ready when every model it was started with is loaded."""
        return all(model.ready for model in self.models.values())

    def unready(self) -> list[str]:
        return sorted(name for name, model in self.models.items() if not model.ready)

    async def metadata(self, name: str, version: str | None = None) -> dict[str, Any]:
        model = self.get(name, version)
        inputs = model.get_input_types()
        outputs = model.get_output_types()
        if inspect.isawaitable(inputs):
            inputs = await inputs
        if inspect.isawaitable(outputs):
            outputs = await outputs
        served = version_of(model)
        return {
            "name": name,
            "versions": [served] if served else [],
            "platform": "",
            "inputs": metadata_tensors(inputs),
            "outputs": metadata_tensors(outputs),
        }

    async def infer(
        self,
        name: str,
        version: str | None,
        request: InferRequest,
        headers: dict[str, str],
        *,
        grpc_answer: bool,
    ) -> InferResponse:
        """The model's answer to ``request``, encoded as the request asked."""
        model = self.ready_model(name, version)
        check_request(request)
        request.model_name = name
        response, _ = await model(request, headers=headers)
        if not isinstance(response, InferResponse):
            raise TypeError(f"model {name!r} answered with {type(response).__name__}")
        return with_requested_outputs(request, response, grpc_answer=grpc_answer)

    def index(self) -> list[dict[str, str]]:
        """The repository index: every model, its version and state."""
        return [
            {
                "name": name,
                "version": version_of(model),
                "state": "READY" if model.ready else "UNAVAILABLE",
                "reason": "" if model.ready else "unloaded",
            }
            for name, model in sorted(self.models.items())
        ]

    def load(self, name: str) -> None:
        model = self.get(name)
        if not model.ready:
            model.load()
            log.warning("model %s loaded through the repository extension", name)

    def unload(self, name: str) -> None:
        model = self.get(name)
        if model.ready:
            unload = getattr(model, "unload", None)
            if callable(unload):
                unload()
            model.ready = False
            log.warning("model %s unloaded through the repository extension", name)
