"""The one shape of the platform's own Pulumi components.

A component takes its name, one frozen args object and the usual resource options;
its type is ``gpuplatform:<room>:<class name>`` (``gpuplatform:aws:DataStore``), so the
class name and the type in the state cannot drift apart; `declare` creates its
resources, each a child of the component, and returns what the component registers as
its outputs. The services of the Kubernetes platform take what they wait for too
(`modules.k8s.platform.service`); the few components that take more keep a constructor
of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

import pulumi

ArgsT = TypeVar("ArgsT")
#: What a component registers as its outputs.
Outputs = Mapping[str, Any]


class Component(pulumi.ComponentResource, Generic[ArgsT]):
    """A platform component built from one args object (see the module)."""

    #: The room the component belongs to: ``aws`` or ``k8s``.
    room: ClassVar[str]

    def __init__(self, name: str, args: ArgsT, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"gpuplatform:{self.room}:{type(self).__name__}", name, None, opts)
        self.register_outputs(self.declare(name, args))

    def declare(self, name: str, args: ArgsT) -> Outputs:
        """Create the component's resources (children of ``self``); its outputs."""
        raise NotImplementedError


class AwsComponent(Component[ArgsT]):
    """A component of the AWS room (``modules/aws``)."""

    room = "aws"


class KubernetesComponent(Component[ArgsT]):
    """A component of the Kubernetes layer (``modules/k8s``)."""

    room = "k8s"
