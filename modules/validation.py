"""Collecting argument problems so a user sees all of them at once.

Typed args and config sections validate themselves in ``__post_init__``: each check
appends a `Problem` naming the field, the bad value and what is allowed, and the
dataclass raises one `InvalidArgsError` with the whole list. The stack config parser
prefixes each field with its place in the stack file (``teams[1].gpuQuota``) and
reports every problem of every section together.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    def done(self) -> None:
        if self.problems:
            raise InvalidArgsError(self.problems)
