"""``make profile PRESET=<p>``: where a training step's time goes.

Runs a few optimizer steps of a preset (any setting can be overridden, as for
``make train``: ``--engine deepspeed``, ``--activation-checkpointing on``, ...) in one
process under `torch.profiler`, with the schedule ``--wait`` (steps not recorded),
``--warmup`` (recorded, then discarded: compilation and allocator warm-up) and
``--active`` (the steps measured), and writes to ``--out-dir/<preset>/``
(default ``build/profile/<preset>/``):

- ``trace.json``: the Chrome trace of the active steps (open it in Perfetto,
  https://ui.perfetto.dev, or chrome://tracing): one row per thread (and, on CUDA, per
  stream), with the named ranges ``forward``, ``backward`` and ``optimizer`` of every
  micro-step around the operators they ran;
- ``operators.md``: the top operators by self time (time in the operator itself, not
  in the operators it called), with calls, self and total times and their share, the
  same table the terminal shows, and the peak of tensor memory allocated during the
  recorded steps (the profiler's allocator count: activations, gradients, optimizer
  temporaries; independent of other work on the machine, unlike RSS or step time).

On CUDA the ranges are also NVTX ranges, so the same command under Nsight Systems
(``nsys profile -t cuda,nvtx,osrt python -m workloads.training.profile ...``) shows
them on its timeline; the table is then sorted by self CUDA time.

Exit status: 0 written, 2 bad arguments or paths (one message).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from modules.validation import InvalidArgsError
from workloads.data.byte_tokenizer import ensure_shards
from workloads.data.shards import ShardError, ShardLoader
from workloads.training.config import (
    TrainConfig,
    add_override_arguments,
    describe_problems,
    from_namespace,
    override,
)
from workloads.training.distributed import Topology
from workloads.training.engine import DeviceBatches, apply_backend_flags, resolve
from workloads.training.engines import setup

EXIT_OK = 0
EXIT_USER_ERROR = 2
DEFAULT_OUT_DIR = Path("build/profile")
TRACE_FILE = "trace.json"
TABLE_FILE = "operators.md"


@dataclasses.dataclass(frozen=True)
class OperatorRow:
    """One operator's totals over the active steps (times in milliseconds)."""

    name: str
    calls: int
    self_ms: float
    total_ms: float
    self_share: float


def _ms(value: float) -> float:
    return value / 1000.0  # the profiler counts microseconds


def operator_rows(events: Any, *, cuda: bool, limit: int) -> list[OperatorRow]:
    """The ``limit`` operators with the most self time (self CUDA time on CUDA) from
    ``profile.key_averages()``; the profiler's own step markers are left out."""

    def read(event: Any, *names: str) -> float:
        # torch 2.4 renamed the ``cuda`` totals ``device``; older releases have only those.
        for name in names:
            value = getattr(event, name, None)
            if value is not None:
                return float(value)
        return 0.0

    def self_time(event: Any) -> float:
        if cuda:
            return read(event, "self_device_time_total", "self_cuda_time_total")
        return read(event, "self_cpu_time_total")

    def total_time(event: Any) -> float:
        if cuda:
            return read(event, "device_time_total", "cuda_time_total")
        return read(event, "cpu_time_total")

    kept = [e for e in events if not str(e.key).startswith("ProfilerStep#")]
    overall = sum(self_time(e) for e in kept) or 1.0
    ranked = sorted(kept, key=self_time, reverse=True)[:limit]
    return [
        OperatorRow(
            name=str(e.key),
            calls=int(e.count),
            self_ms=_ms(self_time(e)),
            total_ms=_ms(total_time(e)),
            self_share=self_time(e) / overall,
        )
        for e in ranked
    ]


def markdown_table(rows: Sequence[OperatorRow], *, cuda: bool) -> list[str]:
    clock = "CUDA" if cuda else "CPU"
    lines = [
        f"| # | operator | calls | self {clock} ms | self {clock} % | total {clock} ms |",
        "|---|---|---|---|---|---|",
    ]
    for index, row in enumerate(rows, 1):
        name = row.name.replace("|", "\\|")
        lines.append(
            f"| {index} | `{name}` | {row.calls} | {row.self_ms:.3f} | "
            f"{100 * row.self_share:.1f}% | {row.total_ms:.3f} |"
        )
    return lines


def profile_run(
    config: TrainConfig,
    out_dir: Path,
    *,
    wait: int,
    warmup: int,
    active: int,
    rows: int,
    command: str,
) -> tuple[Path, Path, list[OperatorRow], str]:
    """Profile ``wait + warmup + active`` steps of ``config``; returns the trace and
    table paths, the table's rows and the profiler's own terminal table."""
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    cuda = device.type == "cuda"
    resolved = dataclasses.replace(resolve(config, device), annotate=True)
    apply_backend_flags(resolved)
    loader = ShardLoader(
        ensure_shards(Path(config.data_dir), Path(config.corpus)),
        batch=config.micro_batch_size,
        seq_len=config.seq_len,
        rank=0,
        world_size=1,
        vocab_size=config.model.padded_vocab_size(resolved.pad_vocab),
    )
    training = setup(config, resolved, Topology())
    batches = DeviceBatches(loader, resolved)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    started = time.perf_counter()
    try:
        with profile(
            activities=activities,
            schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
            record_shapes=True,
            profile_memory=True,
        ) as prof:
            for step in range(1, wait + warmup + active + 1):
                result = training.step(batches, config, step)
                float(result.loss.item())  # the step's kernels end inside its window
                prof.step()
    finally:
        batches.close()
        training.close()
    elapsed = time.perf_counter() - started
    out_dir.mkdir(parents=True, exist_ok=True)
    trace = out_dir / TRACE_FILE
    prof.export_chrome_trace(str(trace))
    peak_mib = peak_allocated_mib(trace, cuda=cuda)
    events = prof.key_averages()
    table_rows = operator_rows(events, cuda=cuda, limit=rows)
    # The table's own sort keys keep the ``cuda`` name on every torch release.
    sort_key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    terminal = events.table(sort_by=sort_key, row_limit=rows)
    device_name = torch.cuda.get_device_name(device) if cuda else "CPU"
    table = out_dir / TABLE_FILE
    table.write_text(
        "\n".join(
            [
                f"# Profile: {config.preset}",
                "",
                f"- command: `{command}`",
                f"- device: {device_name}; torch {torch.__version__}",
                f"- run: {resolved.strategy}, {resolved.describe()}",
                f"- steps: {wait} wait + {warmup} warm-up + {active} active (recorded), "
                f"{config.micro_batch_size} x {config.grad_accum_steps} x {config.seq_len} "
                f"tokens each; {elapsed:.1f} s in all",
                f"- trace: `{trace}` (Perfetto: https://ui.perfetto.dev)",
                f"- peak tensor memory allocated ({'CUDA' if cuda else 'CPU'} allocator, "
                f"recorded steps): {peak_mib:.1f} MiB",
                "",
                f"Top {len(table_rows)} operators by self {'CUDA' if cuda else 'CPU'} time "
                f"over the {active} active steps:",
                "",
                *markdown_table(table_rows, cuda=cuda),
                "",
            ]
        ),
        encoding="utf-8",
    )
    return trace, table, table_rows, terminal


def peak_allocated_mib(trace: Path, *, cuda: bool) -> float:
    """The most tensor memory allocated at once during the recorded steps, from the
    trace's ``[memory]`` events (``Total Allocated``, for the device's allocator)."""
    device_type = 1 if cuda else 0  # the profiler's DeviceType: 0 CPU, 1 CUDA
    events = json.loads(trace.read_text(encoding="utf-8")).get("traceEvents", [])
    totals = [
        float(e["args"]["Total Allocated"])
        for e in events
        if e.get("name") == "[memory]"
        and e.get("args", {}).get("Device Type") == device_type
        and "Total Allocated" in e.get("args", {})
    ]
    return max(totals, default=0.0) / 2**20


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m workloads.training.profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out-dir", default=str(DEFAULT_OUT_DIR), help="build/profile")
    parser.add_argument("--wait", type=int, default=1, help="steps run before recording (1)")
    parser.add_argument("--warmup", type=int, default=1, help="recorded, then discarded (1)")
    parser.add_argument("--active", type=int, default=3, help="steps measured (3)")
    parser.add_argument("--rows", type=int, default=20, help="operators in the table (20)")
    add_override_arguments(parser)
    args = parser.parse_args(argv)
    problems = []
    if args.wait < 0 or args.warmup < 0:
        problems.append("--wait and --warmup must be >= 0")
    if args.active < 1 or args.rows < 1:
        problems.append("--active and --rows must be >= 1")
    out_root = Path(args.out_dir)
    if out_root.exists() and not out_root.is_dir():
        problems.append(f"--out-dir {out_root} is a file; name a directory")
    try:
        config = from_namespace(args)
        steps = args.wait + args.warmup + args.active
        # The schedule needs the steps; metrics are not served from a profile.
        config = override(config, {"steps": str(max(steps, 1)), "metrics_port": "0"})
    except InvalidArgsError as err:
        problems += describe_problems(err).splitlines()[1:]
        config = None
    if problems or config is None:
        print("profile: invalid arguments:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem.strip()}", file=sys.stderr)
        return EXIT_USER_ERROR
    out_dir = out_root / config.preset
    if (out_dir / TRACE_FILE).exists() and not (out_dir / TABLE_FILE).exists():
        # Never overwrite a trace.json this command did not write.
        print(
            f"profile: {out_dir / TRACE_FILE} exists but was not written by this command "
            f"(no {TABLE_FILE} beside it); move it or pass another --out-dir",
            file=sys.stderr,
        )
        return EXIT_USER_ERROR
    command = shlex.join(["python", "-m", "workloads.training.profile", *argv])
    try:
        trace, table, rows, terminal = profile_run(
            config,
            out_dir,
            wait=args.wait,
            warmup=args.warmup,
            active=args.active,
            rows=args.rows,
            command=command,
        )
    except InvalidArgsError as err:
        print(describe_problems(err), file=sys.stderr)
        return EXIT_USER_ERROR
    except ShardError as err:
        print(f"profile: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(terminal)
    events = len(json.loads(trace.read_text(encoding="utf-8")).get("traceEvents", []))
    print(f"profile: trace {trace} ({events} events; open it in https://ui.perfetto.dev)")
    print(f"profile: top {len(rows)} operators by self time in {table}")
    for line in table.read_text(encoding="utf-8").splitlines():
        if line.startswith("- peak tensor memory"):
            print(f"profile: {line.removeprefix('- ')}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
