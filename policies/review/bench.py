"""``python -m policies.review.bench`` (``make bench-review``): the review's time and peak
memory on generated plans of 1k, 10k and 100k resources.

Each plan is a shipped stack's offline plan (its realistic mix of AWS and Kubernetes
resources) copied until it has the asked-for number of resources: every copy renames its
resources (URN suffix ``-<copy>``) and rewrites the parents and dependencies that point
inside it, and shares the stack's providers, as more pools, teams and buckets would. One
copy in ``--violation-every`` gets a privileged container and a multi-region KMS key, so
the reports carry violations (each plan is written by a process of its own). Each size
is reviewed by a fresh ``python -m policies.review`` process; its wall time, CPU time and
peak resident memory (``ru_maxrss`` from ``os.wait4``) are printed with the exact
command, as a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_SIZES = (1_000, 10_000, 100_000)
SHARED_TYPES = ("pulumi:providers:", "pulumi:pulumi:Stack")


def _shared(step: dict[str, Any]) -> bool:
    kind = str(step.get("newState", {}).get("type", ""))
    return kind.startswith(SHARED_TYPES)


def _renamed(value: Any, renames: dict[str, str]) -> Any:
    """``value`` with every string that is a renamed URN (or ``<urn>::<id>``) replaced."""
    if isinstance(value, str):
        if value in renames:
            return renames[value]
        return value
    if isinstance(value, list):
        return [_renamed(v, renames) for v in value]
    if isinstance(value, dict):
        return {k: _renamed(v, renames) for k, v in value.items()}
    return value


def _add_violations(steps: list[dict[str, Any]]) -> None:
    """A privileged container on the first pod spec and a multi-region KMS key."""
    for step in steps:
        state = step["newState"]
        inputs = state.get("inputs") or {}
        containers = ((inputs.get("spec") or {}).get("template") or {}).get("spec", {})
        if isinstance(containers, dict) and isinstance(containers.get("containers"), list):
            container = containers["containers"][0]
            container.setdefault("securityContext", {})["privileged"] = True
            break
    for step in steps:
        if step["newState"]["type"] == "aws:kms/key:Key":
            step["newState"]["inputs"]["multiRegion"] = True
            break


def copies(base: dict[str, Any], size: int, violation_every: int) -> Iterator[dict[str, Any]]:
    """The steps of a plan of ``size`` resources made from ``base``'s steps."""
    shared = [s for s in base["steps"] if _shared(s)]
    own = [s for s in base["steps"] if not _shared(s)]
    yield from shared
    written, number = len(shared), 0
    while written < size:
        renames: dict[str, str] = {}
        if number:
            for step in own:
                urn = step["newState"]["urn"]
                renames[urn] = f"{urn}-{number}"
        batch = [_renamed(copy.deepcopy(s), renames) for s in own[: size - written]]
        if violation_every and number % violation_every == violation_every - 1:
            _add_violations(batch)
        yield from batch
        written += len(batch)
        number += 1


def generate(base_path: Path, size: int, out: Path, violation_every: int = 10) -> Path:
    """Write a plan of ``size`` resources made from the plan at ``base_path`` to ``out``."""
    base = json.loads(base_path.read_text(encoding="utf-8"))
    steps = list(copies(base, size, violation_every))
    document = {
        "config": base.get("config", {}),
        "steps": steps,
        "changeSummary": {"create": len(steps)},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document), encoding="utf-8")
    return out


def _generate_apart(base_path: Path, size: int, out: Path, violation_every: int) -> None:
    """`generate` in a process of its own. A process this one starts counts this one's
    memory at the start in its peak (Linux counts a child's memory before it runs the
    new program), and a generated plan of 100,000 resources leaves this process with
    a few hundred MB that Python does not give back."""
    process = multiprocessing.get_context("spawn").Process(
        target=generate, args=(base_path, size, out, violation_every)
    )
    process.start()
    process.join()
    if process.exitcode != 0:
        raise SystemExit(f"error: generating the plan of {size} resources failed")


@dataclass(frozen=True)
class Measurement:
    """One review process: wall seconds, CPU seconds (user + system; on a shared
    machine the steadier figure), peak resident memory in MiB, exit status."""

    wall_s: float
    cpu_s: float
    peak_mib: float
    exit: int


def measure(command: list[str]) -> Measurement:
    """Run ``command`` with its output discarded, and measure it."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is KiB on Linux (bytes on macOS).
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    return Measurement(
        elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / scale, process.returncode
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m policies.review.bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--base",
        type=Path,
        default=Path("build/plan/uae-prod.json"),
        help="plan whose resources are copied (default: the offline plan of uae-prod, "
        "written first when missing)",
    )
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(s) for s in text.split(",")],
        default=list(DEFAULT_SIZES),
        help="comma-separated resource counts (default 1000,10000,100000)",
    )
    parser.add_argument("--violation-every", type=int, default=10, metavar="N")
    parser.add_argument("--work", type=Path, default=Path("build/bench-review"))
    args = parser.parse_args(argv)
    if not args.base.is_file():
        stack = args.base.stem
        print(f"writing the base plan: {sys.executable} -m stacks.offline_plan {stack}")
        made = subprocess.run(
            [sys.executable, "-m", "stacks.offline_plan", "--quiet", stack], check=False
        )
        if made.returncode != 0 or not args.base.is_file():
            print(f"error: no base plan at {args.base}", file=sys.stderr)
            return 2
    print(
        f"python {platform.python_version()} on {platform.platform()}, "
        f"{os.cpu_count()} CPU(s); base plan {args.base}"
    )
    print(
        "| Resources | Mandatory violations | Wall time (s) | CPU time (s) | Peak RSS (MiB) "
        "| Exit |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    commands = []
    for size in args.sizes:
        plan = args.work / f"plan-{size}.json"
        _generate_apart(args.base, size, plan, args.violation_every)
        command = [
            sys.executable,
            "-m",
            "policies.review",
            "--plan",
            str(plan),
            "--out",
            str(args.work / f"review-{size}"),
        ]
        report = args.work / f"review-{size}" / "report.json"
        report.unlink(missing_ok=True)
        run = measure(command)
        violations = (
            json.loads(report.read_text())["summary"]["mandatoryViolations"]
            if report.is_file()
            else "-"
        )
        print(
            f"| {size:,} | {violations} | {run.wall_s:.1f} | {run.cpu_s:.1f} "
            f"| {run.peak_mib:.0f} | {run.exit} |",
            flush=True,
        )
        commands.append(" ".join(command))
    print("\nEach row is one process:")
    for command_line in commands:
        print(f"  {command_line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
