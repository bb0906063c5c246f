"""Collecting argument problems so a user sees all of them at once.

Typed args and config sections validate themselves in ``__post_init__``: each check
appends a `Problem` naming the field, the bad value and what is allowed, and the
dataclass raises one `InvalidArgsError` with the whole list. A number field that only
has to lie within a range declares the range with the field (`bounded`), and one call
(`Checker.ranges`) checks them all. The stack config parser
prefixes each field with its place in the stack file (``teams[1].gpuQuota``) and
reports every problem of every section together.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

#: An OCI image tag (the distribution spec's grammar).
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
#: ``host[:port][/path]`` of a registry: lowercase, no scheme, no trailing slash.
_REGISTRY = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$")


@dataclass(frozen=True)
class Problem:
    """One invalid value.

    Args:
        field: the dataclass field (snake_case) or a dotted path below it.
        value: the value that was given.
        expected: what is allowed, in words a user can act on.
    """

    field: str
    value: object
    expected: str

    def describe(self, key: str | None = None) -> str:
        return f"{key or self.field}: got {self.value!r}; {self.expected}"


@dataclass(frozen=True)
class TextFormat:
    """The form a text value must have, kept with the words that tell a user what it is,
    so that every check of the form says the same.

    Args:
        regex: the form, a regular expression that anchors its own start and end
            (``^...$``).
        expected: what is allowed, as `Problem.expected` (``a team name``...).
    """

    regex: str
    expected: str
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", re.compile(self.regex))

    def fits(self, value: str) -> bool:
        return self.pattern.match(value) is not None


#: The key of a `bounded` field's ``(low, high)`` in the field's metadata.
_BOUNDS = "gpuplatform.bounds"


def bounded(low: int, high: int, *, default: int) -> Any:
    """A dataclass field (``default`` when not given) whose value must lie within
    ``low`` to ``high``; `Checker.ranges` checks every such field of a dataclass."""
    return field(default=default, metadata={_BOUNDS: (low, high)})


class InvalidArgsError(ValueError):
    """Every problem found in one set of args."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(p.describe() for p in problems))


class Checker:
    """Accumulates problems; `done()` raises them together."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def require(self, ok: bool, field: str, value: object, expected: str) -> None:
        """Record a problem unless ``ok``."""
        if not ok:
            self.problems.append(Problem(field, value, expected))

    def matches(self, field: str, value: str, text_format: TextFormat) -> None:
        """``value`` has ``text_format``; if not, the problem says what the format is."""
        self.require(text_format.fits(value), field, value, text_format.expected)

    def one_of(self, field: str, value: object, allowed: Sequence[str], why: str = "") -> None:
        """``value`` is one of ``allowed``; ``why``, when given, says in brackets why
        nothing else is (``one of 'a', 'b' (never public)``)."""
        listed = ", ".join(repr(choice) for choice in allowed)
        self.require(
            value in allowed, field, value, f"one of {listed}" + (f" ({why})" if why else "")
        )

    def within(self, field: str, value: float, low: float, high: float, why: str = "") -> None:
        """``low <= value <= high``; ``why``, when given, follows the range in brackets."""
        self.require(
            low <= value <= high,
            field,
            value,
            f"use {low} to {high}" + (f" ({why})" if why else ""),
        )

    def ranges(self, subject: Any) -> None:
        """Each `bounded` field of the dataclass ``subject`` lies within its bounds (in
        the order of the fields)."""
        for declared in fields(subject):
            if _BOUNDS in declared.metadata:
                low, high = declared.metadata[_BOUNDS]
                self.within(declared.name, getattr(subject, declared.name), low, high)

    def ipv4_networks(
        self, field: str, values: Sequence[str]
    ) -> list[tuple[str, str, ipaddress.IPv4Network]]:
        """Every entry an IPv4 CIDR with no host bits set. Returns ``(key, given,
        network)`` for each valid entry (``key`` is ``field[i]``), so the caller can check
        more of it (a private range, not ``0.0.0.0/0``) under the same key."""
        networks: list[tuple[str, str, ipaddress.IPv4Network]] = []
        for index, cidr in enumerate(values):
            key = f"{field}[{index}]"
            try:
                networks.append((key, cidr, ipaddress.IPv4Network(cidr, strict=True)))
            except ValueError:
                self.require(False, key, cidr, "expected an IPv4 CIDR")
        return networks

    def fixed_image_tag(self, field: str, value: str) -> None:
        """An image tag that names one build: valid, and not ``latest``."""
        self.require(
            bool(_IMAGE_TAG.match(value)) and value != "latest",
            field,
            value,
            "a fixed image tag such as 0.1.0 (not latest)",
        )

    def registry(self, field: str, value: str | None) -> None:
        """A registry to pull from (None: the component's default)."""
        self.require(
            value is None or bool(_REGISTRY.match(value)),
            field,
            value,
            "host[:port][/path] of a registry, lowercase, no scheme and no trailing slash",
        )

    def cidrs(self, field: str, values: Sequence[str], example: str = "10.0.0.10/32") -> None:
        """Every entry a CIDR with no host bits set."""
        for index, cidr in enumerate(values):
            try:
                ipaddress.ip_network(cidr, strict=True)
            except ValueError:
                self.require(False, f"{field}[{index}]", cidr, f"a CIDR like {example}")

    def done(self) -> None:
        if self.problems:
            raise InvalidArgsError(self.problems)
