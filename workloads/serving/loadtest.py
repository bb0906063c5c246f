"""``python -m workloads.serving.loadtest --model-dir build/export/<name>`` (``make
bench-serve``): requests/s, p50/p99 latency and server CPU time per request of the
local model server serving an export's int8 model, at 1, 8 and 32 closed-loop clients
(each sends its next request when the last is answered), over HTTP and gRPC, for two
kinds of request: ``text`` (one prompt, the model's default 32 new tokens, greedy) and
``ids`` (8 token ids, the logits back).

Servers, started on 127.0.0.1 (free ports) with the same ONNX Runtime settings
(``--threads``), all running for the whole run; at each point they take 1-second
turns (``--seconds`` each in ``--slices`` turns), so that a change in the machine's load
falls on all of them alike:

- ``new``: this tree's server (``python -m workloads.serving --variants int8``);
- ``before`` (``--compare-with DIR``): the server of an earlier source tree ``DIR``
  (e.g. ``git archive <commit> | tar -x -C DIR``), with this environment's packages;
- ``kserve`` (``--compare-kserve``): KServe's unmodified ``ModelServer`` serving the same
  model class (`LanguageModelPredictor`) on the same file. It binds every interface
  (KServe's own choice); its logging is set to WARNING as this project's server has it.

The requests carry no parameters, because KServe's gRPC servicer hands a model the raw
protobuf parameter map (`workloads.serving.grpc_service`). The clients are httpx and
gRPC with KServe's messages, which have Triton's field numbers for all they send.
``--rounds`` repeats the whole run; the table gives each point's median over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]  # no stubs; this tool is run and timed by hand
import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ("The ", "Abu Dhabi is", "In the desert, ", "Data stays in ", "A model ")
IDS = [84, 104, 101, 32, 100, 101, 115, 101]  # "The dese"
Outcome = str  # "ok" | "shed" | "error"


def kserve_messages() -> tuple[Any, Any]:
    """KServe's gRPC messages and stub. kserve/model_server.py parses ``sys.argv`` when
    imported (a module-level ``parse_known_args``), and refuses this tool's ``--protocol
    http``: the import sees no arguments."""
    argv, sys.argv = sys.argv, sys.argv[:1]
    try:
        from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb  # noqa: PLC0415
        from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as pb_grpc  # noqa: PLC0415
    finally:
        sys.argv = argv
    return pb, pb_grpc


@dataclass
class Point:
    server: str
    protocol: str
    kind: str
    clients: int
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "shed": 0, "error": 0})
    latencies: list[float] = field(default_factory=list)
    cpu_s: float = 0.0  # the server process's CPU time (user + system) over the point

    @property
    def cpu_ms(self) -> float:
        """Server CPU time per answered request: what the server costs, whatever else
        the machine runs."""
        return self.cpu_s * 1000 / self.counts["ok"] if self.counts["ok"] else 0.0

    @property
    def rps(self) -> float:
        return self.counts["ok"] / self.seconds if self.seconds else 0.0

    def ms(self, percentile: float) -> float:
        return float(np.percentile(self.latencies, percentile) * 1000) if self.latencies else 0.0


Send = Callable[[int], Awaitable[Outcome]]


async def closed_loop(send: Send, point: Point, seconds: float) -> None:
    """``point.clients`` clients sending until ``seconds`` have passed, added to ``point``."""
    started = time.perf_counter()
    deadline = started + seconds

    async def client(index: int) -> None:
        sent = index
        while time.perf_counter() < deadline:
            begun = time.perf_counter()
            outcome = await send(sent)
            sent += 1
            point.counts[outcome] += 1
            if outcome == "ok":
                point.latencies.append(time.perf_counter() - begun)
            elif outcome == "shed":
                await asyncio.sleep(0.05)

    await asyncio.gather(*(client(i) for i in range(point.clients)))
    point.seconds += time.perf_counter() - started


def http_body(kind: str, index: int) -> dict[str, Any]:
    if kind == "text":
        prompt = PROMPTS[index % len(PROMPTS)]
        return {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [prompt]}]}
    return {"inputs": [{"name": "token_ids", "datatype": "INT64", "shape": [1, len(IDS)],
                        "data": IDS}]}  # fmt: skip


def grpc_request(pb: Any, model: str, kind: str, index: int) -> Any:
    if kind == "text":
        prompt = PROMPTS[index % len(PROMPTS)].encode()
        tensor = pb.ModelInferRequest.InferInputTensor(
            name="text", datatype="BYTES", shape=[1],
            contents=pb.InferTensorContents(bytes_contents=[prompt]),
        )  # fmt: skip
    else:
        tensor = pb.ModelInferRequest.InferInputTensor(
            name="token_ids", datatype="INT64", shape=[1, len(IDS)],
            contents=pb.InferTensorContents(int64_contents=IDS),
        )  # fmt: skip
    return pb.ModelInferRequest(model_name=model, inputs=[tensor])


async def sender(server: Server, protocol: str, kind: str, model: str, stack: Any) -> Send:
    """A function sending one request of ``kind`` to ``server``, over a connection (an
    HTTP pool, a gRPC channel) open until ``stack`` closes."""
    if protocol == "http":
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=120))
        url = f"{server.url}/v2/models/{model}/infer"

        async def send_http(index: int) -> Outcome:
            response = await http.post(url, json=http_body(kind, index))
            if response.status_code == 200:
                return "ok"
            return "shed" if response.status_code == 429 else "error"

        return send_http
    pb, pb_grpc = kserve_messages()
    channel = await stack.enter_async_context(grpc.aio.insecure_channel(server.grpc_address))
    stub = pb_grpc.GRPCInferenceServiceStub(channel)

    async def send_grpc(index: int) -> Outcome:
        try:
            await stub.ModelInfer(grpc_request(pb, model, kind, index), timeout=120)
        except grpc.aio.AioRpcError as err:
            return "shed" if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED else "error"
        return "ok"

    return send_grpc


async def measure(
    servers: list[Server], key: tuple[str, str, int], model: str, seconds: float, slices: int
) -> list[Point]:
    """One point of every server: ``seconds`` each, in ``slices`` turns taken in rotation,
    so that a change in the machine's load falls on all of them alike."""
    protocol, kind, clients = key
    points = [Point(server.name, protocol, kind, clients) for server in servers]
    async with contextlib.AsyncExitStack() as stack:
        sends = [await sender(server, protocol, kind, model, stack) for server in servers]
        for send in sends:  # connections open before the clock starts
            await closed_loop(send, Point("", protocol, kind, clients), 0.2)
        for _ in range(slices):
            for server, send, point in zip(servers, sends, points, strict=True):
                cpu = server.cpu_s()
                await closed_loop(send, point, seconds / slices)
                point.cpu_s += server.cpu_s() - cpu
    return points


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    name: str
    tree: Path
    command: list[str]
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    grpc_address: str = ""

    def start(self, model: str) -> None:
        port, grpc_port = free_port(), free_port()
        command = [*self.command, "--port", str(port), "--grpc-port", str(grpc_port)]
        env = {**os.environ, "PYTHONPATH": str(self.tree)}
        self.process = subprocess.Popen(
            command, cwd=self.tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.url, self.grpc_address = f"http://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the {self.name} server exited before it was ready")
            try:
                if httpx.get(f"{self.url}/v2/models/{model}/ready", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the {self.name} server was not ready within 300 s")

    def cpu_s(self) -> float:
        """CPU time (user + system, every thread) the server process has used so far."""
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.process = None


def plain_kserve(argv: Sequence[str]) -> None:
    """``loadtest plain-kserve --model-dir D --threads T --port P --grpc-port G``: the
    int8 model of ``D`` served by KServe's own ``ModelServer``, nothing overridden."""
    parser = argparse.ArgumentParser(prog="python -m workloads.serving.loadtest plain-kserve")
    for flag, kind in (("--model-dir", Path), ("--threads", int), ("--port", int),
                       ("--grpc-port", int)):  # fmt: skip
        parser.add_argument(flag, type=kind, required=True)
    args = parser.parse_args(argv)
    import logging  # noqa: PLC0415

    # As this project's server has it (workloads/serving/__main__.py): without a handler
    # KServe would log every request at INFO.
    logging.basicConfig(level=logging.WARNING)
    sys.argv = sys.argv[:1]  # kserve/model_server.py parses sys.argv when imported
    import kserve  # noqa: PLC0415

    from workloads.inference import SessionSettings  # noqa: PLC0415
    from workloads.serving.predictor import LanguageModelPredictor  # noqa: PLC0415

    model = LanguageModelPredictor(
        f"{args.model_dir.resolve().name}-int8", args.model_dir, "int8",
        settings=SessionSettings(intra_op_threads=args.threads),
    )  # fmt: skip
    model.load()
    server = kserve.ModelServer(
        http_port=args.port, grpc_port=args.grpc_port, enable_latency_logging=False
    )
    server.start([model])


def build_servers(args: argparse.Namespace) -> list[Server]:
    common = ["--model-dir", str(args.model_dir.resolve()), "--threads", str(args.threads)]
    ours = [sys.executable, "-m", "workloads.serving", *common, "--variants", "int8",
            "--max-in-flight", str(args.max_in_flight)]  # fmt: skip
    servers = []
    if args.compare_with is not None:
        servers.append(Server("before", args.compare_with.resolve(), ours))
    servers.append(Server("new", ROOT, ours))
    if args.compare_kserve:
        plain = [sys.executable, "-m", "workloads.serving.loadtest", "plain-kserve", *common]
        servers.append(Server("kserve", ROOT, plain))
    return servers


def run(args: argparse.Namespace, servers: list[Server]) -> list[Point]:
    model = f"{args.model_dir.resolve().name}-int8"
    clients = [int(c) for c in args.clients.split(",")]
    points = []
    for server in servers:
        server.start(model)
    try:
        for round_index in range(args.rounds):
            order = servers if round_index % 2 == 0 else servers[::-1]
            for protocol in args.protocols:
                for kind in args.kinds:
                    for count in clients:
                        key = (protocol, kind, count)
                        points += asyncio.run(measure(order, key, model, args.seconds, args.slices))
    finally:
        for server in servers:
            server.stop()
    return points


def machine() -> str:
    cpu = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    names = ("kserve", "onnxruntime", "fastapi", "uvicorn", "grpcio", "httpx")
    packages = ", ".join(f"{n} {metadata.version(n)}" for n in names)
    return f"{cpu} ({os.cpu_count()} CPUs), Python {platform.python_version()}, {packages}"


def report(points: list[Point], servers: list[Server], header: str) -> None:
    names = [s.name for s in servers]
    print(f"\n{header}\n")
    ratios = [("new", "kserve"), ("new", "before")]
    ratios = [r for r in ratios if set(r) <= set(names)]
    columns = [f"{n} req/s" for n in names] + [f"{a}/{b}" for a, b in ratios]
    both = "/".join(names)
    columns += [f"p50 ms ({both})", f"p99 ms ({both})", f"server CPU ms/request ({both})"]
    columns.append("errors")
    print("| protocol | input | clients | " + " | ".join(columns) + " |")
    print("| --- | --- | ---: | " + " | ".join("---:" for _ in columns) + " |")
    keys = sorted({(p.protocol, p.kind, p.clients) for p in points})
    for protocol, kind, clients in keys:
        at = {n: [p for p in points if (p.server, p.protocol, p.kind, p.clients)
                  == (n, protocol, kind, clients)] for n in names}  # fmt: skip
        rps = {n: statistics.median(p.rps for p in at[n]) for n in names}
        cells = [f"{rps[n]:.1f}" for n in names]
        cells += [f"{rps[a] / max(rps[b], 1e-9):.2f}" for a, b in ratios]
        for figure in (lambda p: p.ms(50), lambda p: p.ms(99), lambda p: p.cpu_ms):
            cells.append("/".join(f"{statistics.median(map(figure, at[n])):.1f}" for n in names))
        cells.append(str(sum(p.counts["error"] for n in names for p in at[n])))
        print(f"| {protocol} | {kind} | {clients} | " + " | ".join(cells) + " |")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["plain-kserve"]:
        plain_kserve(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m workloads.serving.loadtest")
    parser.add_argument("--model-dir", type=Path, required=True, help="a `make export` directory")
    parser.add_argument("--clients", default="1,8,32", help="concurrent clients (1,8,32)")
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="seconds per point and server (5)"
    )
    parser.add_argument(
        "--slices", type=int, default=5, help="turns per point, servers in rotation (5)"
    )
    parser.add_argument("--protocol", default="http,grpc", help="http, grpc or both (http,grpc)")
    parser.add_argument("--input", default="text,ids", help="text, ids or both (text,ids)")
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime threads (0: cores)")
    parser.add_argument("--max-in-flight", type=int, default=64, help="the servers' limit (64)")
    parser.add_argument("--compare-with", type=Path, help="source tree of an earlier server")
    parser.add_argument(
        "--compare-kserve", action="store_true", help="measure KServe's own ModelServer too"
    )
    parser.add_argument("--rounds", type=int, default=1, help="repeats of the run (1)")
    args = parser.parse_args(argv)
    args.protocols = [p.strip() for p in args.protocol.split(",") if p.strip()]
    args.kinds = [k.strip() for k in args.input.split(",") if k.strip()]
    if not (args.model_dir / "model.int8.onnx").is_file():
        print(f"error: {args.model_dir}: no int8 model of an export (make export)", file=sys.stderr)
        return 2
    if not args.protocols or set(args.protocols) - {"http", "grpc"}:
        print("error: --protocol takes http, grpc or http,grpc", file=sys.stderr)
        return 2
    if not args.kinds or set(args.kinds) - {"text", "ids"}:
        print("error: --input takes text, ids or text,ids", file=sys.stderr)
        return 2
    tree = args.compare_with
    if tree is not None and not (tree / "workloads" / "serving" / "__main__.py").is_file():
        print(f"error: {tree}: not a source tree with workloads/serving", file=sys.stderr)
        return 2
    servers = build_servers(args)
    load, started = os.getloadavg()[0], datetime.now(UTC)
    try:
        points = run(args, servers)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    header = (
        f"`python -m workloads.serving.loadtest {shlex.join(argv)}`: {machine()}; "
        f"{started:%Y-%m-%d %H:%M}-{datetime.now(UTC):%H:%M} UTC, load average {load:.1f} at "
        f"the start and {os.getloadavg()[0]:.1f} at the end; {args.seconds:g} s per point and "
        f"server in {args.slices} turns, {args.rounds} round(s)"
    )
    report(points, servers, header)
    return 1 if any(p.counts["error"] for p in points) else 0


if __name__ == "__main__":
    sys.exit(main())
