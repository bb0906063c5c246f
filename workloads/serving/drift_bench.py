"""``python -m workloads.serving.drift_bench --model-dir build/export/<name>``: what the
drift service costs per logged request.

Two figures per payload shape (the CPU predictor's JSON ``text`` request, Triton's
binary ``token_ids`` request), from CloudEvents built as KServe's agent sends them
(HTTP binary mode, ``cloudevents`` SDK):

- **handler**: µs per event in `drift_service.handle_event` alone (parse the event,
  read the V2 body, tokenise, count into the window), in this process;
- **end to end**: µs per event posted over loopback HTTP to a running drift service
  (``python -m workloads.serving.drift_service`` on 127.0.0.1), one client, sequential
  (the agent's workers send one event per request);

and the cost of one scrape (the scores computed from a full window). Bounded in count;
loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import numpy as np
from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent

from workloads.inference.drift import REFERENCE_FILE
from workloads.serving import drift_service

PROMPT = "In the desert, data stays in the country where it is made. "


def text_body(batch: int) -> tuple[bytes, dict[str, list[str]]]:
    """A CPU-predictor request: JSON text, ``batch`` prompts."""
    body = {
        "inputs": [
            {"name": "text", "datatype": "BYTES", "shape": [batch], "data": [PROMPT] * batch}
        ],
        "parameters": {"max_new_tokens": 16},
    }
    return json.dumps(body).encode(), {}


def ids_body(batch: int, seq: int) -> tuple[bytes, dict[str, list[str]]]:
    """A Triton request: INT64 ``token_ids`` as a binary tensor after the JSON header."""
    ids = np.resize(np.frombuffer(PROMPT.encode(), dtype=np.uint8), batch * seq).astype("<i8")
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "token_ids",
                    "datatype": "INT64",
                    "shape": [batch, seq],
                    "parameters": {"binary_data_size": ids.nbytes},
                }
            ]
        }
    ).encode()
    return header + ids.tobytes(), {"Inference-Header-Content-Length": [str(len(header))]}


def event(body: bytes, metadata: dict[str, list[str]], model: str) -> tuple[dict[str, str], bytes]:
    attributes = {
        "type": drift_service.REQUEST_EVENT,
        "source": "bench",
        "inferenceservicename": model,
        "metadata": json.dumps(metadata),
        "annotations": json.dumps({drift_service.VERSION_ANNOTATION: "1"}),
    }
    headers, data = to_binary(CloudEvent(attributes, body), data_marshaller=lambda d: d)
    return dict(headers), data


def per_call_us(call: Callable[[], object], count: int) -> float:
    call()  # warm-up
    started = time.perf_counter()
    for _ in range(count):
        call()
    return (time.perf_counter() - started) / count * 1e6


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.serving.drift_bench")
    parser.add_argument("--model-dir", type=Path, required=True, help="a `make export` directory")
    parser.add_argument("--events", type=int, default=2000, help="events per figure (2000)")
    args = parser.parse_args(argv)
    reference = args.model_dir / REFERENCE_FILE
    if not reference.is_file():
        print(f"error: {args.model_dir}: no {REFERENCE_FILE} (make export)",
              file=sys.stderr)  # fmt: skip
        return 2
    model = "bench"
    shapes = {
        "CPU predictor, JSON text, 1 prompt": text_body(1),
        "CPU predictor, JSON text, 8 prompts": text_body(8),
        "Triton, binary token_ids [1, 64]": ids_body(1, 64),
        "Triton, binary token_ids [8, 64]": ids_body(8, 64),
    }
    rows = []
    port, metrics_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "v1"
        directory.mkdir()
        directory.joinpath(REFERENCE_FILE).write_bytes(reference.read_bytes())
        state = drift_service.load_state(model, [f"1={directory}"], 500)
        process = subprocess.Popen(
            [sys.executable, "-m", "workloads.serving.drift_service", "--model", model,
             "--reference", f"1={directory}", "--port", str(port),
             "--metrics-port", str(metrics_port)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            # TCP_NODELAY, as the Go HTTP client of KServe's agent sets on every connection
            # (with Nagle, httpx's body write waits for the ACK of its header write).
            nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
            transport = httpx.HTTPTransport(socket_options=nodelay)
            with httpx.Client(timeout=30, transport=transport) as http:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        http.get(f"http://127.0.0.1:{port}/healthz")
                        break
                    except httpx.HTTPError:
                        if time.monotonic() > deadline or process.poll() is not None:
                            print("error: the drift service did not start", file=sys.stderr)
                            return 2
                        time.sleep(0.2)
                for name, (body, metadata) in shapes.items():
                    headers, data = event(body, metadata, model)

                    def handle(h: dict[str, str] = headers, d: bytes = data) -> None:
                        drift_service.handle_event(state, h, d)

                    handler = per_call_us(handle, args.events)

                    def post(h: dict[str, str] = headers, d: bytes = data) -> None:
                        response = http.post(f"http://127.0.0.1:{port}/", headers=h, content=d)
                        response.raise_for_status()

                    end_to_end = per_call_us(post, args.events)
                    rows.append((name, len(data), handler, end_to_end))
                round_trip = per_call_us(
                    lambda: http.get(f"http://127.0.0.1:{port}/healthz"), args.events
                )
                scrape = per_call_us(
                    lambda: http.get(f"http://127.0.0.1:{metrics_port}/metrics"), 200
                )
                in_process = per_call_us(
                    lambda: [v.window.scores() for v in state.versions.values()], 200
                )
        finally:
            process.terminate()
            process.wait(timeout=20)
    command = "python -m workloads.serving.drift_bench " + shlex.join(argv or sys.argv[1:])
    print(f"\n`{command}` on {platform.processor() or platform.machine()} "
          f"({os.cpu_count()} CPUs), {args.events} events per figure, window 500\n")  # fmt: skip
    print("| payload | event bytes | handler µs/event | end-to-end µs/event (loopback HTTP) |")
    print("| --- | ---: | ---: | ---: |")
    for name, size, handler, end_to_end in rows:
        print(f"| {name} | {size} | {handler:.0f} | {end_to_end:.0f} |")
    print(f"\nHTTP round trip with no work (GET /healthz, same client and server): "
          f"{round_trip:.0f} µs")  # fmt: skip
    print(f"\nscores of a full window: {in_process:.0f} µs in process, "
          f"{scrape:.0f} µs per /metrics scrape over loopback\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
