"""What a rule is, and the views of resources that rule functions read.

A rule is one function plus its metadata (`Rule`). Resource rules take a
`ResourceView` (one resource, as `pulumi_policy.ResourceValidationArgs` carries it)
and yield violation messages; stack rules take a `StackView` (every resource, as
`pulumi_policy.StackValidationArgs` carries them) and yield (URN, message) pairs.
`policies.pack` adapts both to the engine's callback signatures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pulumi_policy import (
    EnforcementLevel,
    PolicyProviderResource,
    PolicyResource,
    ResourceValidationArgs,
    Severity,
)

from policies.settings import Settings
from policies.values import plain


def urn_name(urn: str) -> str:
    """The resource name at the end of a URN."""
    return urn.rsplit("::", 1)[-1]


def provider_urn(reference: str | None) -> str | None:
    """The provider URN of a ``<provider urn>::<id>`` reference."""
    if not reference:
        return None
    urn, sep, _id = reference.rpartition("::")
    # A bare URN has "::" inside it too; only strip a trailing id that is not part of one.
    return urn if sep and urn.startswith("urn:pulumi:") and urn.count("::") >= 3 else reference


@dataclass(frozen=True)
class ProviderView:
    """The provider a resource is registered through (inputs plain, sentinels kept)."""

    type: str
    urn: str
    name: str
    props: dict[str, Any]


@dataclass(frozen=True)
class ResourceView:
    """One resource as a rule reads it.

    Args:
        type: the Pulumi type token, e.g. ``aws:s3/bucket:Bucket``.
        urn: the resource's URN.
        name: the resource's (Pulumi) name.
        props: its inputs (resource rules) or planned state (stack rules) as plain data.
        provider: its provider, or None for component resources.
        parent: the URN of its parent.
        property_dependencies: per top-level property, the URNs it was computed from
            (filled for stack rules, as the engine does).
    """

    type: str
    urn: str
    name: str
    props: dict[str, Any]
    provider: ProviderView | None = None
    parent: str | None = None
    dependencies: tuple[str, ...] = ()
    property_dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def package(self) -> str:
        """The provider package of the type (``aws``, ``kubernetes``, ``pulumi``)."""
        return self.type.split(":", 1)[0]

    @classmethod
    def from_args(cls, args: ResourceValidationArgs) -> ResourceView:
        return cls(
            args.resource_type,
            args.urn,
            args.name,
            plain(args.props),
            _provider_view(args.provider),
            args.opts.parent if args.opts is not None else None,
        )

    @classmethod
    def from_policy_resource(cls, resource: PolicyResource) -> ResourceView:
        return cls(
            resource.resource_type,
            resource.urn,
            resource.name,
            plain(resource.props),
            _provider_view(resource.provider),
            resource.parent.urn if resource.parent is not None else resource.opts.parent,
            tuple(dep.urn for dep in resource.dependencies),
            {
                key: tuple(dep.urn for dep in deps)
                for key, deps in resource.property_dependencies.items()
            },
        )


@dataclass(frozen=True)
class StackView:
    """Every resource of the stack, with look-ups the stack rules share."""

    resources: tuple[ResourceView, ...]

    def by_urn(self) -> dict[str, ResourceView]:
        return {resource.urn: resource for resource in self.resources}

    def of_type(self, *types: str) -> Iterator[ResourceView]:
        return (resource for resource in self.resources if resource.type in types)

    def dependencies_of(self, resource: ResourceView, prop: str) -> list[ResourceView]:
        """The resources a top-level property of ``resource`` was computed from."""
        index = self.by_urn()
        return [index[urn] for urn in resource.property_dependencies.get(prop, ()) if urn in index]


ResourceCheck = Callable[[ResourceView, Settings], Iterable[str]]
StackCheck = Callable[[StackView, Settings], Iterable[tuple[str | None, str]]]
Applies = Callable[[ResourceView], bool]


@dataclass(frozen=True)
class Rule:
    """One policy: its function and what a reviewer needs to know about it.

    Args:
        id: stable identifier (``uae-*`` residency, ``aws-*`` AWS, ``k8s-*`` Kubernetes).
        description: one sentence stating what is required.
        severity: low, medium, high or critical.
        enforcement: mandatory (blocks ``pulumi up``) unless there is a reason.
        remediation: the steps that fix a violation.
        controls: the regulatory and benchmark controls it implements.
        kind: ``resource`` (one resource at a time) or ``stack`` (the whole stack).
        applies_to: which resources the rule judges (a stack rule: its subjects), used
            for the pass/fail counts of the report.
        config_keys: the pack-config keys it reads besides ``exemptions``.
        annotation_exceptions: whether a Kubernetes object may opt out through the
            ``policy-exception.gpuplatform.ae/<rule-id>`` annotation.
    """

    id: str
    description: str
    severity: Severity
    enforcement: EnforcementLevel
    remediation: str
    controls: tuple[str, ...]
    kind: Literal["resource", "stack"]
    check: ResourceCheck | StackCheck
    applies_to: Applies
    config_keys: tuple[str, ...] = ()
    annotation_exceptions: bool = False

    def check_resource(self, resource: ResourceView, settings: Settings) -> Iterable[str]:
        assert self.kind == "resource"
        check: ResourceCheck = self.check  # type: ignore[assignment]
        return check(resource, settings)

    def check_stack(self, stack: StackView, settings: Settings) -> Iterable[tuple[str | None, str]]:
        assert self.kind == "stack"
        check: StackCheck = self.check  # type: ignore[assignment]
        return check(stack, settings)


def types_in(*types: str) -> Applies:
    """An `applies_to` for a fixed set of type tokens."""
    wanted = frozenset(types)
    return lambda resource: resource.type in wanted


def resource_rule(
    *,
    id: str,
    description: str,
    severity: Severity,
    remediation: str,
    controls: Sequence[str],
    applies_to: Applies,
    config_keys: Sequence[str] = (),
    enforcement: EnforcementLevel = EnforcementLevel.MANDATORY,
    annotation_exceptions: bool = False,
) -> Callable[[ResourceCheck], Rule]:
    """Turn a function ``(ResourceView, Settings) -> messages`` into a `Rule`."""

    def wrap(check: ResourceCheck) -> Rule:
        return Rule(
            id,
            description,
            severity,
            enforcement,
            remediation,
            tuple(controls),
            "resource",
            check,
            applies_to,
            tuple(config_keys),
            annotation_exceptions,
        )

    return wrap


def stack_rule(
    *,
    id: str,
    description: str,
    severity: Severity,
    remediation: str,
    controls: Sequence[str],
    applies_to: Applies,
    config_keys: Sequence[str] = (),
    enforcement: EnforcementLevel = EnforcementLevel.MANDATORY,
) -> Callable[[StackCheck], Rule]:
    """Turn a function ``(StackView, Settings) -> (urn, message) pairs`` into a `Rule`."""

    def wrap(check: StackCheck) -> Rule:
        return Rule(
            id,
            description,
            severity,
            enforcement,
            remediation,
            tuple(controls),
            "stack",
            check,
            applies_to,
            tuple(config_keys),
        )

    return wrap


def _provider_view(provider: PolicyProviderResource | None) -> ProviderView | None:
    """The provider as the rules see it (``None`` for resources without one)."""
    if provider is None:
        return None
    return ProviderView(provider.resource_type, provider.urn, provider.name, plain(provider.props))
