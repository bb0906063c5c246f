"""A small recording mock runtime for the Kubernetes layer's component tests.

`run` executes a program under Pulumi's mocks and returns every registration with its
type, name, parent URN, provider reference, protect flag and inputs, so tests can check
what the engine would receive (explicit providers, parents, manifests) without a CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime.sync_await import _sync_await


@dataclass(frozen=True)
class Registered:
    """One resource as the engine received it."""

    urn: str
    type: str
    name: str
    custom: bool
    parent: str
    provider: str
    protect: bool
    inputs: dict[str, Any]


def _wire(value: Any) -> Any:
    """Numbers travel as doubles: show whole ones as integers, as the engine does."""
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wire(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class _Mocks(pulumi_mocks.Mocks):
    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict[str, Any], None]:
        raise NotImplementedError(f"unexpected data source call {args.token}")


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi_mocks.Mocks) -> None:
        super().__init__(mocks)
        self.records: list[Registered] = []

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        self.records.append(
            Registered(
                urn=response.urn,
                type=request.type,
                name=request.name,
                custom=bool(request.custom),
                parent=request.parent,
                provider=request.provider,
                protect=bool(request.protect),
                inputs=_wire(rpc.deserialize_properties(request.object)),
            )
        )
        return response


def run(program: Callable[[], None]) -> list[Registered]:
    """Run ``program`` under fresh mocks; return every registration in order."""
    mocks = _Mocks()
    monitor = _RecordingMonitor(mocks)
    pulumi.runtime.settings.ROOT.set(None)
    pulumi_mocks.set_mocks(
        mocks, project="uae-gpu-platform", stack="test", preview=False, monitor=monitor
    )
    _sync_await(pulumi.runtime.stack.run_pulumi_func(program))
    return monitor.records
