"""``python -m workloads.serving --model-dir build/export/<name>`` (``make serve``).

Serves the fp32 and int8 models of one export over the Open Inference Protocol (V2)
with KServe's model server: ``<name>`` (fp32) and ``<name>-int8``, at
``http://<host>:<port>/v2/models/<model>/{ready,infer}`` and metadata at
``/v2/models/<model>``; Prometheus metrics at ``/metrics``.

The same models are served over gRPC (``inference.GRPCInferenceService``) on
``--grpc-port`` (8081, KServe's default). The server itself (HTTP and gRPC endpoints,
bound where it is told, admission control in front) is `workloads.serving.app`.

The repository extension's load and unload are off unless ``--enable-model-control``
is given, and then need the bearer token of ``--control-token-file`` (or
``$MODEL_CONTROL_TOKEN``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from workloads.inference import ExportError, SessionSettings
from workloads.inference.drift import DriftReferenceError
from workloads.serving.app import serve_models
from workloads.serving.limits import Limits
from workloads.serving.predictor import LanguageModelPredictor
from workloads.serving.protocol import ModelControl, control_from_args

log = logging.getLogger("workloads.serving")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.serving",
        description="Serve an export's fp32 and int8 models over KServe's V2 protocol.",
    )
    # The underscore spellings are KServe's model-server conventions, which its
    # ServingRuntime passes (--model_name={{.Name}} --model_dir=/mnt/models --http_port).
    parser.add_argument(
        "--model-dir", "--model_dir", type=Path, required=True, help="a `make export` directory"
    )
    parser.add_argument(
        "--model-name",
        "--model_name",
        help="name of the first variant (default: the export's name; others get -<variant>)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", "--http_port", type=int, default=8080, help="HTTP port (8080)")
    parser.add_argument(
        "--grpc-port", "--grpc_port", type=int, default=8081, help="gRPC port (8081; 0: no gRPC)"
    )
    parser.add_argument(
        "--grpc-host", help="address to bind gRPC (default: --host; 127.0.0.1 in a pod)"
    )
    parser.add_argument(
        "--enable-model-control",
        action="store_true",
        help="serve the repository extension (index, load, unload), with a bearer token",
    )
    parser.add_argument(
        "--control-token-file",
        type=Path,
        help="file holding the model-control token (else $MODEL_CONTROL_TOKEN)",
    )
    parser.add_argument("--variants", default="fp32,int8", help="variants to serve (fp32,int8)")
    parser.add_argument(
        "--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: physical cores)"
    )
    parser.add_argument("--max-batch-rows", type=int, default=16, help="rows per model call (16)")
    parser.add_argument(
        "--max-in-flight", type=int, default=64, help="requests at once before 429 (64)"
    )
    parser.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest body (1 MiB)")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="per-request timeout (30 s)")
    parser.add_argument(
        "--drift-window",
        type=int,
        default=500,
        help="prompts in the drift window (500; 0: none, the drift service measures drift)",
    )
    return parser


def build_models(args: argparse.Namespace) -> list[LanguageModelPredictor]:
    """Load every variant asked for; raises `ExportError` or `DriftReferenceError`."""
    settings = SessionSettings(intra_op_threads=args.threads)
    name = args.model_dir.resolve().name
    models = []
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if len(set(variants)) != len(variants):
        raise ExportError(f"--variants names a variant twice: {args.variants}")
    for index, variant in enumerate(variants):
        if args.model_name:
            model_name = args.model_name if index == 0 else f"{args.model_name}-{variant}"
        else:
            model_name = name if variant == "fp32" else f"{name}-{variant}"
        model = LanguageModelPredictor(
            model_name,
            args.model_dir,
            variant,
            settings=settings,
            max_batch_rows=args.max_batch_rows,
            drift_window=args.drift_window,
        )
        model.load()
        models.append(model)
    if not models:
        raise ExportError("--variants names no variant; use fp32, int8 or both")
    return models


async def serve(
    models: list[LanguageModelPredictor], args: argparse.Namespace, control: ModelControl | None
) -> None:
    limits = Limits(args.max_body_bytes, args.max_in_flight, args.timeout_s)
    names = ", ".join(m.name for m in models)
    grpc_host = args.grpc_host or args.host
    print(f"serving {names} (version {models[0].version})", flush=True)
    print(f"  HTTP: http://{args.host}:{args.port}/v2/models/<model>/infer", flush=True)
    if args.grpc_port:
        print(f"  gRPC: {grpc_host}:{args.grpc_port} (inference.GRPCInferenceService)", flush=True)
    if control is not None:
        print("  model control (load/unload) enabled, bearer token required", flush=True)
    await serve_models(
        models,
        args.host,
        args.port,
        limits,
        grpc_port=args.grpc_port or None,
        grpc_host=grpc_host,
        control=control,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # KServe's routes use FastAPI's ORJSONResponse, which FastAPI deprecates once per request
    # (still so with kserve 0.21).
    warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")
    for flag, port in (("--port", args.port), ("--grpc-port", args.grpc_port)):
        if not 0 <= port < 65536 or (flag == "--port" and port == 0):
            print(f"error: {flag} must be in 1-65535, got {port}", file=sys.stderr)
            return 2
    if args.grpc_port and args.grpc_port == args.port:
        print(
            f"error: --port and --grpc-port are both {args.port}; give two ports", file=sys.stderr
        )
        return 2
    if args.drift_window < 0:
        print(f"error: --drift-window must be >= 0, got {args.drift_window}", file=sys.stderr)
        return 2
    try:
        control = control_from_args(args.enable_model_control, args.control_token_file)
        models = build_models(args)
    except (ExportError, DriftReferenceError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(models, args, control))
    except OSError as err:  # a port is taken, or the address is not ours
        print(f"error: cannot listen ({err.strerror or err}); free the port or choose "
              "another (PORT=, GRPC_PORT=)", file=sys.stderr)  # fmt: skip
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
