"""What a rule is, and the views of resources that rule functions read.

A rule is one function plus its metadata (`Rule`), which the rule catalogue holds
(policies/catalogue.yaml, read by `policies.catalogue`). Resource rules take a
`ResourceView` (one resource, as `pulumi_policy.ResourceValidationArgs` carries it)
and yield violation messages; stack rules take a `StackView` (every resource, as
`pulumi_policy.StackValidationArgs` carries them) and yield (URN, message) pairs.
`policies.pack` adapts both to the engine's callback signatures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, NamedTuple

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

    @cached_property
    def derived(self) -> dict[str, Any]:
        """What helpers derived from the view once (`policies.k8s.pod_specs`), by name:
        many rules ask the same question of one view. Not part of the view's value."""
        return {}

    @property
    def package(self) -> str:
        """The provider package of the type (``aws``, ``kubernetes``, ``pulumi``)."""
        return self.type.split(":", 1)[0]

    @classmethod
    def from_args(
        cls, args: ResourceValidationArgs, plain_props: dict[str, Any] | None = None
    ) -> ResourceView:
        """The view of one resource policy call's arguments (built once per arguments
        object: the offline review hands the same arguments to every rule).

        Args:
            args: what the engine hands a resource policy.
            plain_props: ``plain(args.props)`` when the caller already holds it (the
                offline review holds the plan's decoded inputs, which `plain` returns
                unchanged), so the inputs are not unwrapped and copied again.
        """
        view = vars(args).get(_VIEW)
        if view is None:
            view = cls(
                args.resource_type,
                args.urn,
                args.name,
                plain(args.props) if plain_props is None else plain_props,
                _provider_view(args.provider),
                args.opts.parent if args.opts is not None else None,
            )
            vars(args)[_VIEW] = view
        return view

    @classmethod
    def from_policy_resource(
        cls,
        resource: PolicyResource,
        plain_props: dict[str, Any] | None = None,
        links: Links | None = None,
    ) -> ResourceView:
        """The view of a stack policy's resource (built once per resource object: the
        offline review hands the same objects to every stack rule); ``plain_props`` as
        for `from_args`, ``links`` the URNs of the resource's parent, dependencies and
        property dependencies where the caller holds them."""
        view = vars(resource).get(_VIEW)
        if view is None:
            view = cls._of_policy_resource(resource, plain_props, links)
            vars(resource)[_VIEW] = view
        return view

    @classmethod
    def _of_policy_resource(
        cls, resource: PolicyResource, plain_props: dict[str, Any] | None, links: Links | None
    ) -> ResourceView:
        if links is None:
            links = Links(
                resource.parent.urn if resource.parent is not None else resource.opts.parent,
                tuple(dep.urn for dep in resource.dependencies),
                {
                    key: tuple(dep.urn for dep in deps)
                    for key, deps in resource.property_dependencies.items()
                },
            )
        return cls(
            resource.resource_type,
            resource.urn,
            resource.name,
            plain(resource.props) if plain_props is None else plain_props,
            _provider_view(resource.provider),
            *links,
        )


class Links(NamedTuple):
    """A resource's place in the stack's graph, as URNs."""

    parent: str | None
    dependencies: tuple[str, ...]
    property_dependencies: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class StackView:
    """Every resource of the stack, with look-ups the stack rules share."""

    resources: tuple[ResourceView, ...]

    @classmethod
    def of(cls, resources: Sequence[PolicyResource]) -> StackView:
        """The view of a stack policy's resources, built once per list: the offline
        review hands every stack rule the same list, so they share the view and its
        indexes (the engine sends a new list each call, which gets a new view)."""
        global _LAST_STACK  # noqa: PLW0603  (one entry: the stack being reviewed)
        last = _LAST_STACK
        if last is not None and last[0] is resources and len(resources) == len(last[1].resources):
            return last[1]
        view = cls(tuple(ResourceView.from_policy_resource(r) for r in resources))
        _LAST_STACK = (resources, view)
        return view

    # The indexes are built once per stack: rules and the review's evidence call these
    # look-ups once per resource, and a scan each time made a review quadratic.
    @cached_property
    def _by_urn(self) -> dict[str, ResourceView]:
        return {resource.urn: resource for resource in self.resources}

    @cached_property
    def _by_type(self) -> dict[str, list[ResourceView]]:
        index: dict[str, list[ResourceView]] = {}
        for resource in self.resources:
            index.setdefault(resource.type, []).append(resource)
        return index

    def by_urn(self) -> dict[str, ResourceView]:
        """Every resource by URN (the same dict on every call: do not change it)."""
        return self._by_urn

    def of_type(self, *types: str) -> Iterator[ResourceView]:
        """The resources of the given types, in stack order."""
        if len(types) == 1:
            return iter(self._by_type.get(types[0], ()))
        chosen = [view for kind in dict.fromkeys(types) for view in self._by_type.get(kind, ())]
        chosen.sort(key=lambda view: self._position[view.urn])
        return iter(chosen)

    @cached_property
    def _referrers(self) -> dict[tuple[tuple[str, ...], str], Referrers]:
        return {}

    def referrers(self, types: Sequence[str], prop: str) -> Referrers:
        """An index of the resources of ``types`` by what their property ``prop`` names
        (built once per stack and property): rules that pair resources (a bucket and its
        encryption configuration, a role and its policies) look partners up in it instead
        of scanning the stack once per resource."""
        key = (tuple(types), prop)
        index = self._referrers.get(key)
        if index is None:
            index = Referrers.build(
                (view for kind in key[0] for view in self.of_type(kind)), prop, self._position
            )
            self._referrers[key] = index
        return index

    @cached_property
    def _position(self) -> dict[str, int]:
        return {resource.urn: number for number, resource in enumerate(self.resources)}

    def dependencies_of(self, resource: ResourceView, prop: str) -> list[ResourceView]:
        """The resources a top-level property of ``resource`` was computed from."""
        index = self.by_urn()
        return [index[urn] for urn in resource.property_dependencies.get(prop, ()) if urn in index]


@dataclass(frozen=True)
class Referrers:
    """Resources indexed by what one of their properties names.

    Args:
        prop: the property.
        by_dependency: URN -> the resources whose ``prop`` was computed from it.
        by_value: string value -> the resources whose ``prop`` is that string.
        position: each resource's place in the stack, to keep stack order.
    """

    prop: str
    by_dependency: Mapping[str, tuple[ResourceView, ...]]
    by_value: Mapping[str, tuple[ResourceView, ...]]
    position: Mapping[str, int]

    @classmethod
    def build(
        cls, views: Iterable[ResourceView], prop: str, position: Mapping[str, int]
    ) -> Referrers:
        by_dependency: dict[str, list[ResourceView]] = {}
        by_value: dict[str, list[ResourceView]] = {}
        for view in views:
            for urn in dict.fromkeys(view.property_dependencies.get(prop, ())):
                by_dependency.setdefault(urn, []).append(view)
            value = view.props.get(prop)
            if isinstance(value, str):
                by_value.setdefault(value, []).append(view)
        return cls(
            prop,
            {k: tuple(v) for k, v in by_dependency.items()},
            {k: tuple(v) for k, v in by_value.items()},
            position,
        )

    def naming(self, urn: str, values: Iterable[str] = ()) -> list[ResourceView]:
        """The resources whose property depends on ``urn`` or equals one of ``values``,
        in stack order, each once."""
        found = {view.urn: view for view in self.by_dependency.get(urn, ())}
        for value in values:
            for view in self.by_value.get(value, ()):
                found.setdefault(view.urn, view)
        return sorted(found.values(), key=lambda view: self.position.get(view.urn, 0))


ResourceCheck = Callable[[ResourceView, Settings], Iterable[str]]
StackCheck = Callable[[StackView, Settings], Iterable[tuple[str | None, str]]]
#: What a stack rule's function yields: (the URN of the resource at fault, or None for
#: the whole stack, the message).
StackFindings = Iterator[tuple[str | None, str]]
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


@dataclass(frozen=True)
class TypesIn:
    """An `applies_to` for a fixed set of type tokens (the review looks its rules up by
    a resource's type instead of asking each one)."""

    types: frozenset[str]

    def __call__(self, resource: ResourceView) -> bool:
        return resource.type in self.types


def _provider_view(provider: PolicyProviderResource | None) -> ProviderView | None:
    """The provider as the rules see it (``None`` for resources without one); built
    once per provider object, which the offline review shares between its resources."""
    if provider is None:
        return None
    view = vars(provider).get(_VIEW)
    if view is None:
        view = ProviderView(
            provider.resource_type, provider.urn, provider.name, plain(provider.props)
        )
        vars(provider)[_VIEW] = view
    return view


# Each view is kept on the engine's object it was made from (under this attribute), as
# long as the object lives. The engine sends new objects for every call, so this only
# saves work where one caller hands the same objects to many rules (the offline
# review); the views are never changed.
_VIEW = "_policies_view"
# The last stack's resources and their view (`StackView.of`).
_LAST_STACK: tuple[Sequence[PolicyResource], StackView] | None = None
