"""``python -m workloads.serving.loadtest --model-dir build/export/<name>`` (``make
bench-serve``): requests/s and p50/p99 latency of the local model server at 1, 8 and 32
concurrent clients, for the int8 and fp32 models.

It starts the server on 127.0.0.1 (a free port), sends a bounded number of requests per
point (``--requests``) from closed-loop clients (each sends its next request when the
last is answered), counts 429s (load shed) apart from errors, prints a Markdown table
with the exact command, and stops the server. Loopback only, bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

PROMPTS = ("The ", "Abu Dhabi is", "In the desert, ", "Data stays in ", "A model ")


@dataclass(frozen=True)
class Point:
    model: str
    clients: int
    requests: int
    seconds: float
    ok: int
    shed: int
    errors: int
    p50_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def measure(url: str, model: str, clients: int, requests: int, new_tokens: int) -> Point:
    latencies: list[float] = []
    counts = {"ok": 0, "shed": 0, "errors": 0}
    remaining = requests

    async def client(index: int, http: httpx.AsyncClient) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            prompt = PROMPTS[(index + remaining) % len(PROMPTS)]
            body = {
                "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [prompt]}],
                "parameters": {"max_new_tokens": new_tokens},
            }
            started = time.perf_counter()
            response = await http.post(f"{url}/v2/models/{model}/infer", json=body)
            if response.status_code == 200:
                latencies.append(time.perf_counter() - started)
                counts["ok"] += 1
            elif response.status_code == 429:
                counts["shed"] += 1
                await asyncio.sleep(0.05)
            else:
                counts["errors"] += 1

    async with httpx.AsyncClient(timeout=120) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(i, http) for i in range(clients)))
        seconds = time.perf_counter() - started
    ms = np.asarray(latencies) * 1000 if latencies else np.zeros(1)
    return Point(
        model,
        clients,
        requests,
        seconds,
        counts["ok"],
        counts["shed"],
        counts["errors"],
        float(np.percentile(ms, 50)),
        float(np.percentile(ms, 99)),
    )


def wait_ready(url: str, model: str, process: subprocess.Popen[bytes], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the model server exited before it was ready")
        try:
            if httpx.get(f"{url}/v2/models/{model}/ready", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"the model server was not ready within {limit_s:g} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.serving.loadtest")
    parser.add_argument("--model-dir", type=Path, required=True, help="a `make export` directory")
    parser.add_argument("--clients", default="1,8,32", help="concurrent clients (1,8,32)")
    parser.add_argument("--requests", type=int, default=64, help="requests per point (64)")
    parser.add_argument("--new-tokens", type=int, default=16, help="tokens per answer (16)")
    parser.add_argument("--max-in-flight", type=int, default=64, help="server's --max-in-flight")
    args = parser.parse_args(argv)
    if not (args.model_dir / "model_card.json").is_file():
        print(f"error: {args.model_dir}: not an export directory (make export)", file=sys.stderr)
        return 2
    clients = [int(c) for c in args.clients.split(",")]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    name = args.model_dir.resolve().name
    server = subprocess.Popen(
        [sys.executable, "-m", "workloads.serving", "--model-dir", str(args.model_dir),
         "--port", str(port), "--max-in-flight", str(args.max_in_flight)],
    )  # fmt: skip
    points: list[Point] = []
    try:
        wait_ready(url, name, server, 300)
        for model in (f"{name}-int8", name):
            asyncio.run(measure(url, model, 1, 4, args.new_tokens))  # warm-up
            for count in clients:
                points.append(
                    asyncio.run(measure(url, model, count, args.requests, args.new_tokens))
                )
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        server.terminate()
        server.wait(timeout=30)
    command = "python -m workloads.serving.loadtest " + shlex.join(argv or sys.argv[1:])
    machine = platform.processor() or platform.machine()
    print(f"\n`{command}` on {machine}, {args.new_tokens} new tokens per request, "
          f"{args.requests} requests per point\n")  # fmt: skip
    print("| model | clients | req/s | p50 ms | p99 ms | ok | shed (429) | errors |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for p in points:
        print(f"| {p.model} | {p.clients} | {p.rps:.1f} | {p.p50_ms:.0f} | {p.p99_ms:.0f} | "
              f"{p.ok} | {p.shed} | {p.errors} |")  # fmt: skip
    return 1 if any(p.errors for p in points) else 0


if __name__ == "__main__":
    sys.exit(main())
