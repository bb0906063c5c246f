"""``make bench-llm``: vLLM's OpenAI server against the V2 predictor's text endpoint, the
same prompts at the same concurrencies, in one run.

1. vLLM: `workloads.llm.serve` (what ``make serve-llm`` runs) on a free port, then
   guidellm's own benchmark (closed loop at each concurrency, synthetic prompts of
   ``--prompt-tokens`` tokens, ``--output-tokens`` new tokens each with EOS ignored,
   ``--requests`` requests per concurrency, streamed): time to first token, inter-token
   latency, output tokens/s. guidellm sends to ``/v1/completions``: the chat endpoint
   would add the chat template's tokens to every prompt, which the V2 side does not see.
2. V2: ``python -m workloads.serving`` (what ``make serve`` runs, the fp32 variant: vLLM
   runs float32 too) on a ``make export`` folder, and the very prompts guidellm sent
   (read back from its JSON), each asking for the same number of new tokens (greedy), by
   the same number of closed-loop clients. The V2 protocol does not stream: a request's
   first token arrives with its last, so its time to first token is its latency and it
   has no inter-token latency.

Output tokens/s is, on both sides, the output tokens of the successful requests over the
wall time of that concurrency's requests (guidellm's own figure). The servers run one at
a time (2 cores here). The table is printed in Markdown and the raw figures written to
``--out`` (results.json, guidellm.json, the servers' logs).

Usage::

    python -m workloads.llm.bench --model <HF folder> [--v2-model <export folder>
        --v2-python .venv-serving/bin/python] [--concurrency 1,8,32] [--requests 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import httpx

from workloads.llm.cold_start import free_port, measure, stop, versions
from workloads.llm.serve import (
    HOST,
    UsageError,
    check_head_size,
    model_folder,
    supported_head_sizes,
)

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 600.0
#: guidellm's warm-up is its own option; both servers get a few requests before timing.
WARMUP_REQUESTS = 3


@dataclass
class Point:
    """One server at one concurrency.

    Args:
        server: ``vllm`` or ``v2``.
        concurrency: closed-loop clients.
        requests: successful requests.
        errors: failed requests.
        ttft_ms: median time to first token.
        itl_ms: median inter-token latency (None: the server does not stream).
        latency_ms: median request latency.
        output_tokens_per_s: output tokens of the successful requests / wall time.
    """

    server: str
    concurrency: int
    requests: int
    errors: int
    ttft_ms: float
    itl_ms: float | None
    latency_ms: float
    output_tokens_per_s: float


def refuse(message: str) -> NoReturn:
    """A user error: one line, exit 2 (nothing started)."""
    print(f"bench-llm: {message}", file=sys.stderr)
    raise SystemExit(2)


def fail(message: str) -> NoReturn:
    """A run that could not finish (a server, guidellm): one line, exit 1."""
    print(f"bench-llm: {message}", file=sys.stderr)
    raise SystemExit(1)


def _wait(process: subprocess.Popen[bytes], url: str, log: Path, what: str) -> None:
    """Until ``url`` answers 200; exits in one line if the server dies or never does."""
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            fail(f"{what} exited {process.returncode} at start (log: {log})")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    stop(process)
    fail(f"{what} did not start within {STARTUP_S:.0f} s (log: {log})")


def _start(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip


def guidellm_command(
    *, port: int, name: str, model: Path, streams: Sequence[int], args: argparse.Namespace,
    out: Path,
) -> list[str]:  # fmt: skip
    """guidellm's command line (issue 31's, sending to /v1/completions)."""
    guidellm = Path(sys.executable).parent / "guidellm"
    return [
        str(guidellm), "run",
        "--backend",
        f"kind=openai_http,target=http://{HOST}:{port},model={name},request_format=/v1/completions",
        "--profile", f"kind=concurrent,streams={streams[0]}",
        "--override", "profile.streams", ",".join(map(str, streams)),
        "--tokenizer", f"kind=hf_auto,model={model}",
        "--data",
        f"kind=synthetic_text,prompt_tokens={args.prompt_tokens},output_tokens={args.output_tokens}",
        "--constraint", f"kind=max_requests,count={args.requests}",
        "--output", f"kind=json,path={out}",
        "--disable-progress",
    ]  # fmt: skip


def _successful(metric: dict[str, Any], key: str) -> float:
    return float(metric[key]["successful"]["median"])


def read_guidellm(report: dict[str, Any]) -> tuple[list[Point], dict[int, list[str]]]:
    """Each concurrency's figures from guidellm's JSON, and the prompts it sent."""
    points: list[Point] = []
    prompts: dict[int, list[str]] = {}
    for bench in report["benchmarks"]:
        streams = int(bench["config"]["strategy"]["streams"])
        metrics = bench["metrics"]
        totals = metrics["request_totals"]
        wall = bench["scheduler_metrics"]["measure_end_time"]
        wall -= bench["scheduler_metrics"]["measure_start_time"]
        output = metrics["output_token_count"]["successful"]["total_sum"]
        points.append(
            Point(
                server="vllm",
                concurrency=streams,
                requests=int(totals["successful"]),
                errors=int(totals["errored"]),
                ttft_ms=_successful(metrics, "time_to_first_token_ms"),
                itl_ms=_successful(metrics, "inter_token_latency_ms"),
                latency_ms=1000 * _successful(metrics, "request_latency"),
                output_tokens_per_s=float(output) / wall,
            )
        )
        prompts[streams] = [
            json.loads(request["request_args"])["body"]["prompt"]
            for request in bench["requests"]["successful"]
        ]
    return points, prompts


async def v2_point(url: str, prompts: list[str], concurrency: int, new_tokens: int) -> Point:
    """``concurrency`` closed-loop clients sending ``prompts`` (each once, in order) to
    the V2 text endpoint ``url``."""
    queue = list(reversed(prompts))
    latencies: list[float] = []
    errors = 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal errors
        while queue:
            prompt = queue.pop()
            body = {
                "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [prompt]}],
                "parameters": {"max_new_tokens": new_tokens, "temperature": 0},
            }
            start = time.perf_counter()
            answer = await http.post(url, json=body)
            if answer.status_code == 200:
                latencies.append(time.perf_counter() - start)
            else:
                errors += 1

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    latencies.sort()
    median = 1000 * latencies[len(latencies) // 2] if latencies else float("nan")
    return Point(
        server="v2",
        concurrency=concurrency,
        requests=len(latencies),
        errors=errors,
        ttft_ms=median,
        itl_ms=None,
        latency_ms=median,
        output_tokens_per_s=len(latencies) * new_tokens / wall,
    )


def run_vllm(
    args: argparse.Namespace, streams: list[int]
) -> tuple[list[Point], dict[int, list[str]]]:
    try:
        model = model_folder(str(args.model))
        check_head_size(model, supported_head_sizes())
    except UsageError as err:
        refuse(str(err))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    log = args.out / "vllm.log"
    command = [sys.executable, "-m", "workloads.llm.serve", str(model.path), "--port", str(port),
               "--name", "bench", "--kv-cache-gib", str(args.kv_cache_gib)]  # fmt: skip
    print(f"bench-llm: starting vLLM on {model.path} (log {log})", flush=True)
    process = _start(command, log, env)
    try:
        _wait(process, f"http://{HOST}:{port}/health", log, "vLLM")
        for _ in range(WARMUP_REQUESTS):
            httpx.post(
                f"http://{HOST}:{port}/v1/completions",
                json={"model": "bench", "prompt": "warm", "max_tokens": args.output_tokens},
                timeout=120,
            ).raise_for_status()
        report_file = args.out / "guidellm.json"
        command = guidellm_command(
            port=port, name="bench", model=model.path, streams=streams, args=args, out=report_file
        )
        print("bench-llm: " + " ".join(command), flush=True)
        with (args.out / "guidellm.log").open("wb") as sink:
            done = subprocess.run(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                                  env=env, check=False, timeout=3600)  # fmt: skip
        if done.returncode != 0:
            fail(f"guidellm exited {done.returncode} (log {args.out}/guidellm.log)")
        return read_guidellm(json.loads(report_file.read_text()))
    finally:
        stop(process)


def run_v2(args: argparse.Namespace, prompts: dict[int, list[str]]) -> list[Point]:
    export = Path(args.v2_model).resolve()
    port = free_port()
    log = args.out / "v2.log"
    command = [str(args.v2_python), "-m", "workloads.serving", "--model-dir", str(export),
               "--port", str(port), "--grpc-port", "0", "--variants", "fp32"]  # fmt: skip
    print(f"bench-llm: starting the V2 server on {export} (log {log})", flush=True)
    process = _start(command, log, dict(os.environ))
    url = f"http://{HOST}:{port}/v2/models/{export.name}/infer"
    try:
        _wait(process, f"http://{HOST}:{port}/v2/health/ready", log, "the V2 server")
        warm = [prompts[min(prompts)][0]] * WARMUP_REQUESTS
        asyncio.run(v2_point(url, warm, 1, args.output_tokens))
        return [
            asyncio.run(v2_point(url, sent, concurrency, args.output_tokens))
            for concurrency, sent in sorted(prompts.items())
        ]
    finally:
        stop(process)


def table(points: list[Point]) -> str:
    """The Markdown table: each concurrency's vLLM and V2 figures and the ratio."""
    rows = [
        "| concurrency | server | requests | TTFT p50 (ms) | ITL p50 (ms) | latency p50 (ms) "
        "| output tokens/s | vLLM / V2 |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    by = {(p.server, p.concurrency): p for p in points}
    for p in sorted(points, key=lambda p: (p.concurrency, p.server != "vllm")):
        other = by.get(("v2", p.concurrency))
        ratio = (
            f"{p.output_tokens_per_s / other.output_tokens_per_s:.2f}x"
            if p.server == "vllm" and other is not None and other.output_tokens_per_s > 0
            else ""
        )
        itl = "n/a (no streaming)" if p.itl_ms is None else f"{p.itl_ms:.2f}"
        errors = f" ({p.errors} failed)" if p.errors else ""
        rows.append(
            f"| {p.concurrency} | {'vLLM' if p.server == 'vllm' else 'V2'} | {p.requests}{errors} "
            f"| {p.ttft_ms:.1f} | {itl} | {p.latency_ms:.1f} | {p.output_tokens_per_s:.0f} "
            f"| {ratio} |"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.llm.bench", description=__doc__)
    # A string: Path would fold hf://org/model into hf:/org/model, past the hub check.
    parser.add_argument("--model", required=True, help="the HF model folder (vLLM)")
    parser.add_argument("--v2-model", type=Path, help="the make export folder (V2 side)")
    parser.add_argument(
        "--v2-python", type=Path, default=ROOT / ".venv-serving/bin/python",
        help="the serving environment's Python (the V2 server's)",
    )  # fmt: skip
    parser.add_argument("--concurrency", default="1,8,32", help="closed-loop clients (1,8,32)")
    parser.add_argument("--requests", type=int, default=40, help="requests per concurrency (40)")
    parser.add_argument("--prompt-tokens", type=int, default=32, help="prompt length (32)")
    parser.add_argument("--output-tokens", type=int, default=64, help="new tokens (64)")
    parser.add_argument("--kv-cache-gib", type=float, default=1.0, help="vLLM's KV cache (1)")
    parser.add_argument("--out", type=Path, default=ROOT / "build/bench-llm", help="results")
    parser.add_argument(
        "--cold-start", action="store_true",
        help="instead: serve-llm's cold start to its first completion, --runs times "
        "(workloads/llm/cold_start.py; results in build/bench-llm-cold)",
    )  # fmt: skip
    parser.add_argument("--runs", type=int, default=3, help="cold starts with --cold-start (3)")
    args = parser.parse_args(argv)
    if args.cold_start:
        out = ROOT / "build/bench-llm-cold" if args.out == ROOT / "build/bench-llm" else args.out
        line = " ".join(["python", "-m", "workloads.llm.bench",
                         *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
        return measure(args.model, args.runs, args.kv_cache_gib, out, line)
    try:
        streams = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        streams = []
    if not streams or min(streams) < 1 or args.requests < 1:
        refuse("give --concurrency as positive integers (1,8,32), --requests >= 1")
    if args.v2_model is not None:
        if not (args.v2_model / "model_card.json").is_file():
            refuse(f"V2_MODEL={args.v2_model} is not a make export folder (no model_card.json)")
        if not args.v2_python.exists():
            refuse(f"{args.v2_python} is missing: make bench-llm V2_MODEL= installs it")
    args.out.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC)
    load_before = os.getloadavg()
    points, prompts = run_vllm(args, streams)
    if args.v2_model is not None:
        points += run_v2(args, prompts)
    load_after = os.getloadavg()
    result = {
        "date": started.isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "versions": versions(),
        "command": " ".join([Path(sys.executable).name, "-m", "workloads.llm.bench",
                             *(argv if argv is not None else sys.argv[1:])]),
        "model": str(args.model),
        "v2_model": str(args.v2_model) if args.v2_model else None,
        "points": [asdict(p) for p in points],
    }  # fmt: skip
    (args.out / "results.json").write_text(json.dumps(result, indent=2))
    print(table(points))
    print(
        f"bench-llm: {result['date']}, {result['machine']}, load average "
        f"{load_before[0]:.1f} -> {load_after[0]:.1f}, {result['versions']}; raw figures in "
        f"{args.out / 'results.json'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
