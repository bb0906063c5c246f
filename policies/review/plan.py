"""Reading a plan document (``pulumi preview --json`` shape) into the engine's arguments.

Every step that leaves a resource in the stack (create, update, same, replace ...) is
turned into exactly what the engine hands a policy pack: `ResourceValidationArgs`
(inputs behind the unknown-checking proxy, the provider with its inputs) for resource
policies, `PolicyResource` objects (with parents and property dependencies resolved)
for stack policies. Reads (``pulumi.get``-style resources) take part only in stack
policies, as in the engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO, Any

from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
)
from pulumi_policy.proxy import unknown_checking_proxy

from policies.model import Links, ResourceView, provider_urn, urn_name
from policies.review.jsonstream import NotStreamableError, members
from policies.values import SharedValues, decode_plan_value

# Steps whose resource no longer exists after the update.
GONE_OPS = frozenset(
    {"delete", "delete-replaced", "discard", "discard-replaced", "remove-pending-replace"}
)
READ_OPS = frozenset({"read", "read-replacement", "refresh", "read-discard"})


class PlanError(ValueError):
    """A plan file that cannot be reviewed; the message says what to fix."""


@dataclass(frozen=True)
class PlanResource:
    """One resource of the plan, decoded.

    Args:
        urn, type, name: identity of the resource.
        custom: False for component resources.
        op: the step's operation (create, update, same, ...).
        inputs: its inputs (secrets unwrapped, unknown sentinels kept).
        state: its planned state: outputs where the plan has them, else inputs.
        provider: the provider URN (without the ``::<id>`` suffix), if any.
        parent, dependencies, property_dependencies: the graph, as URNs.
        protect: the protect option.
        rendered_from: for an object from a Helm release's rendered manifests (not the
            program's plan), the release's URN.
    """

    urn: str
    type: str
    name: str
    custom: bool
    op: str
    inputs: dict[str, Any]
    state: dict[str, Any]
    provider: str | None
    parent: str | None
    dependencies: tuple[str, ...] = ()
    property_dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    protect: bool = False
    rendered_from: str | None = None

    @property
    def is_provider(self) -> bool:
        return self.type.startswith("pulumi:providers:")


@dataclass(frozen=True)
class Plan:
    """A decoded plan document.

    Args:
        path: the plan file.
        config: the stack config the plan carries.
        resources: its resources, with the rendered objects of Helm releases where the
            review was given them (`policies.review.rendered`).
        seen_releases: the URNs of the Helm releases whose rendered objects are included.
    """

    path: Path
    config: dict[str, Any]
    resources: tuple[PlanResource, ...]
    seen_releases: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return self.path.stem

    @cached_property
    def index(self) -> dict[str, PlanResource]:
        return {r.urn: r for r in self.resources}

    @cached_property
    def _analyzable(self) -> tuple[PlanResource, ...]:
        return tuple(r for r in self.resources if r.op not in READ_OPS)

    def analyzable(self) -> tuple[PlanResource, ...]:
        """What the engine runs resource policies on: registered, not read, resources."""
        return self._analyzable

    @cached_property
    def _providers(self) -> dict[str, PolicyProviderResource]:
        # One provider object per provider URN, shared by every resource's arguments, so
        # its inputs are wrapped and read once, not once per resource and rule.
        return {}

    @cached_property
    def _stack_resources(self) -> list[PolicyResource]:
        return _stack_resources(self)


def load_plan(path: Path) -> Plan:
    """Read and check a plan file; `PlanError` names the problem and how to fix it."""
    if path.is_dir():
        raise PlanError(
            f"{path}: is a directory, not a plan file (give the JSON file `make plan` or "
            "`pulumi preview --json` wrote)"
        )
    if not path.is_file():
        raise PlanError(f"{path}: no such file (run `make plan STACK=<stack>` to write one)")
    try:
        with path.open(encoding="utf-8") as file:
            return _streamed(file, path)
    except (NotStreamableError, UnicodeDecodeError):
        pass  # read again whole below: its error names the place
    except OSError as err:
        raise PlanError(f"{path}: cannot read it ({err.strerror or err})") from err
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise PlanError(f"{path}: cannot read it ({err.strerror or err})") from err
    except UnicodeDecodeError as err:
        raise PlanError(f"{path}: not UTF-8 text ({err.reason})") from err
    except json.JSONDecodeError as err:
        raise PlanError(
            f"{path}: not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}"
        ) from err
    return parse_plan(document, path)


def _streamed(file: IO[str], path: Path) -> Plan:
    """The plan of a file read a step at a time (`policies.review.jsonstream`): each
    step is decoded into values shared with the steps before it (`SharedValues`) and
    dropped, so the peak holds little more than the decoded plan."""
    decoder = SharedValues()
    resources: list[PlanResource] = []
    problems: list[str] = []

    def each(index: int, step: Any) -> None:
        _read_step(index, step, decoder, resources, problems)

    found = dict(members(file, "steps", each))
    # Anything parse_plan would refuse, it refuses in its own words.
    if not isinstance(found.get("steps"), int) or not found["steps"]:
        raise NotStreamableError("no steps")
    return _plan(path, found.get("config"), resources, problems)


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (for messages about a plan document)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


# Fields that name resources, read as strings everywhere downstream: (where, key).
_STRING_FIELDS = (
    ("", "urn"),
    ("", "provider"),
    ("newState.", "urn"),
    ("newState.", "type"),
    ("newState.", "provider"),
    ("newState.", "parent"),
)


def _type_problems(index: int, step: Mapping[str, Any], state: Mapping[str, Any]) -> list[str]:
    """The identity fields of a step that are set but not strings."""
    problems = []
    for where, key in _STRING_FIELDS:
        value = (state if where else step).get(key)
        if value is not None and not isinstance(value, str):
            problems.append(f"steps[{index}].{where}{key} is {_json_kind(value)}, not a string")
    return problems


class _Decoded:
    """Plan values decoded (`decode_plan_value`), each resource's its own."""

    decode = staticmethod(decode_plan_value)

    @staticmethod
    def strings(values: list[Any]) -> tuple[str, ...]:
        return tuple(str(v) for v in values)


def _strings(value: Any, decoder: _Decoded | SharedValues) -> tuple[str, ...]:
    """A list of URNs as a tuple of strings (shared by a `SharedValues` decoder)."""
    return decoder.strings(value) if isinstance(value, list) else ()


_HINT = "expected the output of `pulumi preview --json` or `make plan`"


def parse_plan(document: Any, path: Path) -> Plan:
    """The `Plan` of an already parsed plan document.

    Args:
        document: the parsed JSON.
        path: where it came from (for messages and the plan's name).
    """
    hint = _HINT
    if not isinstance(document, Mapping):
        raise PlanError(
            f"{path}: the top level is a {type(document).__name__}, not an object; {hint}"
        )
    steps = document.get("steps")
    if not isinstance(steps, list):
        raise PlanError(f"{path}: no `steps` list; {hint}")
    if not steps:
        raise PlanError(
            f"{path}: the plan has no resources: is this the output of pulumi preview --json?"
        )
    resources: list[PlanResource] = []
    problems: list[str] = []
    for index, step in enumerate(steps):
        _read_step(index, step, _Decoded(), resources, problems)
    return _plan(path, document.get("config"), resources, problems)


def _plan(path: Path, config: Any, resources: list[PlanResource], problems: list[str]) -> Plan:
    config = config or {}
    if not isinstance(config, Mapping):
        raise PlanError(f"{path}: `config` is not an object; {_HINT}")
    if problems:
        shown = "; ".join(problems[:5]) + (
            f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        )
        raise PlanError(f"{path}: {shown}; {_HINT}")
    return Plan(path, dict(config), tuple(resources))


def _read_step(
    index: int,
    step: Any,
    decoder: _Decoded | SharedValues,
    resources: list[PlanResource],
    problems: list[str],
) -> None:
    """Add the resource step ``index`` leaves in the stack to ``resources`` (its values
    decoded by ``decoder``), or what is wrong with the step to ``problems``."""
    if not isinstance(step, Mapping):
        problems.append(f"steps[{index}] is not an object")
        return
    op = str(step.get("op", "create"))
    if op in GONE_OPS:
        return
    state = step.get("newState")
    if not isinstance(state, Mapping):
        problems.append(f"steps[{index}] ({op}) has no `newState` object")
        return
    wrong_types = _type_problems(index, step, state)
    if wrong_types:
        problems.extend(wrong_types)
        return
    urn = state.get("urn") or step.get("urn")
    kind = state.get("type")
    if not isinstance(urn, str) or not urn.startswith("urn:pulumi:"):
        problems.append(f"steps[{index}].newState.urn is missing or not a URN")
        return
    if not isinstance(kind, str) or not kind:
        problems.append(f"steps[{index}].newState.type is missing")
        return
    inputs = state.get("inputs") or {}
    outputs = state.get("outputs") or {}
    if not isinstance(inputs, Mapping) or not isinstance(outputs, Mapping):
        problems.append(f"steps[{index}]: inputs/outputs are not objects")
        return
    if problems:
        return  # the plan is refused: nothing more of it is kept
    prop_deps = state.get("propertyDependencies") or {}
    decode = decoder.decode
    decoded_inputs = decode(dict(inputs))
    resources.append(
        PlanResource(
            urn=urn,
            type=kind,
            name=urn_name(urn),
            custom=bool(state.get("custom", True)),
            op=op,
            inputs=decoded_inputs,
            state=decode({**inputs, **outputs}) if outputs else decoded_inputs,
            provider=provider_urn(state.get("provider") or step.get("provider")),
            parent=state.get("parent") or None,
            dependencies=_strings(state.get("dependencies"), decoder),
            property_dependencies={str(k): _strings(v, decoder) for k, v in prop_deps.items()}
            if isinstance(prop_deps, Mapping)
            else {},
            protect=bool(state.get("protect", False)),
        )
    )


class _LazyProps:
    """``props`` wrapped in the unknown-checking proxy when first read. The review hands
    rules views of the plain inputs (`ResourceView.from_args`), so most are never wrapped."""

    _raw: Any
    _proxy: Any

    @property
    def props(self) -> Any:
        if self._proxy is None:
            self._proxy = unknown_checking_proxy(self._raw)
        return self._proxy

    @props.setter
    def props(self, value: Any) -> None:
        self._raw, self._proxy = value, None


class _LazyArgs(_LazyProps, ResourceValidationArgs):
    """`ResourceValidationArgs` whose inputs are wrapped when first read (`_LazyProps`)."""


class _LazyPolicyResource(_LazyProps, PolicyResource):
    """`PolicyResource` whose state is wrapped when first read (`_LazyProps`), and whose
    parent and dependencies are looked up when first read (the rules read the URNs of
    their views; only a program that reads the objects needs them)."""

    links: tuple[PlanResource, Mapping[str, PolicyResource]] | None = None

    def _resolve(self) -> None:
        if self.links is None:
            return
        resource, objects = self.links
        self.links = None
        self._parent = objects.get(resource.parent) if resource.parent else None
        self._dependencies = [objects[u] for u in resource.dependencies if u in objects]
        self._property_dependencies = {
            key: [objects[u] for u in urns if u in objects]
            for key, urns in resource.property_dependencies.items()
        }

    @property
    def parent(self) -> PolicyResource | None:
        self._resolve()
        return self._parent

    @parent.setter
    def parent(self, value: PolicyResource | None) -> None:
        self._resolve()
        self._parent = value

    @property
    def dependencies(self) -> list[PolicyResource]:
        self._resolve()
        return self._dependencies

    @dependencies.setter
    def dependencies(self, value: list[PolicyResource]) -> None:
        self._resolve()
        self._dependencies = value

    @property
    def property_dependencies(self) -> dict[str, list[PolicyResource]]:
        self._resolve()
        return self._property_dependencies

    @property_dependencies.setter
    def property_dependencies(self, value: dict[str, list[PolicyResource]]) -> None:
        self._resolve()
        self._property_dependencies = value


def _options(resource: PlanResource) -> PolicyResourceOptions:
    """The resource's options; one object per (protect, parent), shared by the
    resources that have them (nothing changes a resource's options)."""
    key = (resource.protect, resource.parent)
    options = _OPTIONS.get(key)
    if options is None:
        options = _OPTIONS[key] = PolicyResourceOptions(
            protect=resource.protect,
            ignore_changes=[],
            delete_before_replace=None,
            aliases=[],
            custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
            additional_secret_outputs=[],
            parent=resource.parent,
        )
    return options


_OPTIONS: dict[tuple[bool, str | None], PolicyResourceOptions] = {}


def _provider(plan: Plan, urn: str | None) -> PolicyProviderResource | None:
    if urn is None:
        return None
    known = plan._providers.get(urn)
    if known is not None:
        return known
    provider = plan.index.get(urn)
    props = provider.inputs if provider is not None else {}
    kind = (
        provider.type
        if provider is not None
        else urn.split("::")[2]
        if urn.count("::") >= 3
        else ""
    )
    made = PolicyProviderResource(kind, unknown_checking_proxy(props), urn, urn_name(urn))
    plan._providers[urn] = made
    return made


def resource_args(
    plan: Plan, resource: PlanResource, config: Mapping[str, Any] | None
) -> ResourceValidationArgs:
    """The `ResourceValidationArgs` the engine would send for ``resource`` (its view,
    `ResourceView.from_args`, is made from the decoded inputs without copying them)."""
    args = _LazyArgs(
        resource.type,
        resource.inputs,
        resource.urn,
        resource.name,
        _options(resource),
        _provider(plan, resource.provider),
        dict(config) if config else None,
    )
    ResourceView.from_args(args, resource.inputs)
    return args


def stack_resources(plan: Plan) -> list[PolicyResource]:
    """The `PolicyResource` list the engine would send to stack policies (built once per
    plan and shared by every stack rule and the evidence; nothing changes it)."""
    return plan._stack_resources


def _stack_resources(plan: Plan) -> list[PolicyResource]:
    objects: dict[str, _LazyPolicyResource] = {}
    for resource in plan.resources:
        objects[resource.urn] = _LazyPolicyResource(
            resource.type,
            resource.state,
            resource.urn,
            resource.name,
            _options(resource),
            _provider(plan, resource.provider),
            None,
            [],
            {},
        )
    for resource in plan.resources:
        target = objects[resource.urn]
        target.links = (resource, objects)
        # The view rules read: the decoded state itself, not a copy of its proxy, and
        # the plan's URNs where every one is of the stack (as the engine's are).
        graph = (resource.dependencies, *resource.property_dependencies.values())
        whole = all(u in objects for urns in graph for u in urns)
        links = (
            Links(resource.parent, resource.dependencies, resource.property_dependencies)
            if whole
            else None
        )
        ResourceView.from_policy_resource(target, resource.state, links)
    return list[PolicyResource](objects.values())
