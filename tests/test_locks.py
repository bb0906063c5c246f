"""The locks in locks/ match pyproject.toml: every install set has a lock, every
requirement of the set is pinned there at a version the requirement admits, with hashes,
and a package pinned in two locks is pinned at the same version (the sets share one
environment). A dependency added to pyproject.toml without `make lock` fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;\\]+)", re.MULTILINE)


def install_sets() -> dict[str, list[str]]:
    sets: dict[str, list[str]] = {k: list(v) for k, v in PROJECT["optional-dependencies"].items()}
    sets["plan"] = [*PROJECT["dependencies"], *sets.get("plan", [])]
    return sets


def pins(lock: Path) -> dict[str, Version]:
    text = lock.read_text()
    return {
        canonicalize_name(name.split("[")[0]): Version(version)
        for name, version in PIN.findall(text)
    }


@pytest.mark.parametrize("name", sorted(install_sets()))
def test_every_requirement_is_pinned_in_its_lock(name: str) -> None:
    lock = ROOT / "locks" / f"{name}.txt"
    assert lock.is_file(), f"no {lock.relative_to(ROOT)}: run `make lock`"
    pinned = pins(lock)
    for line in install_sets()[name]:
        requirement = Requirement(line)
        package = canonicalize_name(requirement.name)
        if package == "torch":
            # Installed from PyTorch's CPU index by the Makefile, pinned in pyproject.toml.
            assert str(requirement.specifier) == "==2.13.0"
            assert package not in pinned
            continue
        assert package in pinned, f"{line!r} is not in {lock.name}: run `make lock`"
        assert requirement.specifier.contains(pinned[package], prereleases=True), (
            f"{lock.name} pins {package}=={pinned[package]}, outside {line!r}: run `make lock`"
        )


def test_every_pin_has_hashes() -> None:
    for lock in (ROOT / "locks").glob("*.txt"):
        entries = re.split(r"\n(?=[A-Za-z0-9])", lock.read_text())
        for entry in entries:
            if PIN.match(entry):
                assert "--hash=sha256:" in entry, f"{lock.name}: {entry.splitlines()[0]}"


def test_the_sets_agree_on_versions() -> None:
    seen: dict[str, tuple[Version, str]] = {}
    for lock in sorted((ROOT / "locks").glob("*.txt")):
        for package, version in pins(lock).items():
            first = seen.setdefault(package, (version, lock.name))
            assert first[0] == version, f"{package}: {first} vs {version} in {lock.name}"


def test_the_makefile_installs_the_torch_version_pyproject_pins() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^TORCH_VERSION := 2\.13\.0$", makefile, re.MULTILINE)
    assert "https://download.pytorch.org/whl/cpu" in makefile
