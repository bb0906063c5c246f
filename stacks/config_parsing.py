"""Turning a stack file's camelCase values into typed, frozen dataclasses.

One generic parser serves every config section: it reads the dataclass's field
annotations, maps ``camelCase`` keys onto ``snake_case`` fields, rejects unknown keys,
checks types (``str``, ``int``, ``float``, ``bool``, ``Literal``, ``tuple[X, ...]``,
``dict[str, str]``, optional values and nested dataclasses) and runs each dataclass's
own ``__post_init__`` checks. It never stops at the first problem: every problem of
every section comes back together, each with its full key in the stack file
(``uae-gpu-platform:nodePools[1].minSize``), the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from modules.validation import InvalidArgsError, Problem

T = TypeVar("T")

_MISSING = object()


class ConfigError(Exception):
    """The stack configuration is invalid; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))

    def render(self, stack: str) -> str:
        """A one-screen message for the terminal, naming every key to fix."""
        count = len(self.problems)
        lines = [f"Stack '{stack}' has {count} configuration problem{'s' * (count != 1)}:"]
        lines += [f"  - {p}" for p in self.problems]
        lines.append(f"Fix them in stacks/Pulumi.{stack}.yaml (or with `pulumi config set`).")
        return "\n".join(lines)


def engine_text(value: object) -> str:
    """A stack file's value as the Pulumi engine hands it to the program: structures and
    null as JSON, booleans as ``true``/``false``, anything else as its text."""
    if value is None or isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def join(path: str, key: str) -> str:
    """The stack-file key of ``key`` below ``path`` (``ns:`` + ``region`` -> ``ns:region``)."""
    return f"{path}{key}" if path.endswith(":") else f"{path}.{key}"


def camel(name: str) -> str:
    """``min_size`` -> ``minSize``: the stack file's spelling of a field."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def stack_key(field: str) -> str:
    """A Python field path as the stack file spells it: every dotted segment in camelCase,
    list indexes and names kept (``teams[sandbox].pod_security`` ->
    ``teams[sandbox].podSecurity``). Tag keys such as ``data-classification`` have no
    underscore and pass unchanged."""
    return ".".join(_camel_segment(segment) for segment in field.split("."))


def _camel_segment(segment: str) -> str:
    name, bracket, index = segment.partition("[")
    return camel(name) + bracket + index


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin is tuple:
        return f"a list of {_type_name(get_args(tp)[0])}"
    if origin is dict:
        return "a mapping of strings"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if tp is type(None):
        return "null"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(
        tp, str(tp)
    )


class _Parser:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, path: str, value: Any, expected: str) -> object:
        self.problems.append(Problem(path, value, expected).describe())
        return _MISSING

    def value(self, tp: Any, raw: Any, path: str) -> Any:
        origin = get_origin(tp)
        if origin in (Union, types.UnionType):
            options = get_args(tp)
            if raw is None and type(None) in options:
                return None
            non_null = [o for o in options if o is not type(None)]
            if len(non_null) == 1:
                return self.value(non_null[0], raw, path)
            return self.fail(path, raw, f"expected {_type_name(tp)}")
        if origin is Literal:
            if raw in get_args(tp):
                return raw
            return self.fail(path, raw, f"expected {_type_name(tp)}")
        if origin is tuple:
            if not isinstance(raw, list):
                return self.fail(path, raw, f"expected {_type_name(tp)}")
            items = [
                self.value(get_args(tp)[0], item, f"{path}[{i}]") for i, item in enumerate(raw)
            ]
            return _MISSING if _MISSING in items else tuple(items)
        if origin is dict:
            ok = isinstance(raw, Mapping) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
            )
            return dict(raw) if ok else self.fail(path, raw, "expected a mapping of strings")
        if dataclasses.is_dataclass(tp):
            return self.dataclass(typing.cast(type, tp), raw, path)
        if tp is bool:
            return raw if isinstance(raw, bool) else self.fail(path, raw, "expected true or false")
        if tp is int:
            ok = isinstance(raw, int) and not isinstance(raw, bool)
            return raw if ok else self.fail(path, raw, "expected an integer")
        if tp is float:
            ok = isinstance(raw, int | float) and not isinstance(raw, bool)
            return float(raw) if ok else self.fail(path, raw, "expected a number")
        if tp is str:
            return raw if isinstance(raw, str) else self.fail(path, raw, "expected a string")
        raise TypeError(f"config type {tp!r} at {path} is not supported by the parser")

    def dataclass(self, cls: type, raw: Any, path: str) -> Any:
        if not isinstance(raw, Mapping):
            return self.fail(path, raw, "expected a mapping of settings")
        hints = get_type_hints(cls)
        fields = {camel(f.name): f for f in dataclasses.fields(cls) if f.init}
        for key in raw:
            if key not in fields:
                close = difflib.get_close_matches(key, fields, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                allowed = ", ".join(sorted(fields))
                self.fail(join(path, key), raw[key], f"unknown key; {hint}allowed keys: {allowed}")
        kwargs: dict[str, Any] = {}
        broken: set[str] = set()
        for key, f in fields.items():
            if key not in raw:
                if _required(f):
                    self.fail(join(path, key), None, f"required: {_type_name(hints[f.name])}")
                    broken.add(f.name)
                continue
            parsed = self.value(hints[f.name], raw[key], join(path, key))
            if parsed is _MISSING:
                broken.add(f.name)
            else:
                kwargs[f.name] = parsed
        if any(_required(f) for f in dataclasses.fields(cls) if f.name in broken):
            return _MISSING
        # Broken fields fall back to their defaults so the section's own checks still
        # run on the rest; problems about the broken fields themselves are dropped
        # (they were reported above, more precisely).
        try:
            value = cls(**kwargs)
        except InvalidArgsError as err:
            for problem in err.problems:
                if problem.field.split(".")[0].split("[")[0] in broken:
                    continue
                self.problems.append(problem.describe(join(path, stack_key(problem.field))))
            return _MISSING
        return _MISSING if broken else value


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def parse_section(cls: type[T], raw: Any, path: str) -> tuple[T | None, list[str]]:
    """Parse one config section into ``cls``.

    Args:
        cls: the frozen dataclass the section is.
        raw: the section's value as read from the stack file.
        path: its key in the stack file, used to name problems (e.g.
            ``uae-gpu-platform:network``).

    Returns:
        The dataclass (``None`` when invalid) and the list of problems.
    """
    parser = _Parser()
    result = parser.value(cls, raw, path)
    if parser.problems or result is _MISSING:
        return None, parser.problems
    return typing.cast(T, result), []
