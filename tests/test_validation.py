"""The shared checks of `modules.validation.Checker` that every cluster service's spec
uses for its image tags, registries and CIDRs."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pytest

from modules.validation import Checker, InvalidArgsError, TextFormat, bounded


def problems(*calls: tuple[str, tuple[object, ...]]) -> list[str]:
    check = Checker()
    for method, args in calls:
        getattr(check, method)(*args)
    try:
        check.done()
    except InvalidArgsError as err:
        return [p.describe() for p in err.problems]
    return []


@pytest.mark.parametrize("tag", ["0.1.0", "v1.11.1-distroless", "25.09-py3", "sha_1"])
def test_a_fixed_tag_passes(tag: str) -> None:
    assert problems(("fixed_image_tag", ("image_tag", tag))) == []


@pytest.mark.parametrize("tag", ["latest", "", "-x", "a/b", "x" * 129, "1.0:2"])
def test_latest_or_a_malformed_tag_is_refused(tag: str) -> None:
    (problem,) = problems(("fixed_image_tag", ("image_tag", tag)))
    assert problem.startswith("image_tag: got") and "not latest" in problem


@pytest.mark.parametrize("registry", [None, "123.dkr.ecr.me-central-1.amazonaws.com/gpu-prod",
                                      "registry.dc1.internal:5000/ml"])  # fmt: skip
def test_a_registry_passes(registry: str | None) -> None:
    assert problems(("registry", ("registry", registry))) == []


@pytest.mark.parametrize("registry", ["https://r.example/x", "r.example/x/", "R.example", ""])
def test_a_malformed_registry_is_refused(registry: str) -> None:
    (problem,) = problems(("registry", ("registry", registry)))
    assert "no scheme and no trailing slash" in problem


def test_every_bad_cidr_is_named_by_its_index() -> None:
    found = problems(("cidrs", ("cidrs", ["10.0.0.0/16", "10.0.0.1/16", "nope"], "10.1.0.0/16")))
    assert found == [
        "cidrs[1]: got '10.0.0.1/16'; a CIDR like 10.1.0.0/16",
        "cidrs[2]: got 'nope'; a CIDR like 10.1.0.0/16",
    ]


def test_a_text_format_names_what_it_expects() -> None:
    team = TextFormat(r"^[a-z]+$", "a team name")
    assert problems(("matches", ("team", "nlp", team))) == []
    assert problems(("matches", ("team", "NLP", team))) == ["team: got 'NLP'; a team name"]


def test_one_of_lists_the_choices_and_says_why() -> None:
    assert problems(("one_of", ("mode", "a", ("a", "b")))) == []
    assert problems(("one_of", ("mode", "c", ("a", "b")))) == ["mode: got 'c'; one of 'a', 'b'"]
    assert problems(("one_of", ("mode", "c", ("a", "b"), "never c"))) == [
        "mode: got 'c'; one of 'a', 'b' (never c)"
    ]


def test_within_and_ranges_check_both_bounds() -> None:
    assert problems(("within", ("days", 1, 1, 35)), ("within", ("days", 35, 1, 35))) == []
    assert problems(("within", ("days", 0, 1, 35, "0 turns it off"))) == [
        "days: got 0; use 1 to 35 (0 turns it off)"
    ]

    @dataclass(frozen=True)
    class Sizes:
        small: int = bounded(1, 10, default=5)
        unchecked: int = 0
        large: int = bounded(100, 1000, default=500)

    assert (Sizes().small, Sizes().large) == (5, 500)
    assert problems(("ranges", (Sizes(10, -1, 100),))) == []
    # In the order of the fields; a field declared without bounds is not checked.
    assert problems(("ranges", (Sizes(11, -1, 99),))) == [
        "small: got 11; use 1 to 10",
        "large: got 99; use 100 to 1000",
    ]


def test_ipv4_networks_returns_the_valid_ones_and_names_the_rest() -> None:
    check = Checker()
    found = check.ipv4_networks("cidrs", ["10.0.0.0/16", "10.0.0.1/16", "fd00::/8", "x"])
    assert found == [("cidrs[0]", "10.0.0.0/16", ipaddress.IPv4Network("10.0.0.0/16"))]
    assert [p.describe() for p in check.problems] == [
        "cidrs[1]: got '10.0.0.1/16'; expected an IPv4 CIDR",
        "cidrs[2]: got 'fd00::/8'; expected an IPv4 CIDR",
        "cidrs[3]: got 'x'; expected an IPv4 CIDR",
    ]
