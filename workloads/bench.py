"""Benchmark: tokens/s, step time, TFLOP/s and MFU of the presets this machine can run,
and the speedup of the full fast path over fp32 eager with every optimisation off.

Both variants train the same model (same seed, same data) in the same process, one
after the other, as a single process (no data parallelism), so the ratio measures
the switches alone:

- ``baseline``: fp32, no TF32, eager (no compile), explicit masked-softmax attention,
  unpadded vocabulary, the default (unfused) AdamW, pageable host memory;
- ``fast``: bf16 autocast where the device supports it, TF32, ``torch.compile``,
  SDPA (the flash kernel on CUDA), vocabulary padded to 64, fused AdamW, pinned
  memory with non-blocking copies.

With ``--ablate`` it also measures ``fast`` with each switch turned off in turn.
On a CUDA machine the default is GPT-2 124M at sequence length 1024; on a CPU the
``tiny`` and ``small`` presets. ``--record`` writes the results, the machine, the
versions and the exact command into ``BENCHMARKS.md`` (replacing this machine's
previous section).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from modules.validation import InvalidArgsError
from workloads.config import TrainConfig, describe_problems, override, preset
from workloads.data.shards import ShardError, ShardLoader
from workloads.data.tokenize import ensure_shards
from workloads.distributed import Topology
from workloads.engine import (
    DeviceBatches,
    apply_backend_flags,
    build_model,
    build_optimizer,
    cpu_supports_bf16,
    parallelize,
    resolve,
    train_step,
)
from workloads.metrics import ThroughputWindow, format_mfu, peak_bf16_tflops
from workloads.model import flops_per_token
from workloads.tracking.overhead import overhead_lines

BASELINE: dict[str, str] = {
    "dtype": "fp32",
    "tf32": "off",
    "compile": "off",
    "fused_adamw": "off",
    "sdpa": "off",
    "pad_vocab": "off",
    "pin_memory": "off",
    "no_sync_accum": "off",
}
#: Switches ``--ablate`` turns off one at a time, with their "off" value.
ABLATIONS: dict[str, str] = {
    "dtype": "fp32",
    "tf32": "off",
    "compile": "off",
    "fused_adamw": "off",
    "sdpa": "off",
    "pad_vocab": "off",
    "pin_memory": "off",
}
CPU_PRESETS = ("tiny", "small")
GPU_PRESETS = ("gpt2-124m",)
#: GPT-2 124M's micro-batch for benchmarking on one GPU: the fp32-eager baseline
#: materialises full attention matrices and fp32 logits, so 16 sequences of 1024.
GPU_BENCH_MICRO_BATCH = 16
BENCHMARKS_FILE = Path("BENCHMARKS.md")
#: Timed windows per variant; the median is reported.
REPEATS = 3


def fast_overrides(device: torch.device) -> dict[str, str]:
    """Every speed switch on (bf16 only where the device has it)."""
    bf16 = torch.cuda.is_bf16_supported() if device.type == "cuda" else cpu_supports_bf16()
    return {
        "dtype": "bf16" if bf16 else "fp32",
        "tf32": "on",
        "compile": "on",
        "fused_adamw": "on",
        "sdpa": "on",
        "pad_vocab": "on",
        "pin_memory": "on" if device.type == "cuda" else "off",
        "no_sync_accum": "on",
    }


@dataclass(frozen=True)
class Result:
    """One variant's figures."""

    preset: str
    variant: str
    switches: str
    params_m: float
    tokens_per_step: int
    step_time_s: float
    tokens_per_s: float
    tflops: float
    mfu: float | None
    data_wait_ratio: float
    final_loss: float


def run_variant(
    config: TrainConfig, variant: str, device: torch.device, warmup: int, steps: int
) -> Result:
    """Train ``warmup`` untimed steps (compilation happens here), then ``steps`` timed."""
    resolved = resolve(config, device)
    apply_backend_flags(resolved)
    files = ensure_shards(Path(config.data_dir), Path(config.corpus))
    loader = ShardLoader(
        files,
        batch=config.micro_batch_size,
        seq_len=config.seq_len,
        rank=0,
        world_size=1,
        vocab_size=config.model.padded_vocab_size(resolved.pad_vocab),
    )
    raw = build_model(config, resolved)
    params = raw.num_parameters()
    model = parallelize(raw, resolved, Topology())
    optimizer = build_optimizer(model, config, resolved)
    batches = DeviceBatches(loader, resolved)
    tokens_per_step = config.tokens_per_micro_step * config.grad_accum_steps
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    window = ThroughputWindow(
        tokens_per_step,
        flops_per_token(config.model, params, config.seq_len),
        1,
        peak_bf16_tflops(device_name),
    )

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    step = 0
    loss = torch.zeros(())
    for step in range(1, warmup + 1):
        loss = train_step(
            model=model,
            optimizer=optimizer,
            batches=batches,
            config=config,
            resolved=resolved,
            step=step,
        ).loss
    sync()
    # The timed steps run in REPEATS windows and the median window is reported, so a
    # burst of other work on a shared machine does not decide the figure.
    windows = []
    per_window = max(1, steps // REPEATS)
    for _ in range(REPEATS):
        window.reset()
        for _ in range(per_window):
            step += 1
            result = train_step(
                model=model,
                optimizer=optimizer,
                batches=batches,
                config=config,
                resolved=resolved,
                step=step,
            )
            window.add_step(result.data_wait_s)
            loss = result.loss
        final_loss = float(loss.item())  # synchronises the device
        sync()
        windows.append(window.stats())
    stats = sorted(windows, key=lambda w: w.tokens_per_s)[len(windows) // 2]
    return Result(
        preset=config.preset,
        variant=variant,
        switches=resolved.describe(),
        params_m=params / 1e6,
        tokens_per_step=tokens_per_step,
        step_time_s=stats.step_time_s,
        tokens_per_s=stats.tokens_per_s,
        tflops=stats.tflops,
        mfu=stats.mfu,
        data_wait_ratio=stats.data_wait_ratio,
        final_loss=final_loss,
    )


def table(results: Sequence[Result]) -> list[str]:
    """Markdown table of the results with each variant's speedup over the baseline."""
    baselines = {r.preset: r for r in results if r.variant == "baseline"}
    lines = [
        "| preset | variant | params | tokens/step | step time | tokens/s | TFLOP/s | MFU "
        "| data wait | speedup vs baseline |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        base = baselines.get(r.preset)
        speedup = f"{r.tokens_per_s / base.tokens_per_s:.2f}x" if base else "-"
        lines.append(
            f"| {r.preset} | {r.variant} | {r.params_m:.2f}M | {r.tokens_per_step} | "
            f"{r.step_time_s * 1000:.1f} ms | {r.tokens_per_s:,.0f} | {r.tflops:.3f} | "
            f"{format_mfu(r.mfu)} | {100 * r.data_wait_ratio:.1f}% | {speedup} |"
        )
    lines.append("")
    lines.append("Switches per variant:")
    seen: set[tuple[str, str]] = set()
    for r in results:
        if (r.variant, r.switches) not in seen:
            seen.add((r.variant, r.switches))
            lines.append(f"- `{r.variant}`: {r.switches}")
    return lines


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(device: torch.device) -> str:
    if device.type == "cuda":
        return "gpu-" + torch.cuda.get_device_name(device).lower().replace(" ", "-")
    return "cpu"


def machine_lines(device: torch.device) -> list[str]:
    lines = [
        f"- machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPU(s), "
        f"{_cpu_model()}",
    ]
    if device.type == "cuda":
        lines.append(f"- GPU: {torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})")
    else:
        lines.append("- GPU: none (CPU run; MFU is not applicable)")
    lines.append(f"- torch {torch.__version__}, Python {platform.python_version()}")
    lines.append(f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}")
    return lines


def record(path: Path, key: str, body: list[str]) -> None:
    """Replace (or append) this machine's section of the benchmarks file."""
    begin, end = f"<!-- bench:{key} begin -->", f"<!-- bench:{key} end -->"
    section = "\n".join([begin, *body, end])
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m workloads.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--presets", help="comma-separated (default: gpt2-124m on CUDA, tiny,small on CPU)"
    )
    parser.add_argument(
        "--steps", type=int, help="timed steps per variant (default 30 on CUDA, 40 on CPU)"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        help="untimed steps first, compilation included (default 10 on CUDA, 3 on CPU)",
    )
    parser.add_argument("--micro-batch-size", type=int, help="override the preset's")
    parser.add_argument("--ablate", action="store_true", help="also fast minus each switch")
    parser.add_argument(
        "--record",
        nargs="?",
        const=str(BENCHMARKS_FILE),
        metavar="FILE",
        help="write the results into FILE (default BENCHMARKS.md)",
    )
    args = parser.parse_args(argv)

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    cuda = device.type == "cuda"
    names = args.presets.split(",") if args.presets else list(GPU_PRESETS if cuda else CPU_PRESETS)
    steps = args.steps or (30 if cuda else 90)
    warmup = args.warmup if args.warmup is not None else (10 if cuda else 3)
    command = shlex.join(["python", "-m", "workloads.bench", *argv])
    if steps < 1 or warmup < 0:
        print("bench: --steps must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2

    results: list[Result] = []
    fast = fast_overrides(device)
    try:
        for name in names:
            base = preset(name.strip())
            batch = args.micro_batch_size or (
                GPU_BENCH_MICRO_BATCH if cuda and base.seq_len >= 1024 else None
            )
            common = {"metrics_port": "0", "grad_accum_steps": "1", "steps": str(warmup + steps)}
            if batch:
                common["micro_batch_size"] = str(batch)
            variants: list[tuple[str, dict[str, str]]] = [("baseline", BASELINE), ("fast", fast)]
            if args.ablate:
                variants += [
                    (f"fast-{switch}", fast | {switch: off})
                    for switch, off in ABLATIONS.items()
                    if fast.get(switch) != off
                ]
            for variant, switches in variants:
                config = override(base, common | switches)
                started = time.perf_counter()
                result = run_variant(config, variant, device, warmup, steps)
                print(
                    f"bench: {name} {variant}: {result.tokens_per_s:,.0f} tok/s, "
                    f"{result.step_time_s * 1000:.1f} ms/step, MFU {format_mfu(result.mfu)} "
                    f"({time.perf_counter() - started:.0f} s incl. warm-up)",
                    flush=True,
                )
                results.append(result)
                if cuda:
                    torch.cuda.empty_cache()
    except InvalidArgsError as err:
        print(describe_problems(err, "benchmark setting"), file=sys.stderr)
        return 2
    except ShardError as err:
        print(f"bench: {err}", file=sys.stderr)
        return 2

    body = [
        f"### {'GPU: ' + torch.cuda.get_device_name(device) if cuda else 'CPU'}",
        "",
        *machine_lines(device),
        f'- command: `{command}` (`make bench ARGS="{shlex.join(argv)}"`)',
        f"- {warmup} warm-up + {steps} timed steps per variant (median of {REPEATS} windows), "
        "one process",
        *overhead_lines(min(r.step_time_s for r in results)),
        "",
        *table(results),
    ]
    print()
    print("\n".join(body))
    if args.record:
        record(Path(args.record), machine_key(device), body)
        print(f"\nbench: recorded in {args.record}")
    else:
        print("\nbench: add --record to write these figures into BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
