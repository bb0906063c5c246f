"""Regenerate the dependency locks in `locks/` from pyproject.toml (`make lock`).

One lock per install set, each with exact versions and hashes, so CI and users install the
same files: `locks/plan.txt` (the project's dependencies + the `plan` extra: what `make
plan`, `make review` and `make audit` need) and `locks/<extra>.txt` for every other extra.
All sets are first resolved together (`locks/.joint.txt`, not installed), and each set is
then resolved constrained by that joint resolution, so installing several sets into one
environment never asks for two versions of a package.

torch is the exception: its CPU build comes from PyTorch's CPU index (see the Makefile),
and the CPU and CUDA builds are different files with different hashes, so torch itself is
pinned in pyproject.toml and left out of the locks, and its own requirements are taken
from the CPU build's metadata (the torch installed in this environment) instead of from
the PyPI wheel's, which would add the CUDA libraries.

Needs `uv` (installed into .venv by `make lock`) and network access to PyPI.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "locks"
# Every lock is resolved for the Python the project supports, on every platform.
COMPILE = ["--universal", "--python-version", "3.11", "--generate-hashes", "--quiet"]
COMMAND = "make lock"


def extras() -> dict[str, list[str]]:
    """The install sets: `plan` = dependencies + the plan extra; one per other extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional: dict[str, list[str]] = project["optional-dependencies"]
    sets = {name: list(reqs) for name, reqs in optional.items()}
    sets["plan"] = [*project["dependencies"], *sets.get("plan", [])]
    return sets


def without_torch(requirements: list[str]) -> list[str]:
    """Replace torch by the requirements of the CPU build installed here."""
    out: list[str] = []
    for line in requirements:
        if Requirement(line).name != "torch":
            out.append(line)
            continue
        try:
            cpu_requires = importlib.metadata.requires("torch") or []
        except importlib.metadata.PackageNotFoundError:
            sys.exit("make lock: torch is not installed in .venv; run `make setup` first.")
        out += [r for r in cpu_requires if "extra ==" not in r]
    return out


def compile_set(name: str, requirements: list[str], constraints: Path | None) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".in", delete=False) as handle:
        handle.write("\n".join(requirements) + "\n")
        source = handle.name
    target = LOCKS / f"{name}.txt"
    command = ["uv", "pip", "compile", source, "-o", str(target), *COMPILE]
    command += ["--custom-compile-command", COMMAND, "--no-emit-package", "torch"]
    if constraints is not None:
        command += ["-c", str(constraints)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    Path(source).unlink()
    if result.returncode != 0:
        sys.exit(f"make lock: resolving the {name!r} set failed:\n{result.stderr.strip()}")
    # uv writes the temporary input's path into the header; name the real source instead.
    text = target.read_text().replace(source, f"pyproject.toml ({name} set)")
    target.write_text(text)
    print(f"wrote {target.relative_to(ROOT)}")


def main() -> None:
    LOCKS.mkdir(exist_ok=True)
    sets = {name: without_torch(reqs) for name, reqs in extras().items()}
    joint = sorted({r for reqs in sets.values() for r in reqs})
    compile_set(".joint", joint, None)
    for name, reqs in sorted(sets.items()):
        compile_set(name, reqs, LOCKS / ".joint.txt")


if __name__ == "__main__":
    main()
