"""Reading resource properties as the policy engine hands them over.

During a real ``pulumi preview`` values computed by the cloud are *unknown*: the engine
sends a sentinel string in their place, and `pulumi_policy` raises `UnknownValueError`
when a policy reads one, which the engine turns into an advisory "can't run policy
... during preview". The rules here read plain copies of the properties (sentinels kept)
so that they can tell "set, but unknown yet" from "missing", and call `known` only where
a decision needs the actual value: the same `UnknownValueError` then reaches the engine
(or the offline review), with the property path in its message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from pulumi_policy.deserialize import serialize_properties
from pulumi_policy.proxy import UnknownValueError

# The sentinels of `pulumi_policy.proxy` (one per value kind); a real preview puts them
# where a value depends on an output that does not exist yet.
UNKNOWN_SENTINELS = frozenset(
    {
        "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7",  # boolean
        "3eeb2bf0-c639-47a8-9e75-3b44932eb421",  # number
        "04da6b54-80e4-46f7-96ec-b56ff0331ba9",  # string
        "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",  # array
        "030794c1-ac77-496b-92df-f27374a8bd58",  # asset
        "e48ece36-62e2-4504-bad9-02848725956a",  # archive
        "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",  # object
    }
)
UNKNOWN_STRING = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"

# How `pulumi preview --json` writes a secret whose value it does not show.
SECRET_PLACEHOLDER = "[secret]"
SPECIAL_SIG_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"


def is_unknown(value: object) -> bool:
    """True when ``value`` is one of the engine's unknown-value sentinels."""
    return isinstance(value, str) and value in UNKNOWN_SENTINELS


def plain(props: Mapping[str, Any] | None) -> dict[str, Any]:
    """A plain-dict copy of (possibly proxied) properties; unknown sentinels are kept."""
    if props is None:
        return {}
    result = serialize_properties(props)
    return dict(result) if isinstance(result, Mapping) else {}


def known(value: Any, path: str) -> Any:
    """``value`` itself, or `UnknownValueError` naming ``path`` when it is unknown."""
    if is_unknown(value):
        raise UnknownValueError(value, path.split("."))
    return value


def dig(data: Any, *path: str | int) -> Any:
    """The value at ``path`` below ``data`` (None where a step is missing).

    An unknown value on the way is returned as is (the caller decides whether it
    matters), so a rule can tell "not set" (None) from "set, unknown yet".
    """
    current = data
    for step in path:
        if is_unknown(current):
            return current
        if isinstance(step, int):
            if not isinstance(current, list) or step >= len(current):
                return None
            current = current[step]
        else:
            if not isinstance(current, Mapping):
                return None
            current = current.get(step)
    return current


def as_list(value: Any) -> list[Any]:
    """A list value, or [] when missing; an unknown list stays a one-item list of it."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    return [value]


def walk_strings(data: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every (path, string) below ``data``, JSON documents inside strings included."""
    if isinstance(data, str):
        yield path, data
        parsed = parse_json_document(data)
        if parsed is not None:
            yield from walk_strings(parsed, path)
    elif isinstance(data, Mapping):
        for key, value in data.items():
            yield from walk_strings(value, f"{path}.{key}" if path else str(key))
    elif isinstance(data, Sequence):
        for index, value in enumerate(data):
            yield from walk_strings(value, f"{path}[{index}]")


def parse_json_document(value: Any) -> Any:
    """A JSON object or array inside a string (policy documents are often strings)."""
    if isinstance(value, Mapping | list):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text.startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def decode_plan_value(value: Any) -> Any:
    """A property value of a plan document as the engine would hand it to a policy.

    Secrets arrive as ``{"4dabf...": "1b47...", "value": v}`` (or without the value, or as
    the string "[secret]"): the engine gives policies the value itself, and where the
    plan hides it the placeholder string stands in. Other special objects (assets,
    archives) are kept as plain dicts.
    """
    if isinstance(value, list):
        return [decode_plan_value(item) for item in value]
    if isinstance(value, Mapping):
        if value.get(SPECIAL_SIG_KEY) == SECRET_SIG:
            return decode_plan_value(value["value"]) if "value" in value else SECRET_PLACEHOLDER
        return {str(key): decode_plan_value(item) for key, item in value.items()}
    return value


class SharedValues:
    """Decodes plan values as `decode_plan_value` does, sharing what repeats: equal
    strings, and equal objects and arrays, are one object each.

    A plan of many resources repeats most of what it says (keys, labels, security
    contexts, policy statements, whole resources made by one loop), so a large plan
    takes a fraction of the memory. The values are read-only from then on: nothing in
    the review changes a plan's values (a change to one would change every resource
    that shares it).
    """

    def __init__(self) -> None:
        self._strings: dict[str, str] = {}
        # An object or array by what it holds: its items' keys, and each value as
        # `_mark` gives it.
        self._shared: dict[tuple[Any, ...], Any] = {}

    def decode(self, value: Any) -> Any:
        """``value`` decoded and shared. The parsed objects and arrays of ``value``
        are taken over (changed in place, kept as the shared ones)."""
        kind = type(value)
        if kind is str:
            return self._strings.setdefault(value, value)
        if kind is dict:
            return self._object(value)
        if kind is list:
            return self._array(value)
        return value

    def strings(self, values: list[Any]) -> tuple[str, ...]:
        """``values`` as strings, each one shared."""
        strings = list(map(str, values))
        return tuple(map(self._strings.setdefault, strings, strings))

    def _object(self, value: dict[str, Any]) -> Any:
        if value.get(SPECIAL_SIG_KEY) == SECRET_SIG:
            return self.decode(value["value"]) if "value" in value else SECRET_PLACEHOLDER
        return self._share(value, value.items(), [dict], keys=True)

    def _array(self, value: list[Any]) -> Any:
        return self._share(value, enumerate(value), [list], keys=False)

    def _share(
        self, value: Any, items: Iterable[tuple[Any, Any]], marks: list[Any], *, keys: bool
    ) -> Any:
        """The shared object or array equal to ``value`` (its ``items``: (key or index,
        value)). The parsed one itself becomes the shared one when it is the first of
        its kind (its values replaced by the shared ones): no second one is made."""
        intern = self._strings.setdefault
        add = marks.append
        for key, raw in items:
            kind = type(raw)
            if kind is str:
                item = mark = intern(raw, raw)
            else:
                if kind is dict:
                    item = self._object(raw)
                elif kind is list:
                    item = self._array(raw)
                else:
                    item = raw
                mark = _mark(item)
            if item is not raw:
                value[key] = item
            if keys:
                add(intern(key, key))
            add(mark)
        return self._shared.setdefault(tuple(marks), value)


def _mark(value: Any) -> Any:
    """What stands for a value that is not a string in `SharedValues`' keys, equal only
    for equal values of one type: None and booleans themselves (no key holds 0 or 1
    bare), a shared object or array by its identity, a number with its type (1, 1.0 and
    True are equal in Python), a float by its exact bits (-0.0 == 0.0)."""
    if value is None or value is True or value is False:
        return value
    kind = type(value)
    if kind is dict or kind is list:
        return id(value)
    if kind is float:
        return (float, value.hex())
    return (kind, value)


class Deferred:
    """Lets a stack rule judge every subject before giving up on an unknown value.

    The first `UnknownValueError` met inside `each` is kept and raised by `finish`, after
    the violations of the other subjects have been reported.
    """

    def __init__(self) -> None:
        self.first: UnknownValueError | None = None

    @contextmanager
    def each(self) -> Iterator[None]:
        try:
            yield
        except UnknownValueError as unknown:
            self.first = self.first or unknown

    def finish(self) -> None:
        if self.first is not None:
            raise self.first
