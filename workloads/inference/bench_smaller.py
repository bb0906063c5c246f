"""``make bench-smaller``: smaller models for CPUs, measured in one run.

One command makes every model it measures, the way a user would, and measures them
together on the same held-out data and the same CPU:

1. the teacher: ``python -m workloads.train`` of ``--teacher-preset`` (``small``);
2. the student: ``make distill``'s module, ``--student-preset`` (``tiny``) from the
   teacher (temperature 1, alpha 0.5), and the same student trained for the same steps
   without the teacher (``--alpha 0``: labels only), the figure distillation is judged by;
3. the pruned teacher: ``make prune``'s module, half the heads and half the MLP width,
   then its recovery fine-tune;
4. ``make export``'s ONNX fp32 and int8 files of each (parity-checked as always);
5. for each export: the held-out loss of the fp32 and the int8 model on
   ``--eval-windows`` windows of the validation shard, and CPU inference speed of each
   through ONNX Runtime, measured by `workloads.inference.bench`'s worker in its own
   process (batch 8 prompt tokens/s, batch 1 p50 latency).

Training runs in the training environment (``--train-python``); the exports and the
measurements here, in the lifecycle environment. ``--record`` writes the table, the
machine, the versions, the date and the exact command into BENCHMARKS.md (replacing
the previous section of this benchmark).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np
import onnxruntime as ort

from workloads.inference.bench import Figures
from workloads.inference.card import FP32_FILE, INPUT_NAME, INT8_FILE
from workloads.inference.errors import ExportError
from workloads.inference.export import _loss, export_checkpoint, heldout_tokens
from workloads.inference.runtime import physical_cores
from workloads.training.lineage import read_run_record
from workloads.training.model import GPT

SECTION_BEGIN = "<!-- bench:smaller begin -->"
SECTION_END = "<!-- bench:smaller end -->"
TITLE = "## Smaller models for CPUs: distillation, pruning, int8 (make bench-smaller)"


@dataclass(frozen=True)
class Row:
    """One model's figures (fp32 ONNX and its int8 export)."""

    name: str
    shape: str
    params_m: float
    loss_fp32: float
    loss_int8: float
    tokens_per_s_fp32: float
    tokens_per_s_int8: float
    p50_ms_fp32: float
    p50_ms_int8: float
    size_mb_fp32: float
    size_mb_int8: float


def _run(command: Sequence[str], what: str) -> None:
    """Run a step of the benchmark, its output shown as it comes; fail the benchmark if
    it fails (with the end of its error output)."""
    print(f"bench-smaller: {what}: {shlex.join(command)}", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errors:
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True) as child:
            assert child.stdout is not None
            for line in child.stdout:
                print(f"  {line.rstrip()}", flush=True)
        if child.returncode != 0:
            errors.seek(0)
            raise RuntimeError(f"{what} failed (exit {child.returncode}):\n{errors.read()[-3000:]}")
    print(f"  ({time.monotonic() - started:.0f} s)", flush=True)


def _speed(export_dir: Path, engine: str, args: argparse.Namespace) -> Figures:
    command = [
        sys.executable, "-m", "workloads.inference.bench", "--engine", engine,
        "--export-dir", str(export_dir), "--preset", "-", "--threads", str(args.threads),
        "--repeats", str(args.repeats), "--warmup", "5", "--prompt-lens", str(args.prompt_len),
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{engine} on {export_dir} failed:\n{done.stderr[-2000:]}")
    return Figures(**json.loads(done.stdout.splitlines()[-1]))


def measure(name: str, ckpt: Path, export_dir: Path, args: argparse.Namespace) -> Row:
    """Export ``ckpt`` (as ``make export`` does) and measure both files."""
    record = read_run_record(ckpt)
    if record is None:
        raise ExportError(f"{ckpt} has no run.json")
    config = record.config
    print(f"bench-smaller: {name}: make export CHECKPOINT={ckpt} OUT={export_dir}", flush=True)
    card = export_checkpoint(ckpt, export_dir, config)
    # The same held-out windows for every model, whatever sequence length it trained at.
    windows = heldout_tokens(dataclasses.replace(config, seq_len=args.eval_len), args.eval_windows)
    inputs, targets = windows[:, :-1], windows[:, 1:]
    losses = {}
    for variant, file in (("fp32", FP32_FILE), ("int8", INT8_FILE)):
        session = ort.InferenceSession(str(export_dir / file), providers=["CPUExecutionProvider"])
        logits = np.concatenate(
            [
                session.run(None, {INPUT_NAME: inputs[i : i + 8]})[0]
                for i in range(0, len(inputs), 8)
            ]
        )
        losses[variant] = _loss(logits[..., : config.model.vocab_size], targets)
    fp32, int8 = _speed(export_dir, "ort-fp32", args), _speed(export_dir, "ort-int8", args)
    model = config.model
    import torch  # noqa: PLC0415 - the count only

    with torch.device("meta"):
        params = GPT(model, pad_vocab=config.pad_vocab).num_parameters()
    print(
        f"  loss fp32 {losses['fp32']:.4f} int8 {losses['int8']:.4f}; tokens/s fp32 "
        f"{fp32.batch8_tokens_per_s:,.0f} int8 {int8.batch8_tokens_per_s:,.0f} "
        f"(export parity: int8 {card.parity.int8_loss:.4f} vs fp32 {card.parity.fp32_loss:.4f})",
        flush=True,
    )
    return Row(
        name=name,
        shape=f"{config.preset}: {model.n_layer} layers, {model.n_head} heads x "
        f"{model.attn_head_dim}, MLP {model.mlp_hidden}",
        params_m=params / 1e6,
        loss_fp32=losses["fp32"],
        loss_int8=losses["int8"],
        tokens_per_s_fp32=fp32.batch8_tokens_per_s,
        tokens_per_s_int8=int8.batch8_tokens_per_s,
        p50_ms_fp32=fp32.p50_ms,
        p50_ms_int8=int8.p50_ms,
        size_mb_fp32=(export_dir / FP32_FILE).stat().st_size / 1e6,
        size_mb_int8=(export_dir / INT8_FILE).stat().st_size / 1e6,
    )


def table(rows: Sequence[Row]) -> list[str]:
    teacher = rows[0]
    lines = [
        "| model | shape | params | held-out loss fp32 | int8 | tokens/s fp32 (b=8) | int8 "
        "| x teacher fp32 | p50 ms fp32 (b=1) | int8 | ONNX MB fp32 | int8 |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.shape} | {r.params_m:.3f}M | {r.loss_fp32:.4f} | {r.loss_int8:.4f} "
            f"| {r.tokens_per_s_fp32:,.0f} | {r.tokens_per_s_int8:,.0f} "
            f"| {r.tokens_per_s_fp32 / teacher.tokens_per_s_fp32:.2f}x "
            f"| {r.p50_ms_fp32:.2f} | {r.p50_ms_int8:.2f} "
            f"| {r.size_mb_fp32:.2f} | {r.size_mb_int8:.2f} |"
        )
    return lines


def record(path: Path, body: Sequence[str]) -> None:
    """Replace (or append) this benchmark's section of ``path``."""
    section = "\n".join([SECTION_BEGIN, TITLE, "", *body, SECTION_END])
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    if SECTION_BEGIN in text and SECTION_END in text:
        head, rest = text.split(SECTION_BEGIN, 1)
        text = head + section + rest.split(SECTION_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.inference.bench_smaller", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--train-python", required=True, help="the training environment's python")
    parser.add_argument("--work-dir", type=Path, help="keep the runs here (default: temporary)")
    parser.add_argument("--teacher-preset", default="small")
    parser.add_argument("--teacher-steps", type=int, default=200)
    parser.add_argument("--student-preset", default="tiny")
    parser.add_argument("--student-steps", type=int, default=300)
    parser.add_argument("--heads", default="0.5", help="make prune HEADS=")
    parser.add_argument("--mlp", default="0.5", help="make prune MLP=")
    parser.add_argument("--recovery-steps", type=int, default=30)
    parser.add_argument("--eval-windows", type=int, default=64, help="held-out windows")
    parser.add_argument("--eval-len", type=int, default=64, help="tokens per held-out window")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--threads", type=int, default=0, help="0: physical cores")
    parser.add_argument("--record", type=Path, help="write the table into this BENCHMARKS.md")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.threads = args.threads or physical_cores()
    steps = (args.teacher_steps, args.student_steps, args.recovery_steps, args.eval_windows)
    if min(*steps, args.eval_len) < 1 or args.repeats < 5 or args.prompt_len < 1:
        print("bench-smaller: steps and --eval-windows >= 1, --repeats >= 5", file=sys.stderr)
        return 2
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-smaller-") as scratch:
        work = args.work_dir or Path(scratch)
        if work.exists() and any(work.iterdir()):
            print(f"bench-smaller: --work-dir {work} is not empty; give a new one", file=sys.stderr)
            return 2
        train = [args.train_python, "-m"]
        common = ["--metrics-port", "0", "--log-every", "20"]
        try:
            _run(
                [*train, "workloads.train", "--preset", args.teacher_preset,
                 "--steps", str(args.teacher_steps), "--data-dir", str(work / "data"),
                 "--ckpt-dir", str(work / "teacher"), *common],
                "teacher",
            )  # fmt: skip
            for name, alpha in (("student", "0.5"), ("student-no-distill", "0")):
                _run(
                    [*train, "workloads.training.distill", "--teacher", str(work / "teacher"),
                     "--preset", args.student_preset, "--out", str(work / name),
                     "--steps", str(args.student_steps), "--alpha", alpha, *common],
                    f"{name} (alpha {alpha})",
                )  # fmt: skip
            _run(
                [*train, "workloads.training.prune", "--ckpt", str(work / "teacher"),
                 "--out", str(work / "pruned"), "--heads", args.heads, "--mlp", args.mlp,
                 "--steps", str(args.recovery_steps), *common],
                "pruned",
            )  # fmt: skip
            load_before = os.getloadavg()[0]
            rows = [
                measure(label, work / name, work / "export" / name, args)
                for label, name in (
                    (f"teacher ({args.teacher_steps} steps)", "teacher"),
                    (f"student, distilled ({args.student_steps} steps)", "student"),
                    (f"student, labels only ({args.student_steps} steps)", "student-no-distill"),
                    (
                        f"teacher pruned (heads {args.heads}, MLP {args.mlp}) + "
                        f"{args.recovery_steps} recovery steps",
                        "pruned",
                    ),
                )
            ]
            load_after = os.getloadavg()[0]
        except (RuntimeError, ExportError) as err:
            print(f"bench-smaller: {err}", file=sys.stderr)
            return 1
    # make passes --train-python itself; the rest is what ARGS= held.
    given = [a for a in argv if a not in ("--train-python", args.train_python)]
    shown = "make bench-smaller" + (f" ARGS={shlex.quote(shlex.join(given))}" if given else "")
    versions = ", ".join(f"{n} {version(n)}" for n in ("torch", "onnx", "onnxruntime"))
    body = [
        f"- machine: {_cpu_model()}, {os.cpu_count()} logical CPUs, {args.threads} inference "
        f"thread(s); Python {platform.python_version()}, {versions}",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; "
        f"{time.monotonic() - started:.0f} s in all",
        f"- command: `{shown}` (`python -m workloads.inference.bench_smaller {shlex.join(argv)}`)",
        f"- held-out loss: mean next-token cross-entropy (nats) of the ONNX model on "
        f"{args.eval_windows} windows of {args.eval_len} tokens of the validation shard; "
        f"tokens/s: prompt tokens per second at batch 8 x {args.prompt_len} tokens, "
        "p50: one forward at batch 1, ONNX Runtime on the CPU (`make bench-infer`'s worker)",
        "- every model trains one process on this CPU in fp32; the student and the pruned "
        "model read the teacher's data shards",
        f"- the machine's 1-minute load average was {load_before:.1f} when the measurements "
        f"began and {load_after:.1f} when they ended ({os.cpu_count()} CPUs; above that, "
        "other work shared the cores and the speeds are lower than an idle machine's)",
        "",
        *table(rows),
    ]
    print("\n".join(body))
    if args.record:
        record(args.record, body)
        print(f"\nbench-smaller: recorded in {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
