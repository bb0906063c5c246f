"""One command that checks and measures the training workloads on a real NVIDIA GPU.

``python -m workloads.training.gpu_check`` (``make gpu-check``) runs, in this process and the
few it starts, within a time limit (default 10 minutes):

1. environment: torch, CUDA, the GPUs, which version-dependent torch APIs are in use
   (`workloads.training.compat`), and the modules taken from carried wheels;
2. health: the preflight check (`workloads.training.health`) against the real NVML, printing
   what it read (ECC, remapped rows, clocks, throttle reasons, NVLink);
3. fwd/bwd: one forward/backward of GPT-2 124M in the fast path against the fp32
   eager path on the same weights and batch, within bf16 tolerance (and the flash
   attention kernel, called directly);
4. train/resume: a short GPT-2 124M training run whose loss must fall, checkpointed
   half-way; the second half run again from the checkpoint must give the same
   losses (within GPU atomics' nondeterminism);
5. engines: the same short GPT-2 124M run on the torch engine's fast path, with
   activation checkpointing, and on the DeepSpeed engine at ZeRO-2 and at ZeRO-3 with
   activation checkpointing (bf16): each one's losses must fall and stay within bf16
   tolerance of the torch fast path's; the ZeRO-3 run is checkpointed half-way and
   its second half re-run from the checkpoint must match (needs deepspeed installed:
   without it this check fails and says what to install);
6. float8: the same short run with float8 matmuls (torchao, tensorwise and rowwise
   scaling) against the bf16 fast path, each step's loss within `FLOAT8_LOSS_RTOL`
   (on a GPU without float8 tensor cores it says so and runs nothing);
7. NCCL: one GPU: a single-rank process group through NCCL all-reduces and checks a
   buffer; several: `workloads.fabric_check` under torchrun (bus bandwidth);
8. bench: `workloads.training.bench` for GPT-2 124M at sequence length 1024 at the preset's
   micro-batch and accumulation: ``baseline``, ``fast`` and every ``--ablate``
   variant (activation checkpointing, DeepSpeed ZeRO-2/3 and float8 among them; tokens/s,
   step time, MFU, peak memory, data wait), as many as the time limit leaves room for
   (those left out are listed, not hidden).

It writes the machine's BENCHMARKS.md section to ``build/gpu-check/<machine>.md``
and, with ``--record``, into BENCHMARKS.md between its markers. Nothing is installed:
it needs only torch and this repository; pure-Python wheels (nvidia-ml-py,
prometheus-client) found in ``build/gpu-wheels/`` (``make gpu-wheels`` downloads
them on a machine with an index) are imported from there when not installed.

Without a CUDA GPU it says so and runs nothing (exit 3); ``--dry-run`` prints and
validates the plan of work (configs, shapes, parameter count) on any machine.

Exit status: 0 every check passed, 1 a check failed (or the time limit ran out), 2
bad arguments, 3 no CUDA GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import torch

from workloads.training import compat

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_GPU = 3

PRESET = "gpt2-124m"
#: Carried pure-Python wheels: (importable module, wheel name prefix).
CARRIED = (
    ("pynvml", "nvidia_ml_py"),
    ("prometheus_client", "prometheus_client"),
    # torchao's float8 training is Python over torch's own float8 matmul; its compiled
    # kernels (not needed for it) do not load from a wheel on the path, and need not.
    ("torchao", "torchao"),
)
DEFAULT_WHEEL_DIR = Path("build/gpu-wheels")
DEFAULT_OUT_DIR = Path("build/gpu-check")
DEFAULT_TIMEOUT_S = 600
#: Held back from the time limit for the report and the clean-up.
MARGIN_S = 20
#: fwd/bwd tolerances: bf16 keeps 8 bits of mantissa (relative rounding ~4e-3 per
#: operation); through 12 layers the loss agrees to ~1e-3 and the gradients to a few
#: percent of their norm (all together; one small tensor, such as a bias, may be
#: further off). A wrong kernel or a dropped term is off by far more.
LOSS_RTOL = 2e-2
GRAD_RTOL = 0.05
GRAD_TENSOR_RTOL = 0.2
#: train/resume: the shape of the short run.
TRAIN_STEPS = 16
TRAIN_MICRO_BATCH = 8
TRAIN_ACCUM = 2
#: Resumed losses may differ from the first run's by GPU atomics (embedding and
#: attention backward); a real resume bug differs by far more.
RESUME_ATOL = 2e-2
FWD_BWD_MICRO_BATCH = 8
#: engines: steps of each run, and how far (relative) each step's loss may be from
#: the torch fast path's. DeepSpeed's bf16 mode holds the weights in bf16 where the
#: torch engine autocasts fp32 weights, so the curves differ by bf16 rounding, which
#: over 8 steps stays within a few tenths of a percent of a ~10 loss; a missing
#: gradient reduction or a wrong learning rate is off by far more. Not yet run on a
#: GPU: the first `make gpu-check` on one tells whether this bound is right.
ENGINE_STEPS = 8
ENGINE_LOSS_RTOL = 2e-2
#: The engine runs: (name, overrides of the fast path).
ENGINE_RUNS: tuple[tuple[str, dict[str, str]], ...] = (
    ("torch fast", {}),
    ("torch fast + activation checkpointing", {"activation_checkpointing": "on"}),
    ("deepspeed zero-2", {"engine": "deepspeed", "zero_stage": "2", "compile": "off"}),
    (
        "deepspeed zero-3 + activation checkpointing",
        {
            "engine": "deepspeed",
            "zero_stage": "3",
            "compile": "off",
            "activation_checkpointing": "on",
        },
    ),
)
#: Float8 against bf16: the same short run as the engines', each step's loss within this
#: (relative) of the bf16 fast path's. Float8 (e4m3: 3 mantissa bits) rounds each matmul
#: input to ~6%, but dynamic scaling and higher-precision accumulation keep the loss
#: curves of published float8 GPT runs within about 1% of bf16; a wrong scale or a
#: dropped gradient is off by far more. Not yet run on a GPU: the first `make gpu-check`
#: on an H100 or H200 tells whether this bound is right.
FLOAT8_LOSS_RTOL = 3e-2
FLOAT8_RUNS: tuple[tuple[str, dict[str, str]], ...] = (
    ("torch fast (bf16)", {}),
    ("torch fast + float8 tensorwise", {"float8": "tensorwise"}),
    ("torch fast + float8 rowwise", {"float8": "rowwise"}),
)
#: The engine run that is also checkpointed and resumed.
ENGINE_RESUMED = "deepspeed zero-3 + activation checkpointing"
BENCH_WARMUP = 1
BENCH_STEPS = 3
#: The benchmark is not started with less of the time limit left (the fp32 baseline
#: alone takes minutes at 0.5M tokens per step).
MIN_BENCH_S = 150
#: Variants the benchmark has but gpu-check leaves to `make bench ARGS=--ablate`, and why.
LEFT_TO_MAKE_BENCH = {
    "fast+max-autotune": (
        "left to `make bench ARGS=--ablate`: its autotuning alone ran past 5 minutes on "
        "an H100 (2026-11-25), more than gpu-check's time limit leaves"
    ),
}


class TimeLimitError(Exception):
    """The overall time limit ran out."""


@dataclass
class Phase:
    """One check's outcome and what it printed."""

    name: str
    ok: bool = True
    lines: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.lines.append(line)
        print(f"[{self.name}] {line}", flush=True)

    def fail(self, line: str) -> None:
        self.ok = False
        self.say(f"FAILED: {line}")


@dataclass(frozen=True)
class PlannedStep:
    """One unit of planned work (shown by ``--dry-run``)."""

    phase: str
    name: str
    detail: str


# --- carried wheels -------------------------------------------------------------------


def add_carried_wheels(wheel_dir: Path) -> list[str]:
    """Put the carried wheel of each missing `CARRIED` module on ``sys.path`` (a pure-
    Python wheel is a zip that Python imports from directly); returns what was added."""
    added = []
    for module, prefix in CARRIED:
        if importlib.util.find_spec(module) is not None:
            continue
        wheels = sorted(wheel_dir.glob(f"{prefix}-*.whl"))
        if wheels:
            sys.path.insert(0, str(wheels[-1]))
            importlib.invalidate_caches()
            added.append(f"{module} from {wheels[-1]}")
    return added


def missing_modules() -> list[str]:
    return [module for module, _ in CARRIED if importlib.util.find_spec(module) is None]


# --- the plan -------------------------------------------------------------------------


def plan(gpus: int) -> list[PlannedStep]:
    """Every step a run on a machine with ``gpus`` CUDA GPUs takes, with its shapes.
    Builds and validates every config it names (an invalid one raises
    `modules.validation.InvalidArgsError`), so the dry run checks them."""
    from workloads.training import bench  # noqa: PLC0415 - after the carried wheels are on the path
    from workloads.training.config import override, preset  # noqa: PLC0415

    base = preset(PRESET)
    model = base.model
    shape = f"GPT-2 124M ({model.n_layer} layers, {model.n_embd} wide, seq {base.seq_len})"
    steps = [
        PlannedStep("environment", "versions", "torch, CUDA, GPUs, compat paths, carried wheels"),
        PlannedStep("health", "nvml", f"expect {gpus} GPU(s): ECC, remapped rows, throttling"),
        PlannedStep(
            "fwd-bwd",
            "fast vs fp32 eager",
            f"{shape}, micro-batch {FWD_BWD_MICRO_BATCH}; loss rtol {LOSS_RTOL}, "
            f"grad rtol {GRAD_RTOL} (each tensor {GRAD_TENSOR_RTOL})",
        ),
        PlannedStep(
            "train-resume",
            "loss falls, resume",
            f"{shape}, {TRAIN_MICRO_BATCH}x{TRAIN_ACCUM}, {TRAIN_STEPS} steps, checkpoint at "
            f"{TRAIN_STEPS // 2}, resume atol {RESUME_ATOL}",
        ),
        *(
            PlannedStep(
                "engines",
                name,
                f"{shape}, {TRAIN_MICRO_BATCH}x{TRAIN_ACCUM}, {ENGINE_STEPS} steps, "
                + (
                    "the reference"
                    if name == ENGINE_RUNS[0][0]
                    else f"losses within {ENGINE_LOSS_RTOL:.0%} of torch fast"
                )
                + (
                    f"; checkpoint at {ENGINE_STEPS // 2}, resume atol {RESUME_ATOL}"
                    if name == ENGINE_RESUMED
                    else ""
                ),
            )
            for name, _ in ENGINE_RUNS
        ),
        *(
            PlannedStep(
                "float8",
                name,
                f"{shape}, {TRAIN_MICRO_BATCH}x{TRAIN_ACCUM}, {ENGINE_STEPS} steps, "
                + (
                    "the reference"
                    if name == FLOAT8_RUNS[0][0]
                    else f"losses within {FLOAT8_LOSS_RTOL:.0%} of bf16"
                ),
            )
            for name, _ in FLOAT8_RUNS
        ),
        PlannedStep(
            "nccl",
            "single-rank" if gpus < 2 else "fabric_check",
            "one-rank NCCL process group all-reduce"
            if gpus < 2
            else f"torchrun {gpus} ranks, all-reduce bus bandwidth",
        ),
    ]
    fast = bench.fast_overrides(torch.device("cuda"), bf16=True)
    for _, extra in (*ENGINE_RUNS, *FLOAT8_RUNS):
        override(base, fast | extra | {"metrics_port": "0"})  # valid, or it raises
    for variant, switches in bench_variants(fast):
        config = override(
            base,
            switches | {"metrics_port": "0", "steps": str(BENCH_WARMUP + BENCH_STEPS)},
        )
        steps.append(
            PlannedStep(
                "bench",
                variant,
                f"{shape}, {config.micro_batch_size}x{config.grad_accum_steps} "
                f"({config.tokens_per_micro_step * config.grad_accum_steps} tokens/step), "
                f"{BENCH_WARMUP} warm-up + {BENCH_STEPS} timed steps",
            )
        )
    return steps


def dry_run(gpus: int) -> int:
    from workloads.training.config import preset  # noqa: PLC0415
    from workloads.training.model import GPT, flops_per_token  # noqa: PLC0415

    steps = plan(gpus)
    config = preset(PRESET)
    with torch.device("meta"):  # shapes only: no memory, no device
        params = GPT(config.model).num_parameters()
    print(f"gpu_check dry run: {len(steps)} steps for {gpus} GPU(s)")
    for step in steps:
        print(f"  {step.phase:<13} {step.name:<24} {step.detail}")
    print(
        f"gpu_check: {PRESET}: {params / 1e6:.1f}M parameters, "
        f"{flops_per_token(config.model, params, config.seq_len) / 1e9:.3f} GFLOP/token"
    )
    return EXIT_OK


# --- phases ---------------------------------------------------------------------------


def environment(phase: Phase, added: Sequence[str]) -> None:
    phase.say(
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, Python {sys.version.split()[0]}"
    )
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        phase.say(
            f"cuda:{index} {props.name}, {props.total_memory / 2**30:.0f} GiB, "
            f"sm_{props.major}{props.minor}, bf16 {torch.cuda.is_bf16_supported()}"
        )
    for line in compat.describe():
        phase.say(f"compat: {line}")
    for line in added:
        phase.say(f"carried wheel: {line}")
    for module in missing_modules():
        phase.say(
            f"{module} is neither installed nor carried (run `make gpu-wheels` where an "
            f"index is reachable and bring {DEFAULT_WHEEL_DIR}/ along)"
        )


def health(phase: Phase) -> None:
    from workloads.training import health as health_check  # noqa: PLC0415

    status, lines = health_check.check(torch.cuda.device_count(), expect_nvlink=False)
    for line in lines:
        phase.say(line)
    if status != health_check.EXIT_HEALTHY:
        phase.fail("the preflight health check did not pass")


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


def fwd_bwd(phase: Phase, data_dir: Path) -> None:
    """The fast path's loss and gradients against fp32 eager, same weights and batch."""
    from workloads.data.byte_tokenizer import ensure_shards  # noqa: PLC0415
    from workloads.data.shards import ShardLoader  # noqa: PLC0415
    from workloads.training import bench  # noqa: PLC0415
    from workloads.training.config import override, preset  # noqa: PLC0415
    from workloads.training.distributed import Topology  # noqa: PLC0415
    from workloads.training.engine import (  # noqa: PLC0415
        apply_backend_flags,
        build_model,
        parallelize,
        resolve,
    )

    device = torch.device("cuda", 0)
    with compat.sdpa_kernel(["flash"]):
        q = torch.randn(2, 12, 1024, 64, device=device, dtype=torch.bfloat16)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    phase.say("flash attention kernel: ran (bf16, causal, 1024 x 64)")

    common = {
        "data_dir": str(data_dir),
        "metrics_port": "0",
        "micro_batch_size": str(FWD_BWD_MICRO_BATCH),
        # Same parameter shapes on both sides, so gradients compare one to one.
        "pad_vocab": "on",
    }
    base = preset(PRESET)
    reference_config = override(base, bench.BASELINE | common)
    fast_config = override(base, bench.fast_overrides(device) | common)
    files = ensure_shards(data_dir, Path(base.corpus))
    loader = ShardLoader(
        files,
        batch=FWD_BWD_MICRO_BATCH,
        seq_len=base.seq_len,
        rank=0,
        world_size=1,
        vocab_size=base.model.padded_vocab_size(),
    )
    inputs, targets = (t.to(device) for t in loader.next_batch())
    outcome = {}
    for name, config in (("fp32 eager", reference_config), ("fast", fast_config)):
        compat.compiler_reset()
        resolved = resolve(config, device)
        apply_backend_flags(resolved)
        model = parallelize(build_model(config, resolved), resolved, Topology())
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=resolved.amp_dtype is not None):
            loss = model(inputs, targets)
        loss.backward()
        grads = {
            n: p.grad.detach().float().clone()
            for n, p in model.named_parameters()
            if p.grad is not None
        }
        outcome[name] = (float(loss.item()), grads)
        phase.say(f"{name}: {resolved.describe()}; loss {loss.item():.5f}")
        del model, loss
        torch.cuda.empty_cache()
    ref_loss, ref_grads = outcome["fp32 eager"]
    fast_loss, fast_grads = outcome["fast"]
    if set(ref_grads) != set(fast_grads):
        phase.fail(
            f"different parameters got gradients: {sorted(set(ref_grads) ^ set(fast_grads))}"
        )
        return
    loss_error = abs(fast_loss - ref_loss) / abs(ref_loss)
    names = sorted(ref_grads)
    overall = _relative_error(
        torch.cat([fast_grads[n].flatten() for n in names]),
        torch.cat([ref_grads[n].flatten() for n in names]),
    )
    worst_name, worst = max(
        ((n, _relative_error(fast_grads[n], ref_grads[n])) for n in names), key=lambda x: x[1]
    )
    phase.say(
        f"loss relative difference {loss_error:.2e} (limit {LOSS_RTOL}); all gradients: "
        f"{overall:.2e} (limit {GRAD_RTOL}); worst tensor {worst_name}: {worst:.2e} "
        f"(limit {GRAD_TENSOR_RTOL})"
    )
    if loss_error > LOSS_RTOL:
        phase.fail("the fast path's loss differs from fp32 eager beyond bf16 tolerance")
    if overall > GRAD_RTOL or worst > GRAD_TENSOR_RTOL:
        phase.fail("the fast path's gradients differ from fp32 eager beyond bf16 tolerance")
    apply_backend_flags(resolve(fast_config, device))


def train_resume(phase: Phase, data_dir: Path, work: Path) -> None:
    """A short run's loss falls; its second half re-run from the checkpoint matches."""
    from workloads.training import train  # noqa: PLC0415
    from workloads.training.config import override, preset  # noqa: PLC0415
    from workloads.training.distributed import Topology  # noqa: PLC0415

    ckpt, log = work / "ckpt", work / "train.jsonl"
    config = override(
        preset(PRESET),
        {
            "data_dir": str(data_dir),
            "metrics_port": "0",
            "micro_batch_size": str(TRAIN_MICRO_BATCH),
            "grad_accum_steps": str(TRAIN_ACCUM),
            "steps": str(TRAIN_STEPS),
            "warmup_steps": "2",
            "learning_rate": "1e-3",
            "log_every": "1",
            "ckpt_dir": str(ckpt),
            "ckpt_every": str(TRAIN_STEPS // 2),
            "log_jsonl": str(log),
        },
    )

    def losses() -> dict[int, float]:
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        return {int(r["step"]): float(r["loss"]) for r in records}

    with _sigterm_kept():
        compat.compiler_reset()
        status = train.run(config, Topology())
    if status != train.EXIT_OK:
        phase.fail(f"training exited with status {status}")
        return
    first = losses()
    phase.say(
        f"loss {first[1]:.4f} -> {first[TRAIN_STEPS]:.4f} over {TRAIN_STEPS} steps "
        f"({TRAIN_MICRO_BATCH}x{TRAIN_ACCUM} x {config.seq_len} tokens)"
    )
    if not first[TRAIN_STEPS] < first[1] - 1.0:
        phase.fail("the loss did not fall by at least 1.0")
    shutil.rmtree(ckpt / f"step_{TRAIN_STEPS:08d}", ignore_errors=True)
    log.unlink()
    with _sigterm_kept():
        compat.compiler_reset()
        status = train.run(config, Topology())
    if status != train.EXIT_OK:
        phase.fail(f"the resumed run exited with status {status}")
        return
    second = losses()
    expected = list(range(TRAIN_STEPS // 2 + 1, TRAIN_STEPS + 1))
    if sorted(second) != expected:
        phase.fail(f"the resumed run logged steps {sorted(second)}, expected {expected}")
        return
    worst = max(abs(second[s] - first[s]) for s in expected)
    phase.say(
        f"resumed at step {TRAIN_STEPS // 2}: steps {expected[0]}-{expected[-1]} differ by at "
        f"most {worst:.2e} from the uninterrupted run (limit {RESUME_ATOL})"
    )
    if worst > RESUME_ATOL:
        phase.fail("the resumed run's losses differ from the uninterrupted run's")


def engines(
    phase: Phase,
    data_dir: Path,
    work: Path,
    *,
    all_runs: Sequence[tuple[str, dict[str, str]]] = ENGINE_RUNS,
    rtol: float = ENGINE_LOSS_RTOL,
    subdir: str = "engines",
) -> None:
    """The torch fast path against activation checkpointing and DeepSpeed ZeRO-2/3:
    the same short run, losses within bf16 tolerance; the ZeRO-3 run resumes. With
    ``all_runs`` (the first is the reference) and ``rtol``: another comparison of the
    same shape (`float8_check`)."""
    from workloads.training import bench, deepspeed_engine, train  # noqa: PLC0415
    from workloads.training.config import override, preset  # noqa: PLC0415
    from workloads.training.distributed import Topology  # noqa: PLC0415

    device = torch.device("cuda", 0)
    runs = list(all_runs)
    if any(extra.get("engine") == "deepspeed" for _, extra in runs) and not (
        bench.deepspeed_installed()
    ):
        phase.fail(
            f"the deepspeed package is not installed: the DeepSpeed engine was not checked; "
            f"pip install '{deepspeed_engine.REQUIREMENT}' (the training image has it)"
        )
        runs = [(name, extra) for name, extra in runs if extra.get("engine") != "deepspeed"]
    curves: dict[str, dict[int, float]] = {}
    for name, extra in runs:
        run_dir = work / subdir / name.replace(" ", "-").replace("+", "and")
        log = run_dir / "train.jsonl"
        settings = {
            "data_dir": str(data_dir),
            "metrics_port": "0",
            "micro_batch_size": str(TRAIN_MICRO_BATCH),
            "grad_accum_steps": str(TRAIN_ACCUM),
            "steps": str(ENGINE_STEPS),
            "warmup_steps": "2",
            "learning_rate": "1e-3",
            "log_every": "1",
            "log_jsonl": str(log),
        }
        if name == ENGINE_RESUMED:
            settings |= {"ckpt_dir": str(run_dir / "ckpt"), "ckpt_every": str(ENGINE_STEPS // 2)}
        config = override(preset(PRESET), bench.fast_overrides(device) | extra | settings)
        with _sigterm_kept():
            compat.compiler_reset()
            status = train.run(config, Topology())
        if status != train.EXIT_OK:
            phase.fail(f"{name}: training exited with status {status}")
            continue
        curve = _losses(log)
        curves[name] = curve
        phase.say(
            f"{name}: loss {curve[1]:.4f} -> {curve[ENGINE_STEPS]:.4f} over {ENGINE_STEPS} steps"
        )
        if not curve[ENGINE_STEPS] < curve[1]:
            phase.fail(f"{name}: the loss did not fall")
        reference = curves.get(runs[0][0])
        if reference is not None and name != runs[0][0]:
            worst = max(abs(curve[s] - reference[s]) / abs(reference[s]) for s in reference)
            phase.say(f"{name}: at most {worst:.2e} from {runs[0][0]} (limit {rtol})")
            if worst > rtol:
                phase.fail(f"{name}: its losses differ from the torch fast path's")
        if name == ENGINE_RESUMED:
            shutil.rmtree(run_dir / "ckpt" / f"step_{ENGINE_STEPS:08d}", ignore_errors=True)
            log.unlink()
            with _sigterm_kept():
                status = train.run(config, Topology())
            resumed = _losses(log) if status == train.EXIT_OK else {}
            expected = list(range(ENGINE_STEPS // 2 + 1, ENGINE_STEPS + 1))
            if sorted(resumed) != expected:
                phase.fail(f"{name}: the resumed run logged {sorted(resumed)}, not {expected}")
                continue
            worst = max(abs(resumed[s] - curve[s]) for s in expected)
            phase.say(f"{name}: resumed at step {ENGINE_STEPS // 2}, within {worst:.2e}")
            if worst > RESUME_ATOL:
                phase.fail(f"{name}: the resumed losses differ from the first run's")


def float8_check(phase: Phase, data_dir: Path, work: Path) -> None:
    """Float8 training (torchao, each recipe) against the bf16 fast path: the same short
    run, losses within `FLOAT8_LOSS_RTOL`. Not run (and said so) on a GPU without float8
    tensor cores; a missing torchao fails the check."""
    from workloads.training import float8  # noqa: PLC0415

    device = torch.device("cuda", 0)
    problem = float8.device_problem(device)
    if problem is not None:
        phase.say(f"not run: {problem}")
        return
    try:
        float8.torchao_float8()
    except ImportError as err:
        phase.fail(f"{err} (or carry it: make gpu-wheels)")
        return
    engines(phase, data_dir, work, all_runs=FLOAT8_RUNS, rtol=FLOAT8_LOSS_RTOL, subdir="float8")


def _losses(log: Path) -> dict[int, float]:
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {int(r["step"]): float(r["loss"]) for r in records}


@contextlib.contextmanager
def _sigterm_kept() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def nccl(phase: Phase, timeout_s: float) -> None:
    """NCCL through a one-rank group, or the fabric check across every GPU."""
    import torch.distributed as dist  # noqa: PLC0415

    gpus = torch.cuda.device_count()
    if gpus < 2:
        device = torch.device("cuda", 0)
        store = dist.HashStore()  # type: ignore[attr-defined]
        dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=device)
        try:
            buffer = torch.full((64 * 2**20,), 2.0, device=device)
            dist.all_reduce(buffer)
            torch.cuda.synchronize(device)
            ok = bool((buffer == 2.0).all())
        finally:
            dist.destroy_process_group()
        raw: object = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
        # A tuple (2, 21, 5) on current torch; older releases returned one integer.
        version = ".".join(map(str, raw)) if isinstance(raw, tuple) else str(raw)
        result = "correct" if ok else "WRONG"
        phase.say(f"single-rank NCCL {version} process group: 256 MiB all-reduce {result}")
        phase.say("one GPU: no fabric to measure (bus bandwidth needs 2+ ranks)")
        if not ok:
            phase.fail("the one-rank all-reduce changed the buffer")
        return
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={gpus}",
        "-m",
        "workloads.fabric_check",
        "--min-busbw-gbps",
        "0",
        "--sizes-mib",
        "64,1024",
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=max(30.0, timeout_s), check=False
        )
    except subprocess.TimeoutExpired:
        phase.fail(f"the fabric check did not finish within {timeout_s:.0f} s")
        return
    for line in done.stdout.splitlines():
        if line.startswith("fabric_check") or line.strip()[:1].isdigit() or "busbw" in line:
            phase.say(line.rstrip())
    if done.returncode != 0:
        phase.say(done.stderr[-2000:])
        phase.fail(f"the fabric check exited with status {done.returncode}")


def bench_variants(fast: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
    """The benchmark's CUDA variants (``--ablate``) less those left to `make bench`."""
    from workloads.training import bench  # noqa: PLC0415

    return [
        (name, switches)
        for name, switches in bench.variants(fast, ablate=True, cuda=True)
        if name not in LEFT_TO_MAKE_BENCH
    ]


def run_bench(phase: Phase, data_dir: Path, deadline: float) -> list[str]:
    """The benchmark variants that fit before ``deadline``; the table's lines."""
    from workloads.training import bench  # noqa: PLC0415
    from workloads.training.config import preset  # noqa: PLC0415

    device = torch.device("cuda", 0)
    base = preset(PRESET)
    planned = bench_variants(bench.fast_overrides(device))
    left = deadline - time.monotonic()
    if left < MIN_BENCH_S:
        phase.fail(
            f"only {left:.0f} s of the time limit left for the benchmark (at least "
            f"{MIN_BENCH_S} s needed); raise --timeout-s or run `make bench ARGS=--ablate`"
        )
        return []
    measured = bench.Measured(
        skipped=[f"{PRESET} {n}: {why}" for n, why in LEFT_TO_MAKE_BENCH.items()]
    )
    if not bench.deepspeed_installed():
        from workloads.training.deepspeed_engine import REQUIREMENT  # noqa: PLC0415

        missing = [name for name, _ in planned if name in bench.DEEPSPEED_VARIANTS]
        planned = [(name, switches) for name, switches in planned if name not in missing]
        measured.failed += [
            f"{PRESET} {name}: not run: the deepspeed package is not installed "
            f"(pip install '{REQUIREMENT}')"
            for name in missing
        ]
    planned = bench.drop_float8_if_unavailable(planned, device, measured.skipped)
    try:
        bench.measure_preset(
            base,
            planned,
            device=device,
            shape=bench.Shape(base.micro_batch_size, base.grad_accum_steps),
            warmup=BENCH_WARMUP,
            steps=BENCH_STEPS,
            extra={"data_dir": str(data_dir)},
            deadline=deadline,
            report=phase.say,
            into=measured,
            keep_going=True,
        )
    except TimeLimitError:
        done = {r.variant for r in measured.results} | {
            s.split()[1].rstrip(":")
            for s in [*measured.skipped, *measured.failed]
            if len(s.split()) > 1
        }
        interrupted = next((name for name, _ in planned if name not in done), "?")
        phase.fail(f"the time limit ran out while measuring {interrupted}")
        measured.skipped.append(f"{PRESET} {interrupted}: interrupted by the time limit")
        measured.skipped += [
            f"{PRESET} {name}: not run (time limit)"
            for name, _ in planned
            if name not in done and name != interrupted
        ]
    for skipped in measured.skipped:
        phase.say(skipped)
    if measured.failed:
        phase.fail(f"{len(measured.failed)} variant(s) failed: {'; '.join(measured.failed)}")
    if not any(r.variant == "fast" for r in measured.results):
        phase.fail("the fast variant was not measured")
    left_out = [*measured.failed, *measured.skipped]
    return [
        *bench.table(measured.results),
        *(["", "Not measured:", *(f"- {s}" for s in left_out)] if left_out else []),
    ]


# --- report ---------------------------------------------------------------------------


def report_body(phases: Sequence[Phase], bench_lines: Sequence[str], command: str) -> list[str]:
    from workloads.training import bench  # noqa: PLC0415

    device = torch.device("cuda", 0)
    body = [
        f"### GPU check: {torch.cuda.device_count()} x {torch.cuda.get_device_name(device)}",
        "",
        *bench.machine_lines(device),
        f"- command: `{command}` (`make gpu-check`)",
        f"- bench: {BENCH_WARMUP} warm-up + {BENCH_STEPS} timed optimizer steps per variant "
        f"(median of {bench.REPEATS} windows), one process",
        "",
        "Checks:",
        "",
    ]
    for phase in phases:
        body.append(f"- {phase.name}: {'passed' if phase.ok else 'FAILED'}")
        body += [f"  - {line}" for line in phase.lines if phase.name != "bench"]
    if bench_lines:
        body += ["", *bench_lines]
    return body


# --- main -----------------------------------------------------------------------------


def _report_error(phase: Phase, err: Exception) -> None:
    """A check that raised: the traceback on stderr (this is a diagnostic tool), its
    last line in the report."""
    traceback.print_exc()
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    phase.fail(f"{type(err).__name__}: {(lines[-1] if lines else '')[:300]}")


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise TimeLimitError


def run_all(args: argparse.Namespace, added: Sequence[str], command: str) -> int:
    started = time.monotonic()
    deadline = started + args.timeout_s - MARGIN_S
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(int(args.timeout_s - MARGIN_S // 2))
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    data_dir = Path(args.data_dir)
    phases: list[Phase] = []
    bench_lines: list[str] = []
    checks: list[tuple[str, Callable[[Phase], None]]] = [
        ("environment", lambda p: environment(p, added)),
        ("health", health),
        ("fwd-bwd", lambda p: fwd_bwd(p, data_dir)),
        ("train-resume", lambda p: train_resume(p, data_dir, work)),
        ("engines", lambda p: engines(p, data_dir, work)),
        ("float8", lambda p: float8_check(p, data_dir, work)),
        ("nccl", lambda p: nccl(p, deadline - time.monotonic())),
    ]
    skip = set(args.skip.split(",")) if args.skip else set()
    print(f"gpu_check: plan for {torch.cuda.device_count()} GPU(s), {args.timeout_s:.0f} s limit")
    for planned in plan(torch.cuda.device_count()):
        print(f"  {planned.phase:<13} {planned.name:<24} {planned.detail}")
    try:
        for name, check in checks:
            if name in skip:
                continue
            phase = Phase(name)
            phases.append(phase)
            try:
                check(phase)
            except TimeLimitError:
                raise
            except Exception as err:
                _report_error(phase, err)
        if "bench" not in skip:
            phase = Phase("bench")
            phases.append(phase)
            try:
                bench_lines = run_bench(phase, data_dir, deadline)
            except TimeLimitError:
                raise
            except Exception as err:
                _report_error(phase, err)
    except TimeLimitError:
        phases[-1].fail(f"the {args.timeout_s:.0f} s time limit ran out in this check")
    finally:
        signal.alarm(0)
        shutil.rmtree(work, ignore_errors=True)

    body = report_body(phases, bench_lines, command)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    from workloads.training import bench  # noqa: PLC0415

    key = bench.machine_key(torch.device("cuda", 0))
    out_file = out_dir / f"{key}.md"
    out_file.write_text("\n".join(body) + "\n", encoding="utf-8")
    failed = [p.name for p in phases if not p.ok]
    print()
    print("\n".join(body))
    print(f"\ngpu_check: section written to {out_file} ({time.monotonic() - started:.0f} s)")
    if args.record:
        bench.record(Path(args.record), f"gpu-check-{key.removeprefix('gpu-')}", body)
        print(f"gpu_check: recorded in {args.record}")
    if failed:
        print(f"gpu_check: FAILED: {', '.join(failed)}", file=sys.stderr)
        return EXIT_FAILED
    print("gpu_check: every check passed")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m workloads.training.gpu_check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dry-run", action="store_true", help="print and validate the plan only")
    parser.add_argument(
        "--gpus", type=int, help="GPUs to plan for in a dry run (default: those present, or 1)"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="overall time limit (600)"
    )
    parser.add_argument("--wheel-dir", default=str(DEFAULT_WHEEL_DIR), help="carried wheels")
    parser.add_argument("--out-dir", default=str(DEFAULT_OUT_DIR), help="where the section goes")
    parser.add_argument("--data-dir", default="build/data/byte", help="token shards")
    parser.add_argument(
        "--skip", default="", help="comma-separated checks to leave out (e.g. bench)"
    )
    parser.add_argument(
        "--record",
        nargs="?",
        const="BENCHMARKS.md",
        metavar="FILE",
        help="also write the section into FILE (default BENCHMARKS.md)",
    )
    args = parser.parse_args(argv)
    if args.timeout_s < 2 * MARGIN_S or (args.gpus is not None and args.gpus < 1):
        print(f"gpu_check: --timeout-s must be >= {2 * MARGIN_S} and --gpus >= 1", file=sys.stderr)
        return EXIT_USAGE
    added = add_carried_wheels(Path(args.wheel_dir))
    cuda = torch.cuda.is_available()
    if args.dry_run:
        return dry_run(args.gpus or (torch.cuda.device_count() if cuda else 1))
    if not cuda:
        print(
            f"gpu_check: no CUDA GPU here (torch {torch.__version__}, "
            f"CUDA build {torch.version.cuda or 'none'}): nothing was checked. Run it on a "
            "machine with an NVIDIA GPU and a CUDA build of PyTorch; "
            "`python -m workloads.training.gpu_check --dry-run` shows the plan on any machine.",
            file=sys.stderr,
        )
        return EXIT_NO_GPU
    command = " ".join(["python", "-m", "workloads.training.gpu_check", *argv])
    return run_all(args, added, command)


if __name__ == "__main__":
    sys.exit(main())
