"""The shared checks of `modules.validation.Checker` that every cluster service's spec
uses for its image tags, registries and CIDRs."""

from __future__ import annotations

import pytest

from modules.validation import Checker, InvalidArgsError


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
