"""``python -m workloads.serving.loadtest --model-dir build/export/<name>`` (``make
bench-serve``): requests/s and p50/p99 latency of the local model server at 1, 8 and 32
concurrent clients, over HTTP and gRPC, for the int8 and fp32 models.

It starts the server on 127.0.0.1 (free ports), sends a bounded number of requests per
point (``--requests``) from closed-loop clients (each sends its next request when the
last is answered), counts 429s / RESOURCE_EXHAUSTED (load shed) apart from errors,
prints a Markdown table with the exact command, and stops the server. Loopback only,
bounded in count and time.

``--compare-with DIR`` measures an earlier server too, from the source tree ``DIR``
(e.g. ``git archive <commit> | tar -x -C DIR``), in the same run on the same machine,
with this environment's packages; the two servers run in turn, alternating over
``--rounds``, and the table gives each point's after/before ratio (the median over the
rounds). A server that has no gRPC is measured over HTTP only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc  # type: ignore[import-untyped]  # no stubs; this tool is run and timed by hand
import httpx
import numpy as np
from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as pb_grpc

PROMPTS = ("The ", "Abu Dhabi is", "In the desert, ", "Data stays in ", "A model ")
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Point:
    server: str
    protocol: str
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

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.protocol, self.model, self.clients)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


Send = Callable[[int, int], Awaitable[str]]  # (client, remaining) -> "ok" | "shed" | "error"


async def closed_loop(
    send: Send, clients: int, requests: int
) -> tuple[float, list[float], dict[str, int]]:
    latencies: list[float] = []
    counts = {"ok": 0, "shed": 0, "error": 0}
    remaining = requests

    async def client(index: int) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            outcome = await send(index, remaining)
            counts[outcome] += 1
            if outcome == "ok":
                latencies.append(time.perf_counter() - started)
            elif outcome == "shed":
                await asyncio.sleep(0.05)

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return time.perf_counter() - started, latencies, counts


async def measure_http(
    url: str, model: str, clients: int, requests: int, new_tokens: int
) -> tuple[float, list[float], dict[str, int]]:
    async with httpx.AsyncClient(timeout=120) as http:

        async def send(index: int, remaining: int) -> str:
            prompt = PROMPTS[(index + remaining) % len(PROMPTS)]
            body = {
                "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [prompt]}],
                "parameters": {"max_new_tokens": new_tokens},
            }
            response = await http.post(f"{url}/v2/models/{model}/infer", json=body)
            if response.status_code == 200:
                return "ok"
            return "shed" if response.status_code == 429 else "error"

        return await closed_loop(send, clients, requests)


async def measure_grpc(
    address: str, model: str, clients: int, requests: int, new_tokens: int
) -> tuple[float, list[float], dict[str, int]]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)

        async def send(index: int, remaining: int) -> str:
            prompt = PROMPTS[(index + remaining) % len(PROMPTS)]
            request = pb.ModelInferRequest(
                model_name=model,
                inputs=[
                    pb.ModelInferRequest.InferInputTensor(
                        name="text",
                        datatype="BYTES",
                        shape=[1],
                        contents=pb.InferTensorContents(bytes_contents=[prompt.encode()]),
                    )
                ],
                parameters={"max_new_tokens": pb.InferParameter(int64_param=new_tokens)},
            )
            try:
                await stub.ModelInfer(request, timeout=120)
            except grpc.aio.AioRpcError as err:
                shed = err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                return "shed" if shed else "error"
            return "ok"

        return await closed_loop(send, clients, requests)


def point(
    server: str,
    key: tuple[str, str, int],
    requests: int,
    result: tuple[float, list[float], dict[str, int]],
) -> Point:
    seconds, latencies, counts = result
    ms = np.asarray(latencies) * 1000 if latencies else np.zeros(1)
    protocol, model, clients = key
    return Point(
        server, protocol, model, clients, requests, seconds, counts["ok"], counts["shed"],
        counts["error"], float(np.percentile(ms, 50)), float(np.percentile(ms, 99)),
    )  # fmt: skip


@dataclass
class Server:
    name: str
    tree: Path
    grpc: bool
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    grpc_address: str = ""

    def start(self, model_dir: Path, max_in_flight: int) -> None:
        port, grpc_port = free_port(), free_port()
        command = [sys.executable, "-m", "workloads.serving", "--model-dir", str(model_dir),
                   "--port", str(port), "--max-in-flight", str(max_in_flight)]  # fmt: skip
        if self.grpc:
            command += ["--grpc-port", str(grpc_port)]
        env = {**os.environ, "PYTHONPATH": str(self.tree)}
        self.process = subprocess.Popen(
            command, cwd=self.tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.url, self.grpc_address = f"http://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}"
        deadline = time.monotonic() + 300
        name = model_dir.resolve().name
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the {self.name} server exited before it was ready")
            try:
                if httpx.get(f"{self.url}/v2/models/{name}/ready", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the {self.name} server was not ready within 300 s")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.process = None


def has_grpc(tree: Path) -> bool:
    """Whether a source tree's server takes ``--grpc-port``."""
    main = tree / "workloads" / "serving" / "__main__.py"
    return main.is_file() and "--grpc-port" in main.read_text()


def run_server(server: Server, args: argparse.Namespace, protocols: list[str]) -> list[Point]:
    name = args.model_dir.resolve().name
    clients = [int(c) for c in args.clients.split(",")]
    server.start(args.model_dir, args.max_in_flight)
    points = []
    try:
        for protocol in protocols:
            if protocol == "grpc" and not server.grpc:
                continue
            for model in (f"{name}-int8", name):

                def run(
                    count: int, requests: int, protocol: str = protocol, model: str = model
                ) -> tuple[float, list[float], dict[str, int]]:
                    if protocol == "http":
                        coroutine = measure_http(
                            server.url, model, count, requests, args.new_tokens
                        )
                    else:
                        coroutine = measure_grpc(
                            server.grpc_address, model, count, requests, args.new_tokens
                        )
                    return asyncio.run(coroutine)

                run(1, 4)  # warm-up
                for count in clients:
                    points.append(
                        point(
                            server.name,
                            (protocol, model, count),
                            args.requests,
                            run(count, args.requests),
                        )
                    )
    finally:
        server.stop()
    return points


def versions() -> str:
    from importlib import metadata  # noqa: PLC0415

    names = ("kserve", "onnxruntime", "grpcio", "uvicorn", "httpx")
    return ", ".join(f"{n} {metadata.version(n)}" for n in names)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.serving.loadtest")
    parser.add_argument("--model-dir", type=Path, required=True, help="a `make export` directory")
    parser.add_argument("--clients", default="1,8,32", help="concurrent clients (1,8,32)")
    parser.add_argument("--requests", type=int, default=64, help="requests per point (64)")
    parser.add_argument("--new-tokens", type=int, default=16, help="tokens per answer (16)")
    parser.add_argument("--max-in-flight", type=int, default=64, help="server's --max-in-flight")
    parser.add_argument("--protocol", default="http,grpc", help="http, grpc or both (http,grpc)")
    parser.add_argument(
        "--compare-with", type=Path, help="source tree of an earlier server to measure too"
    )
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds (1)")
    args = parser.parse_args(argv)
    if not (args.model_dir / "model_card.json").is_file():
        print(f"error: {args.model_dir}: not an export directory (make export)", file=sys.stderr)
        return 2
    protocols = [p.strip() for p in args.protocol.split(",") if p.strip()]
    if not protocols or set(protocols) - {"http", "grpc"}:
        print("error: --protocol takes http, grpc or http,grpc", file=sys.stderr)
        return 2
    servers = [Server("after", ROOT, grpc=True)]
    if args.compare_with is not None:
        tree = args.compare_with.resolve()
        if not (tree / "workloads" / "serving" / "__main__.py").is_file():
            print(f"error: {tree}: not a source tree with workloads/serving", file=sys.stderr)
            return 2
        servers.insert(0, Server("before", tree, grpc=has_grpc(tree)))
    points: list[Point] = []
    try:
        for round_index in range(args.rounds):
            order = servers if round_index % 2 == 0 else servers[::-1]
            for server in order:
                points += run_server(server, args, protocols)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    report(points, args, argv, servers)
    return 1 if any(p.errors for p in points) else 0


def _median(points: list[Point], attribute: str) -> float:
    return float(statistics.median(float(getattr(p, attribute)) for p in points))


def report(points: list[Point], args: argparse.Namespace, argv: Sequence[str] | None,
           servers: list[Server]) -> None:  # fmt: skip
    command = "python -m workloads.serving.loadtest " + shlex.join(argv or sys.argv[1:])
    machine = platform.processor() or platform.machine()
    print(f"\n`{command}` on {machine} ({os.cpu_count()} CPUs), {versions()}; "
          f"{args.new_tokens} new tokens per request, {args.requests} requests per point, "
          f"{args.rounds} round(s)\n")  # fmt: skip
    print("| server | protocol | model | clients | req/s | p50 ms | p99 ms | ok | shed | errors |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for p in points:
        print(f"| {p.server} | {p.protocol} | {p.model} | {p.clients} | {p.rps:.1f} | "
              f"{p.p50_ms:.0f} | {p.p99_ms:.0f} | {p.ok} | {p.shed} | {p.errors} |")  # fmt: skip
    if len(servers) < 2:
        return
    print("\nafter / before (median over rounds; req/s above 1 and latency below 1 are better)\n")
    print("| protocol | model | clients | req/s ratio | p50 ratio | p99 ratio |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    keys = sorted({p.key for p in points if p.server == "before"}, key=lambda k: (k[0], k[1], k[2]))
    for key in keys:
        before = [p for p in points if p.server == "before" and p.key == key]
        after = [p for p in points if p.server == "after" and p.key == key]
        if not after:
            continue
        ratios = [
            _median(after, a) / max(_median(before, a), 1e-9) for a in ("rps", "p50_ms", "p99_ms")
        ]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {ratios[0]:.2f} | {ratios[1]:.2f} | "
              f"{ratios[2]:.2f} |")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
