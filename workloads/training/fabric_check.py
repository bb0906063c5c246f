"""All-reduce bus-bandwidth check: proves a pool's fabric before real work runs on it.

Run it under torchrun across the nodes of a pool (the deployment's fabric-check job
does)::

    torchrun --nnodes 2 --nproc_per_node 8 ... -m workloads.fabric_check \
        --instance-type p5en.48xlarge

Every rank all-reduces a large buffer repeatedly; rank 0 reports the algorithm
bandwidth (bytes / time) and the bus bandwidth, ``busbw = algbw * 2 (n - 1) / n``
(nccl-tests' definition: the traffic each link carries in a ring all-reduce, which
is comparable across world sizes), and the job fails below the instance type's
threshold. On CPUs (gloo) it runs the same way; pass ``--min-busbw-gbps 0`` there.

Exit status: 0 passed, 1 below the threshold, 2 bad arguments or no threshold known.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from workloads.training import distributed
from workloads.training.distributed import TopologyError
from workloads.training.fabric import MIN_BUSBW_GBPS

EXIT_PASSED = 0
EXIT_BELOW_THRESHOLD = 1
EXIT_USAGE = 2


def bus_bandwidth_factor(world_size: int) -> float:
    """``2 (n - 1) / n``: ring all-reduce traffic per link relative to the buffer."""
    return 2.0 * (world_size - 1) / world_size if world_size > 0 else 0.0


@dataclass(frozen=True)
class Measurement:
    """One all-reduce size's result."""

    size_bytes: int
    seconds_per_op: float
    algbw_gbps: float
    busbw_gbps: float


def measure(
    size_bytes: int, iterations: int, warmup: int, device: torch.device, world_size: int
) -> Measurement:
    """Time ``iterations`` all-reduces of a ``size_bytes`` float32 buffer."""
    elements = max(1, size_bytes // 4)
    buffer = torch.ones(elements, dtype=torch.float32, device=device)

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        dist.all_reduce(buffer)
    synchronize()
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(buffer)
    synchronize()
    elapsed = time.perf_counter() - started
    # Every rank must agree on the time: take the slowest.
    slowest = torch.tensor([elapsed], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    per_op = float(slowest.item()) / iterations
    algbw = elements * 4 / per_op / 1e9
    return Measurement(elements * 4, per_op, algbw, algbw * bus_bandwidth_factor(world_size))


def threshold_for(instance_type: str | None, explicit: float | None) -> float | None:
    """The explicit threshold, else the instance type's, else ``None``."""
    if explicit is not None:
        return explicit
    if instance_type:
        return MIN_BUSBW_GBPS.get(instance_type)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.fabric_check",
        description="All-reduce bus-bandwidth check across the ranks torchrun started.",
    )
    parser.add_argument("--instance-type", help="EC2 instance type (selects the threshold)")
    parser.add_argument(
        "--min-busbw-gbps", type=float, help="explicit threshold in GB/s (0: report only)"
    )
    parser.add_argument(
        "--sizes-mib",
        default="",
        help="comma-separated buffer sizes in MiB (default: 1024 on GPU, 16 on CPU)",
    )
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)

    threshold = threshold_for(args.instance_type, args.min_busbw_gbps)
    if threshold is None or threshold < 0:
        known = ", ".join(sorted(MIN_BUSBW_GBPS))
        print(
            f"fabric_check: no bus-bandwidth threshold for instance type "
            f"{args.instance_type!r}; pass --min-busbw-gbps (0 to only report) or one of: {known}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.iterations < 1 or args.warmup < 0:
        print("fabric_check: --iterations must be >= 1 and --warmup >= 0", file=sys.stderr)
        return EXIT_USAGE
    try:
        topology = distributed.read_topology()
        sizes = [int(float(s) * 2**20) for s in args.sizes_mib.split(",") if s.strip()]
    except (TopologyError, ValueError) as err:
        print(f"fabric_check: {err}", file=sys.stderr)
        return EXIT_USAGE

    device = distributed.select_device(topology)
    if not sizes:
        sizes = [2**30] if device.type == "cuda" else [16 * 2**20]
    if topology.world_size < 2:
        print(
            "fabric_check: a world of one has no fabric to check; run under torchrun with "
            "2+ processes",
            file=sys.stderr,
        )
        return EXIT_USAGE
    distributed.init_process_group(topology, device)
    try:
        results = [
            measure(size, args.iterations, args.warmup, device, topology.world_size)
            for size in sizes
        ]
    finally:
        distributed.shutdown()
    best = max(result.busbw_gbps for result in results)
    if topology.is_main:
        backend = "nccl" if device.type == "cuda" else "gloo"
        print(
            f"fabric_check: {topology.world_size} ranks on {topology.nodes} node(s), {backend}"
            + (
                " (one node: the network between nodes is not exercised)"
                if topology.nodes == 1
                else ""
            )
        )
        print(f"{'size':>12} {'time/op':>12} {'algbw GB/s':>12} {'busbw GB/s':>12}")
        for r in results:
            print(
                f"{r.size_bytes:>12} {r.seconds_per_op * 1e6:>10.0f}us "
                f"{r.algbw_gbps:>12.2f} {r.busbw_gbps:>12.2f}"
            )
    if best < threshold:
        if topology.is_main:
            print(
                f"fabric_check: FAILED: best busbw {best:.2f} GB/s is below the "
                f"{threshold:.2f} GB/s threshold"
                + (f" for {args.instance_type}" if args.instance_type else "")
                + "; check the NCCL_/FI_ variables logged above and NCCL_DEBUG=INFO output "
                "for a fallback to sockets",
                file=sys.stderr,
            )
        return EXIT_BELOW_THRESHOLD
    if topology.is_main:
        print(f"fabric_check: PASSED: best busbw {best:.2f} GB/s >= {threshold:.2f} GB/s")
    return EXIT_PASSED


if __name__ == "__main__":
    sys.exit(main())
