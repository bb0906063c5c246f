"""The models and the data plane of the V2 server, as both protocols see them: KServe's
model repository and data plane, truthful about what is loaded, ready and versioned
(`workloads.serving.app` serves them over HTTP, `workloads.serving.grpc_service` over
gRPC)."""

from __future__ import annotations

import logging
from typing import Any

from kserve.model_repository import ModelRepository
from kserve.protocol import dataplane
from kserve.protocol.infer_type import InferRequest, InferResponse

from workloads.serving.protocol import (
    ModelControl,
    check_request,
    check_version,
    extensions,
    not_found,
    unavailable,
    with_requested_outputs,
)

log = logging.getLogger("workloads.serving")


def version_of(model: Any) -> str:
    """A model's version label (``version`` attribute; empty when it has none)."""
    return str(getattr(model, "version", "") or "")


class Repository(ModelRepository):  # type: ignore[misc]  # kserve ships no types
    """KServe's model repository, keeping every model the server was started with:
    KServe's ``unload`` forgets the model and its ``load`` does nothing
    (kserve/model_repository.py), so an unloaded model could never come back."""

    def model(self, name: str, version: str | None = None, *, ready: bool = False) -> Any:
        """The model ``name`` (at ``version``; loaded, when ``ready``), else a 404/503."""
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
            log.warning("model %s loaded", name)
        return bool(model.ready)

    def unload(self, name: str) -> None:
        model = self.model(name)
        getattr(model, "unload", model.stop)()
        model.ready = False
        log.warning("model %s unloaded", name)

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Every model, its version and its state (Triton's names)."""
        return [
            {"name": name, "version": version_of(model),
             "state": "READY" if model.ready else "UNAVAILABLE",
             "reason": "" if model.ready else "unloaded"}
            for name, model in sorted(self.get_models().items())
            if model.ready or not ready_only
        ]  # fmt: skip


class DataPlane(dataplane.DataPlane):  # type: ignore[misc]
    """KServe's data plane, truthful about extensions, readiness and versions."""

    def __init__(self, repository: Repository, control: ModelControl | None) -> None:
        super().__init__(model_registry=repository)
        self.repository = repository
        self.control = control

    def metadata(self) -> dict[str, Any]:
        # kserve/protocol/dataplane.py DataPlane.metadata advertises the repository
        # extension whether or not it is served.
        return {**super().metadata(), "extensions": extensions(self.control)}

    async def ready(self) -> bool:
        # DataPlane.ready (kserve/protocol/dataplane.py) is always true for a predictor.
        return all(model.ready for model in self.repository.get_models().values())

    async def get_model(self, name: str) -> Any:
        # DataPlane.get_model (kserve/protocol/dataplane.py) loads a model that is not
        # ready, undoing an unload.
        return self.repository.model(name, ready=True)

    async def model_metadata(self, model_name: str, version: str | None = None) -> dict[str, Any]:
        # DataPlane.model_metadata (kserve/protocol/dataplane.py) has no versions.
        served = version_of(self.repository.model(model_name, version))
        return {**await super().model_metadata(model_name), "versions": [served] if served else []}

    async def model_config(self, model_name: str, version: str | None = None) -> dict[str, Any]:
        """Triton's model configuration (what tritonclient's ``get_model_config`` reads)."""
        meta = await self.model_metadata(model_name, version)
        config: dict[str, Any] = {"name": model_name, "platform": "", "backend": "kserve",
                                  "max_batch_size": 0}  # fmt: skip
        for kind in ("input", "output"):
            config[kind] = [
                {"name": t["name"], "dims": list(t["shape"]),
                 "data_type": "TYPE_" + ("STRING" if t["datatype"] == "BYTES" else t["datatype"])}
                for t in meta[f"{kind}s"]
            ]  # fmt: skip
        return config

    async def answer(
        self, name: str, request: InferRequest, headers: dict[str, str], *, grpc_answer: bool
    ) -> InferResponse:
        """The model's answer to a request the protocol allows, as the request asked."""
        check_request(request)
        response, _ = await self.infer(name, request, headers)
        return with_requested_outputs(request, response, grpc_answer=grpc_answer)
