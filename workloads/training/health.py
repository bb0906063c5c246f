"""Preflight GPU health check, run before training (the training pod's init container).

``python -m workloads.health --expect-gpus 8 [--expect-nvlink]`` fails fast, with one
line per problem, when the node does not have the GPUs it should or one of them
should not be trusted with a long run:

- fewer or more GPUs than expected;
- uncorrected (volatile) ECC errors since the last driver load;
- a pending row remap (memory rows are waiting for a GPU reset to be swapped out) or
  a failed remap (the GPU ran out of spare rows);
- NVLink links down where ``--expect-nvlink`` says they should be up;
- harmful clock throttling (hardware slowdown, thermal, power brake).

Where there is no NVIDIA GPU or NVML (a laptop, a CPU pool) and none is expected, it
says so and succeeds; when GPUs are expected it fails with the reason.

Exit status: 0 healthy, 1 unhealthy, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from workloads.training.telemetry import (
    HARMFUL_THROTTLE_REASONS,
    GpuSample,
    NvmlUnavailableError,
    sample_gpus,
)

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
EXIT_USAGE = 2


def problems(samples: Sequence[GpuSample], expect_gpus: int, expect_nvlink: bool) -> list[str]:
    """Every reason not to train on these GPUs (empty when healthy)."""
    found: list[str] = []
    if len(samples) != expect_gpus:
        found.append(f"expected {expect_gpus} GPU(s), NVML sees {len(samples)}")
    for gpu in samples:
        name = f"GPU {gpu.index} ({gpu.name}{', ' + gpu.uuid if gpu.uuid else ''})"
        if gpu.ecc_uncorrected_volatile:
            found.append(
                f"{name}: {gpu.ecc_uncorrected_volatile} uncorrected ECC error(s) since the "
                "driver loaded; drain the node and reset or replace the GPU"
            )
        if gpu.remap_pending:
            found.append(
                f"{name}: row remapping pending; the GPU needs a reset before it can be "
                "trusted (drain the node, reset the GPU)"
            )
        if gpu.remap_failed:
            found.append(f"{name}: a row remap failed (no spare rows left); replace the GPU")
        if expect_nvlink:
            if not gpu.nvlink_total:
                found.append(f"{name}: NVLink expected but the GPU reports no NVLink links")
            elif (gpu.nvlink_up or 0) < gpu.nvlink_total:
                found.append(
                    f"{name}: {gpu.nvlink_total - (gpu.nvlink_up or 0)} of {gpu.nvlink_total} "
                    "NVLink links down"
                )
        harmful = sorted(set(gpu.throttle_reasons) & HARMFUL_THROTTLE_REASONS)
        if harmful:
            found.append(f"{name}: clocks held down by {', '.join(harmful)}")
    return found


def check(expect_gpus: int, expect_nvlink: bool) -> tuple[int, list[str]]:
    """Run the check; returns the exit status and the lines to print."""
    try:
        samples = sample_gpus()
    except NvmlUnavailableError as err:
        if expect_gpus == 0:
            return EXIT_HEALTHY, [f"health: no NVIDIA GPU/NVML here ({err}); nothing to check"]
        return EXIT_UNHEALTHY, [
            f"health: FAILED: expected {expect_gpus} GPU(s) but NVML is unavailable: {err}. "
            "Is the pod on a GPU node with the NVIDIA device plugin, and does it request "
            "nvidia.com/gpu?"
        ]
    lines = [f"health: {sample.summary()}" for sample in samples]
    found = problems(samples, expect_gpus, expect_nvlink)
    if found:
        return EXIT_UNHEALTHY, [*lines, "health: FAILED:", *(f"  - {p}" for p in found)]
    return EXIT_HEALTHY, [*lines, f"health: OK ({len(samples)} GPU(s))"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.health", description="Preflight GPU health check."
    )
    parser.add_argument(
        "--expect-gpus", type=int, required=True, help="GPUs this node must have (0: none)"
    )
    parser.add_argument(
        "--expect-nvlink", action="store_true", help="fail if any NVLink link is down"
    )
    args = parser.parse_args(argv)
    if args.expect_gpus < 0:
        print("health: --expect-gpus must be 0 or more", file=sys.stderr)
        return EXIT_USAGE
    status, lines = check(args.expect_gpus, args.expect_nvlink)
    stream = sys.stdout if status == EXIT_HEALTHY else sys.stderr
    for line in lines:
        print(line, file=stream)
    return status


if __name__ == "__main__":
    sys.exit(main())
