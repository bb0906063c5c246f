"""The locks in locks/ match pyproject.toml: every extra has a lock of its name, every
requirement of the extra is pinned there at a version the requirement admits, with hashes;
each runtime lock was resolved alone and each test lock against its own environment's
runtime lock only (one environment per image: no lock holds another back); the model
server's lock runs a KServe no older than the cluster's; each image installs its own lock.
A dependency added to pyproject.toml without `make lock` fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from modules.k8s.serving.spec import KSERVE_VERSION

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;\\]+)", re.MULTILINE)
#: uv's annotation of a pin that a constraint file shaped (`# via -c <file>`).
CONSTRAINT = re.compile(r"^\s*#\s+(?:via )?-c (\S+)$", re.MULTILINE)
TEST_SUFFIX = "-test"
RUNTIME_SETS = sorted(n for n in PROJECT["optional-dependencies"] if not n.endswith(TEST_SUFFIX))
TEST_SETS = sorted(n for n in PROJECT["optional-dependencies"] if n.endswith(TEST_SUFFIX))


def install_sets() -> dict[str, list[str]]:
    return {k: list(v) for k, v in PROJECT["optional-dependencies"].items()}


def pins(lock: Path) -> dict[str, Version]:
    text = lock.read_text()
    return {
        canonicalize_name(name.split("[")[0]): Version(version)
        for name, version in PIN.findall(text)
    }


def lock_of(name: str) -> Path:
    return ROOT / "locks" / f"{name}.txt"


def test_nothing_is_shared_between_the_environments() -> None:
    # [project] dependencies would be part of every extra's environment.
    assert PROJECT.get("dependencies", []) == []
    assert {"plan", "training", "lifecycle", "serving"} <= set(RUNTIME_SETS)
    for name in TEST_SETS:
        assert name.removesuffix(TEST_SUFFIX) in RUNTIME_SETS, name


def test_every_lock_belongs_to_an_extra() -> None:
    locks = {p.name for p in (ROOT / "locks").iterdir()}
    assert locks == {f"{name}.txt" for name in install_sets()}, "run `make lock`"


@pytest.mark.parametrize("name", sorted(install_sets()))
def test_every_requirement_is_pinned_in_its_lock(name: str) -> None:
    lock = lock_of(name)
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


@pytest.mark.parametrize("name", RUNTIME_SETS)
def test_each_runtime_lock_was_resolved_alone(name: str) -> None:
    text = lock_of(name).read_text()
    assert CONSTRAINT.findall(text) == [], f"{name}.txt was resolved against another lock"
    assert f"pyproject.toml's [{name}] extra, resolved alone" in text


@pytest.mark.parametrize("name", TEST_SETS)
def test_each_test_lock_follows_its_own_environment_only(name: str) -> None:
    runtime = name.removesuffix(TEST_SUFFIX)
    text = lock_of(name).read_text()
    assert set(CONSTRAINT.findall(text)) <= {f"locks/{runtime}.txt"}
    # Installed into the same environment: the packages both pin agree.
    runtime_pins = pins(lock_of(runtime))
    for package, version in pins(lock_of(name)).items():
        if package in runtime_pins:
            assert runtime_pins[package] == version, f"{package} in {name}.txt and {runtime}.txt"


def test_the_model_server_runs_a_kserve_no_older_than_the_cluster() -> None:
    served = pins(lock_of("serving"))["kserve"]
    assert served >= Version(KSERVE_VERSION.removeprefix("v")), (served, KSERVE_VERSION)


def test_protobuf_5_stays_with_the_pulumi_sdks() -> None:
    # pulumi-policy needs protobuf 5; the images without Pulumi are not held to it.
    assert pins(lock_of("plan"))["protobuf"].major == 5
    for name in ("lifecycle", "serving"):
        assert pins(lock_of(name))["protobuf"].major > 5, name


@pytest.mark.parametrize(
    ("dockerfile", "lock"),
    [
        ("workloads/Dockerfile", "training"),
        ("workloads/serving/Dockerfile", "serving"),
        ("workloads/tracking/Dockerfile", "lifecycle"),
        ("workloads/finetune/Dockerfile", "finetune"),
        ("workloads/llm/Dockerfile", "llm"),
    ],
)
def test_each_image_installs_its_own_lock(dockerfile: str, lock: str) -> None:
    text = (ROOT / dockerfile).read_text()
    assert set(re.findall(r"locks/[\w.-]+", text)) == {f"locks/{lock}.txt"}
    copied = re.search(rf"^COPY locks/{lock}\.txt (\S+)$", text, re.MULTILINE)
    assert copied, f"{dockerfile} copies no locks/{lock}.txt"
    assert f"--require-hashes --no-deps -r {copied[1]}" in text


def test_the_makefile_installs_the_torch_version_pyproject_pins() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^TORCH_VERSION := 2\.13\.0$", makefile, re.MULTILINE)
    assert "https://download.pytorch.org/whl/cpu" in makefile
