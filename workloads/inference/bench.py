"""``make bench-infer``: CPU inference speed of PyTorch eager fp32, ONNX Runtime fp32
and ONNX Runtime int8 on the same prompts, in one run.

For each preset that runs on a CPU (``tiny``, ``small``) a model is built from the
preset's seed (the speed of a forward pass does not depend on what the weights
learned), exported and quantised exactly as ``make export`` does, and then each
engine is measured in its own fresh process, so that its peak resident memory is
its own:

- latency: one forward pass (prompt -> next-token logits) at batch 1, p50 and p99
  over ``--repeats`` runs after ``--warmup`` runs;
- throughput: prompt tokens per second at batch 8 (8 x prompt length tokens per pass);
- peak RSS of the measuring process (the interpreter, the engine and the model).

Every engine uses the same threads (``--threads``, default: the physical cores).
``--record`` writes the table, the machine, the versions and the command into
BENCHMARKS.md (replacing the previous inference section).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np

from workloads.inference.runtime import SessionSettings, physical_cores

ENGINES = ("torch-fp32", "ort-fp32", "ort-int8", "ort-int8-static")
#: The file each ONNX Runtime engine runs (static int8 is measured, not exported).
ENGINE_FILES = {
    "ort-fp32": "model.onnx",
    "ort-int8": "model.int8.onnx",
    "ort-int8-static": "model.int8-static.onnx",
}
CPU_PRESETS = ("tiny", "small")
SECTION = "## CPU inference (make bench-infer)"


@dataclass(frozen=True)
class Figures:
    """One engine on one preset and prompt length."""

    preset: str
    engine: str
    prompt_len: int
    p50_ms: float
    p99_ms: float
    batch8_tokens_per_s: float
    peak_rss_mib: float


def peak_rss_mib() -> float:
    """This process's peak resident memory. VmHWM, not getrusage: ru_maxrss survives
    fork and exec, so a worker would report its parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(run: Callable[[], object], warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def _runner(
    engine: str, export_dir: Path, preset: str, threads: int, spin: bool
) -> Callable[[np.ndarray], object]:
    if engine == "torch-fp32":
        import torch  # noqa: PLC0415 - only the PyTorch worker pays for it

        from workloads.training.config import preset as load_preset  # noqa: PLC0415
        from workloads.training.model import GPT  # noqa: PLC0415

        torch.set_num_threads(threads)
        torch.manual_seed(0)
        config = load_preset(preset)
        model = GPT(config.model).eval()
        model.load_state_dict(torch.load(export_dir / "weights.pt", weights_only=True))

        def run_torch(ids: np.ndarray) -> object:
            with torch.inference_mode():
                return model.logits(torch.from_numpy(ids))[:, -1]

        return run_torch
    import onnxruntime as ort  # noqa: PLC0415 - only the ONNX Runtime workers pay for it

    settings = SessionSettings(intra_op_threads=threads, spin=spin)
    session = ort.InferenceSession(
        str(export_dir / ENGINE_FILES[engine]),
        sess_options=settings.session_options(),
        providers=["CPUExecutionProvider"],
    )

    def run_ort(ids: np.ndarray) -> object:
        return session.run(None, {"token_ids": ids})[0][:, -1]

    return run_ort


def worker(args: argparse.Namespace) -> int:
    """Measure one engine (in its own process) and print its figures as JSON lines."""
    run = _runner(args.engine, args.export_dir, args.preset, args.threads, not args.no_spin)
    rng = np.random.default_rng(0)
    for length in args.prompt_lens:
        single = rng.integers(0, 256, size=(1, length), dtype=np.int64)
        batch = rng.integers(0, 256, size=(8, length), dtype=np.int64)
        latency = _timed(partial(run, single), args.warmup, args.repeats)
        batched = _timed(partial(run, batch), args.warmup, max(args.repeats // 4, 5))
        figures = Figures(
            preset=args.preset,
            engine=args.engine,
            prompt_len=length,
            p50_ms=1000 * float(np.percentile(latency, 50)),
            p99_ms=1000 * float(np.percentile(latency, 99)),
            batch8_tokens_per_s=8 * length / float(np.median(batched)),
            peak_rss_mib=peak_rss_mib(),
        )
        print(json.dumps(asdict(figures)), flush=True)
    return 0


def prepare(preset: str, directory: Path) -> None:
    """Export a seeded model of ``preset`` (fp32 + int8) into ``directory``, and its
    PyTorch weights for the eager engine."""
    import torch  # noqa: PLC0415

    from workloads.inference.card import CARD_FILE, ModelCard, Parity  # noqa: PLC0415
    from workloads.inference.export import (  # noqa: PLC0415
        export_onnx,
        quantize_int8,
        quantize_int8_static,
    )
    from workloads.training.config import preset as load_preset  # noqa: PLC0415
    from workloads.training.model import GPT  # noqa: PLC0415

    config = load_preset(preset)
    torch.manual_seed(config.seed)
    model = GPT(config.model).eval()
    torch.save(model.state_dict(), directory / "weights.pt")
    opset = export_onnx(model, directory / "model.onnx")
    quantize_int8(directory / "model.onnx", directory / "model.int8.onnx", per_channel=True)
    # Calibration windows from the shipped corpus, the model's own byte vocabulary.
    corpus = np.frombuffer(Path(config.corpus).read_bytes(), dtype=np.uint8).astype(np.int64)
    length = config.model.block_size // 4
    starts = np.linspace(0, corpus.size - length - 1, num=16).astype(np.int64)
    calibration = np.stack([corpus[s : s + length] for s in starts])
    quantize_int8_static(
        directory / "model.onnx", directory / "model.int8-static.onnx", calibration, True
    )
    nan = float("nan")
    card = ModelCard(
        name=f"bench-{preset}",
        model=config.model,
        vocab_size=config.model.vocab_size,
        logit_rows=model.vocab_rows,
        tokenizer="byte-utf8",
        opset=opset,
        files={"fp32": "model.onnx", "int8": "model.int8.onnx"},
        quantization={"method": "dynamic"},
        source={"preset": preset, "note": "seeded, untrained: for timing only"},
        parity=Parity(0, nan, nan, nan, nan, nan, nan),
    )
    (directory / CARD_FILE).write_text(card.to_json(), encoding="utf-8")


def _versions() -> str:
    from importlib.metadata import version  # noqa: PLC0415

    names = ("torch", "onnx", "onnxruntime", "numpy")
    return ", ".join(f"{name} {version(name)}" for name in names)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def table(results: Sequence[Figures]) -> list[str]:
    lines = [
        "| preset | prompt | engine | p50 ms (b=1) | p99 ms (b=1) | tokens/s (b=8) "
        "| x torch (b=8) | peak RSS MiB |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    base = {
        (r.preset, r.prompt_len): r.batch8_tokens_per_s for r in results if r.engine == ENGINES[0]
    }
    for r in results:
        speedup = r.batch8_tokens_per_s / base[(r.preset, r.prompt_len)]
        lines.append(
            f"| {r.preset} | {r.prompt_len} | {r.engine} | {r.p50_ms:.2f} | {r.p99_ms:.2f} "
            f"| {r.batch8_tokens_per_s:,.0f} | {speedup:.2f} | {r.peak_rss_mib:.0f} |"
        )
    return lines


def record(path: Path, body: list[str]) -> None:
    """Replace (or append) this section of ``path``."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    start = text.find(SECTION)
    section = "\n".join([SECTION, "", *body]) + "\n"
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.inference.bench",
        description="CPU inference: PyTorch eager fp32 vs ONNX Runtime fp32 vs int8.",
    )
    parser.add_argument("--presets", nargs="+", default=list(CPU_PRESETS))
    parser.add_argument("--prompt-lens", nargs="+", type=int, default=None)
    parser.add_argument("--threads", type=int, default=0, help="0: physical cores")
    parser.add_argument("--no-spin", action="store_true", help="ORT threads do not spin-wait")
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--record", type=Path, help="write the table into this BENCHMARKS.md")
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--export-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--preset", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.threads = args.threads or physical_cores()
    if args.repeats < 5 or args.warmup < 0 or args.threads < 1:
        print("bench-infer: --repeats must be >= 5, --warmup >= 0", file=sys.stderr)
        return 2
    if args.engine:
        return worker(args)
    from workloads.training.config import PRESETS  # noqa: PLC0415

    unknown = [p for p in args.presets if p not in PRESETS]
    if unknown:
        print(
            f"bench-infer: unknown preset(s) {unknown}; one of {', '.join(PRESETS)}",
            file=sys.stderr,
        )
        return 2
    results: list[Figures] = []
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    for preset in args.presets:
        from workloads.training.config import preset as load_preset  # noqa: PLC0415

        context = load_preset(preset).model.block_size
        lens = [n for n in (args.prompt_lens or [context // 4, context]) if 1 <= n <= context]
        with tempfile.TemporaryDirectory(prefix="bench-infer-") as tmp:
            print(f"bench-infer: exporting {preset} ...", flush=True)
            prepare(preset, Path(tmp))
            for engine in ENGINES:
                command = [
                    sys.executable, "-m", "workloads.inference.bench", "--engine", engine,
                    "--export-dir", tmp, "--preset", preset, "--threads", str(args.threads),
                    "--repeats", str(args.repeats), "--warmup", str(args.warmup),
                    "--prompt-lens", *map(str, lens),
                    *(["--no-spin"] if args.no_spin else []),
                ]  # fmt: skip
                done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
                if done.returncode != 0:
                    print(f"bench-infer: {engine} on {preset} failed:\n{done.stderr[-2000:]}")
                    return 1
                results += [Figures(**json.loads(line)) for line in done.stdout.splitlines()]
    shown = "make bench-infer" + (f" ARGS={shlex.quote(' '.join(argv))}" if argv else "")
    body = [
        f"Machine: {_cpu_model()}, {os.cpu_count()} logical CPUs, {args.threads} thread(s) "
        f"per engine{', no spin-wait' if args.no_spin else ''}; {platform.python_version()}, "
        f"{_versions()}; {dt.date.today().isoformat()}; `{shown}`.",
        "",
        *table(results),
    ]
    print("\n".join(body))
    if args.record:
        record(args.record, body)
        print(f"\nbench-infer: recorded in {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
