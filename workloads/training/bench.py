"""Benchmark: tokens/s, step time, TFLOP/s and MFU of the presets this machine can run,
and the speedup of the full fast path over fp32 eager with every optimisation off.

Both variants train the same model (same seed, same data) in the same process, one
after the other, as a single process (no data parallelism), so the ratio measures
the switches alone:

- ``baseline``: fp32, no TF32, eager (no compile), explicit masked-softmax attention,
  unpadded vocabulary, the default (unfused) AdamW, pageable host memory;
- ``fast``: bf16 autocast where the device supports it, TF32, ``torch.compile``,
  SDPA (the flash kernel on CUDA), vocabulary padded to 64, fused AdamW, and on
  CUDA pinned memory with non-blocking copies, the chunked LM-head loss and the
  prefetching loader.

With ``--ablate`` it also measures ``fast`` with each switch turned off in turn,
``fast`` with activation checkpointing (its memory and speed cost), the DeepSpeed
engine at ZeRO stages 2 and 3 with the fast path's other switches (eager: the
DeepSpeed engine is not compiled; where deepspeed is not installed they are listed
as not measured), ``fast`` with float8 matmuls (torchao, tensorwise and rowwise
scaling; only on GPUs with float8 tensor cores, listed as not measured elsewhere) and,
on CUDA, ``fast`` with the ``reduce-overhead`` (CUDA graphs) and ``max-autotune``
compile modes. ``--variants`` measures only the named ones.
Every variant runs at the preset's micro-batch and gradient accumulation (GPT-2
124M: 32 sequences x 16 micro-steps = 0.5M tokens per optimizer step), so the
optimizer step and gradient clipping weigh as they do in training;
a variant that runs out of GPU memory at that shape is measured at half the
micro-batch and twice the accumulation (the same tokens per step), and the table
says so. On a CUDA machine the default is GPT-2 124M at sequence length 1024; on a
CPU the ``tiny`` and ``small`` presets. ``--record`` writes the results, the
machine, the versions and the exact command into ``BENCHMARKS.md`` (replacing this
machine's previous section).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import importlib.util
import os
import platform
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from modules.validation import InvalidArgsError
from workloads.data.byte_tokenizer import ensure_shards
from workloads.data.shards import ShardError, ShardLoader
from workloads.training import compat, float8
from workloads.training.config import TrainConfig, describe_problems, override, preset
from workloads.training.distributed import Topology
from workloads.training.engine import (
    DeviceBatches,
    apply_backend_flags,
    cpu_supports_bf16,
    resolve,
)
from workloads.training.engines import setup
from workloads.training.metrics import ThroughputWindow, format_mfu, peak_bf16_tflops
from workloads.training.model import flops_per_token
from workloads.training.telemetry import NvmlUnavailableError, nvml_session
from workloads.training.tracking_overhead import overhead_lines

BASELINE: dict[str, str] = {
    "dtype": "fp32",
    "tf32": "off",
    "compile": "off",
    "fused_adamw": "off",
    "sdpa": "off",
    "pad_vocab": "off",
    "pin_memory": "off",
    "no_sync_accum": "off",
    "chunked_loss": "off",
    "prefetch": "off",
    "compile_mode": "default",
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
    "chunked_loss": "off",
    "prefetch": "off",
}
#: Variants ``--ablate`` adds on top of ``fast`` on every device.
ADDITIONS: dict[str, dict[str, str]] = {
    "fast+activation_checkpointing": {"activation_checkpointing": "on"},
}
#: The DeepSpeed engine's variants ``--ablate`` adds: ``fast`` on DeepSpeed's ZeRO
#: (eager; bf16 where ``fast`` has it, as DeepSpeed's bf16 weights).
DEEPSPEED_VARIANTS: dict[str, dict[str, str]] = {
    "deepspeed-zero2": {"engine": "deepspeed", "zero_stage": "2", "compile": "off"},
    "deepspeed-zero3": {"engine": "deepspeed", "zero_stage": "3", "compile": "off"},
}
#: Float8 training (torchao) ``--ablate`` adds to ``fast``: each scaling recipe. Where
#: the device has no float8 tensor cores (or torchao is missing) they are listed as
#: not measured, with why.
FLOAT8_VARIANTS: dict[str, dict[str, str]] = {
    "fast+float8-tensorwise": {"float8": "tensorwise"},
    "fast+float8-rowwise": {"float8": "rowwise"},
}
#: Compile modes ``--ablate`` adds to ``fast`` on CUDA (CUDA graphs, autotuning),
#: slowest to compile last.
CUDA_COMPILE_MODES = ("reduce-overhead", "max-autotune")
CPU_PRESETS = ("tiny", "small")
GPU_PRESETS = ("gpt2-124m",)
BENCHMARKS_FILE = Path("BENCHMARKS.md")
#: Timed windows per variant; the median is reported.
REPEATS = 3


def fast_overrides(device: torch.device, bf16: bool | None = None) -> dict[str, str]:
    """Every speed switch on (bf16 only where the device has it; the CUDA-only
    switches only on CUDA)."""
    cuda = device.type == "cuda"
    if bf16 is None:
        bf16 = torch.cuda.is_bf16_supported() if cuda else cpu_supports_bf16()
    return {
        "dtype": "bf16" if bf16 else "fp32",
        "tf32": "on",
        "compile": "on",
        "fused_adamw": "on",
        "sdpa": "on",
        "pad_vocab": "on",
        "pin_memory": "on" if cuda else "off",
        "no_sync_accum": "on",
        "chunked_loss": "on" if cuda else "off",
        "prefetch": "on" if cuda else "off",
        "compile_mode": "default",
    }


def deepspeed_installed() -> bool:
    return importlib.util.find_spec("deepspeed") is not None


def drop_float8_if_unavailable(
    planned: Sequence[tuple[str, dict[str, str]]], device: torch.device, skipped: list[str]
) -> list[tuple[str, dict[str, str]]]:
    """``planned`` less the float8 variants where float8 cannot run on ``device``
    (each added to ``skipped`` with why)."""
    names = [name for name, _ in planned if name in FLOAT8_VARIANTS]
    problem = float8.unavailable(device) if names else None
    if problem is None:
        return list(planned)
    skipped += [f"{name}: not run ({problem})" for name in names]
    return [(name, switches) for name, switches in planned if name not in names]


def variants(fast: dict[str, str], ablate: bool, cuda: bool) -> list[tuple[str, dict[str, str]]]:
    """``(name, switches)`` of every variant to measure, in order: the baseline, the
    fast path, then (``ablate``) fast minus each switch it turns on, fast with
    activation checkpointing, the DeepSpeed engine's ZeRO-2 and ZeRO-3, fast with each
    float8 recipe and, on CUDA, fast with each extra compile mode."""
    planned: list[tuple[str, dict[str, str]]] = [("baseline", BASELINE), ("fast", fast)]
    if ablate:
        planned += [
            (f"fast-{switch}", fast | {switch: off})
            for switch, off in ABLATIONS.items()
            if fast.get(switch) != off
        ]
        planned += [(name, fast | extra) for name, extra in ADDITIONS.items()]
        planned += [(name, fast | extra) for name, extra in DEEPSPEED_VARIANTS.items()]
        planned += [(name, fast | extra) for name, extra in FLOAT8_VARIANTS.items()]
        if cuda:
            planned += [
                (f"fast+{mode}", fast | {"compile_mode": mode}) for mode in CUDA_COMPILE_MODES
            ]
    return planned


@dataclass(frozen=True)
class Shape:
    """Sequences per micro-step and micro-steps per optimizer step."""

    micro_batch: int
    accum: int

    def __str__(self) -> str:
        return f"{self.micro_batch}x{self.accum}"

    def halved(self) -> Shape | None:
        """Half the micro-batch, twice the accumulation: the same tokens per step."""
        if self.micro_batch < 2 or self.micro_batch % 2:
            return None
        return Shape(self.micro_batch // 2, self.accum * 2)


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
    shape: str = ""
    peak_memory_gib: float | None = None
    #: Host CPU time (every thread of the process) per optimizer step: on a CPU run,
    #: the compute a step costs even when other work shares the machine's cores.
    cpu_s_per_step: float | None = None


_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak_rss() -> bool:
    """Reset this process's peak resident set size (Linux: ``5`` into
    ``/proc/self/clear_refs`` sets VmHWM to the current RSS); whether it worked."""
    try:
        _CLEAR_REFS.write_text("5", encoding="ascii")
    except OSError:
        return False
    return peak_rss_gib() is not None


def peak_rss_gib() -> float | None:
    """This process's peak resident set size since the last reset (VmHWM), in GiB."""
    try:
        for line in _STATUS.read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def run_variant(
    config: TrainConfig, variant: str, device: torch.device, warmup: int, steps: int
) -> Result:
    """Train ``warmup`` untimed steps (compilation happens here), then ``steps`` timed.

    Peak memory: on CUDA the most memory the allocator held for tensors; on a CPU the
    process's peak resident set size (reset before the variant is set up, so it covers
    the model, optimizer and the largest step, plus the Python process itself)."""
    gc.collect()
    rss_reset = device.type == "cpu" and reset_peak_rss()
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
    training = setup(config, resolved, Topology())
    params = training.num_params
    batches = DeviceBatches(loader, resolved)
    tokens_per_step = config.tokens_per_micro_step * config.grad_accum_steps
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
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
        loss = training.step(batches, config, step).loss
    sync()
    # The timed steps run in REPEATS windows and the median window is reported, so a
    # burst of other work on a shared machine does not decide the figure.
    windows = []
    per_window = max(1, steps // REPEATS)
    cpu_times = []
    for _ in range(REPEATS):
        window.reset()
        cpu_started = time.process_time()
        for _ in range(per_window):
            step += 1
            result = training.step(batches, config, step)
            window.add_step(result.data_wait_s)
            loss = result.loss
        final_loss = float(loss.item())  # synchronises the device
        sync()
        windows.append(window.stats())
        cpu_times.append((time.process_time() - cpu_started) / per_window)
    batches.close()
    training.close()
    stats = sorted(windows, key=lambda w: w.tokens_per_s)[len(windows) // 2]
    peak = (
        torch.cuda.max_memory_allocated(device) / 2**30
        if device.type == "cuda"
        else (peak_rss_gib() if rss_reset else None)
    )
    return Result(
        preset=config.preset,
        variant=variant,
        switches=resolved.describe()
        + (f", engine {resolved.strategy}" if resolved.engine != "torch" else ""),
        params_m=params / 1e6,
        tokens_per_step=tokens_per_step,
        step_time_s=stats.step_time_s,
        tokens_per_s=stats.tokens_per_s,
        tflops=stats.tflops,
        mfu=stats.mfu,
        data_wait_ratio=stats.data_wait_ratio,
        final_loss=final_loss,
        shape=str(Shape(config.micro_batch_size, config.grad_accum_steps)),
        peak_memory_gib=peak,
        cpu_s_per_step=sorted(cpu_times)[len(cpu_times) // 2],
    )


@dataclass
class Measured:
    """The results of a series of variants, and those left out (with why)."""

    results: list[Result] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: Variants that raised an error other than running out of GPU memory (with it).
    failed: list[str] = field(default_factory=list)


def _out_of_memory(err: BaseException) -> bool:
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(err, oom)) or "out of memory" in str(err)


def measure_preset(
    base: TrainConfig,
    planned: Sequence[tuple[str, dict[str, str]]],
    *,
    device: torch.device,
    shape: Shape,
    warmup: int,
    steps: int,
    extra: dict[str, str] | None = None,
    deadline: float | None = None,
    report: Callable[[str], None] = print,
    into: Measured | None = None,
    keep_going: bool = False,
) -> Measured:
    """Measure each planned variant of ``base`` at ``shape``.

    A variant out of GPU memory is measured again at `Shape.halved`. With a
    ``deadline`` (a ``time.monotonic()`` value), a variant is not started when the
    slowest one so far would not finish before it; it is listed in ``skipped``.
    Results are added to ``into`` as they come (an interrupted series keeps them).
    With ``keep_going``, a variant that fails with another error is listed in
    ``failed`` and the series goes on.
    """
    measured = into if into is not None else Measured()
    slowest = 0.0
    for variant, switches in planned:
        if deadline is not None and time.monotonic() + slowest > deadline:
            measured.skipped.append(f"{base.preset} {variant}: not run (time budget)")
            continue
        started = time.monotonic()
        current: Shape | None = shape
        while current is not None:
            common = {
                "metrics_port": "0",
                "micro_batch_size": str(current.micro_batch),
                "grad_accum_steps": str(current.accum),
                "steps": str(warmup + steps),
            }
            config = override(base, common | (extra or {}) | switches)
            # Each variant compiles afresh: graphs of an earlier one are not reused and
            # do not count against the recompilation limit.
            compat.compiler_reset()
            result: Result | None = None
            try:
                result = run_variant(config, variant, device, warmup, steps)
            except RuntimeError as err:
                if device.type != "cuda" or not _out_of_memory(err):
                    if not keep_going:
                        raise
                    # One broken variant (a compile mode that fails on this torch,
                    # say) must not cost the figures of the others: it is listed as
                    # failed, with its error, and the caller fails the run.
                    first_line = (str(err).strip().splitlines() or [""])[0][:300]
                    measured.failed.append(
                        f"{base.preset} {variant}: failed: {type(err).__name__}: {first_line}"
                    )
                    report(f"bench: {measured.failed[-1]}")
                    gc.collect()
                    torch.cuda.empty_cache()
                    break
            if result is None:
                # Out of memory. Outside the except block the traceback, and the
                # failed run's tensors its frames hold, are gone: free them now.
                gc.collect()
                torch.cuda.empty_cache()
                smaller = current.halved()
                report(
                    f"bench: {base.preset} {variant}: out of GPU memory at {current}"
                    + (f"; again at {smaller}" if smaller else "; not measured")
                )
                if smaller is None:
                    measured.skipped.append(
                        f"{base.preset} {variant}: out of GPU memory at {current}"
                    )
                current = smaller
                continue
            report(
                f"bench: {base.preset} {variant} ({current}): {result.tokens_per_s:,.0f} tok/s, "
                f"{result.step_time_s * 1000:.1f} ms/step, MFU {format_mfu(result.mfu)} "
                f"({time.monotonic() - started:.0f} s incl. warm-up)"
            )
            measured.results.append(result)
            break
        if device.type == "cuda":
            torch.cuda.empty_cache()
        slowest = max(slowest, time.monotonic() - started)
    return measured


def table(results: Sequence[Result]) -> list[str]:
    """Markdown table of the results with each variant's speedup over the baseline."""
    baselines = {r.preset: r for r in results if r.variant == "baseline"}
    lines = [
        "| preset | variant | params | micro-batch x accum | tokens/step | step time | tokens/s "
        "| TFLOP/s | MFU | peak memory | host CPU time/step | data wait | speedup vs baseline |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        base = baselines.get(r.preset)
        speedup = f"{r.tokens_per_s / base.tokens_per_s:.2f}x" if base else "-"
        memory = f"{r.peak_memory_gib:.2f} GiB" if r.peak_memory_gib is not None else "-"
        cpu = f"{r.cpu_s_per_step * 1000:.0f} ms" if r.cpu_s_per_step is not None else "-"
        lines.append(
            f"| {r.preset} | {r.variant} | {r.params_m:.2f}M | {r.shape or '-'} | "
            f"{r.tokens_per_step} | {r.step_time_s * 1000:.1f} ms | {r.tokens_per_s:,.0f} | "
            f"{r.tflops:.3f} | {format_mfu(r.mfu)} | {memory} | {cpu} | "
            f"{100 * r.data_wait_ratio:.1f}% | {speedup} |"
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


def driver_version() -> str:
    """The NVIDIA driver's version from NVML, or why it is unknown."""
    try:
        with nvml_session() as nvml:
            raw = nvml.nvmlSystemGetDriverVersion()
    except NvmlUnavailableError as err:
        return f"unknown ({err})"
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def machine_lines(device: torch.device) -> list[str]:
    lines = [
        f"- machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPU(s), "
        f"{_cpu_model()}",
    ]
    if device.type == "cuda":
        lines.append(
            f"- GPU: {torch.cuda.device_count()} x {torch.cuda.get_device_name(device)}, "
            f"driver {driver_version()}, CUDA {torch.version.cuda}"
        )
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


def _int_arg(value: int | None, default: int) -> int:
    return default if value is None else value


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m workloads.training.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--presets", help="comma-separated (default: gpt2-124m on CUDA, tiny,small on CPU)"
    )
    parser.add_argument(
        "--steps",
        type=int,
        help="timed optimizer steps per variant (default 6 on CUDA, 90 on CPU)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        help="untimed steps first, compilation included (default 2 on CUDA, 3 on CPU)",
    )
    parser.add_argument("--micro-batch-size", type=int, help="override the preset's")
    parser.add_argument("--grad-accum-steps", type=int, help="override the preset's")
    parser.add_argument(
        "--ablate",
        action="store_true",
        help="also fast minus each switch (and, on CUDA, fast with each extra compile mode)",
    )
    parser.add_argument(
        "--variants",
        help="comma-separated: measure only these (names as --ablate lists them)",
    )
    parser.add_argument(
        "--section",
        help="record under this machine's section NAME (cpu-NAME, ...) instead of its main one",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        help="start no variant that would not finish within this many seconds",
    )
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
    # On CUDA one optimizer step of GPT-2 124M is 0.5M tokens: a few are enough.
    steps = _int_arg(args.steps, 6 if cuda else 90)
    warmup = _int_arg(args.warmup, 2 if cuda else 3)
    command = shlex.join(["python", "-m", "workloads.training.bench", *argv])
    if steps < 1 or warmup < 0 or (args.budget_s is not None and args.budget_s <= 0):
        print("bench: --steps must be >= 1, --warmup >= 0 and --budget-s > 0", file=sys.stderr)
        return 2
    if args.section is not None and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,40}", args.section):
        print("bench: --section: lower-case letters, digits and dashes", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.budget_s if args.budget_s else None

    measured = Measured()
    fast = fast_overrides(device)
    planned = variants(fast, args.ablate or bool(args.variants), cuda)
    if args.variants:
        wanted = [v.strip() for v in args.variants.split(",") if v.strip()]
        known = [name for name, _ in planned]
        unknown = [v for v in wanted if v not in known]
        if unknown:
            print(
                f"bench: --variants: unknown {', '.join(unknown)}; one of {', '.join(known)}",
                file=sys.stderr,
            )
            return 2
        planned = [(name, switches) for name, switches in planned if name in wanted]
    if not deepspeed_installed():
        left_out = [name for name, _ in planned if name in DEEPSPEED_VARIANTS]
        planned = [(name, switches) for name, switches in planned if name not in left_out]
        measured.skipped += [
            f"{variant}: not run (the deepspeed package is not installed here)"
            for variant in left_out
        ]
    planned = drop_float8_if_unavailable(planned, device, measured.skipped)
    try:
        for name in names:
            base = preset(name.strip())
            shape = Shape(
                args.micro_batch_size or base.micro_batch_size,
                args.grad_accum_steps or base.grad_accum_steps,
            )
            done = measure_preset(
                base,
                planned,
                device=device,
                shape=shape,
                warmup=warmup,
                steps=steps,
                deadline=deadline,
                report=lambda line: print(line, flush=True),
            )
            measured.results += done.results
            measured.skipped += done.skipped
    except InvalidArgsError as err:
        print(describe_problems(err, "benchmark setting"), file=sys.stderr)
        return 2
    except ShardError as err:
        print(f"bench: {err}", file=sys.stderr)
        return 2

    body = section(
        device, measured=measured, warmup=warmup, steps=steps, command=command, argv=argv
    )
    print()
    print("\n".join(body))
    if args.record:
        key = machine_key(device) + (f"-{args.section}" if args.section else "")
        record(Path(args.record), key, body)
        print(f"\nbench: recorded in {args.record}")
    else:
        print("\nbench: add --record to write these figures into BENCHMARKS.md")
    return 0


def section(
    device: torch.device,
    *,
    measured: Measured,
    warmup: int,
    steps: int,
    command: str,
    argv: Sequence[str],
) -> list[str]:
    """The BENCHMARKS.md section of one benchmark run."""
    cuda = device.type == "cuda"
    return [
        f"### {'GPU: ' + torch.cuda.get_device_name(device) if cuda else 'CPU'}",
        "",
        *machine_lines(device),
        f'- command: `{command}` (`make bench ARGS="{shlex.join(argv)}"`)',
        f"- {warmup} warm-up + {steps} timed steps per variant (median of {REPEATS} windows), "
        "one process",
        "- peak memory: "
        + (
            "the most GPU memory the allocator held for tensors (torch.cuda.max_memory_allocated)"
            if cuda
            else "the process's peak resident set size (VmHWM, reset before each variant)"
        ),
        *(overhead_lines(min(r.step_time_s for r in measured.results)) if measured.results else []),
        "",
        *table(measured.results),
        *(
            [""] + ["Not measured:"] + [f"- {s}" for s in measured.skipped]
            if measured.skipped
            else []
        ),
    ]


if __name__ == "__main__":
    sys.exit(main())
