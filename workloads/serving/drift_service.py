"""``python -m workloads.serving.drift_service``: input drift of any V2 predictor, computed
outside it from KServe's request logger.

An InferenceService's ``logger`` (KServe's agent sidecar) posts every inference request
it proxies to this service as a CloudEvent in HTTP binary mode: ``ce-type``
``org.kubeflow.serving.inference.request`` (``...response`` for answers, with
``mode: all``), the request body as the event's data, and the extensions
``inferenceservicename``, ``namespace``, ``component``, ``endpoint``, ``metadata`` (the
logged request headers, JSON) and ``annotations`` (the logged pod annotations, JSON).
This service reads the V2 request in the data, whichever runtime it went to:

- the CPU predictor's ``text`` input (BYTES: JSON strings, or the binary tensor
  extension's length-prefixed bytes), tokenised with the model's byte tokenizer;
- ``token_ids`` (INT64 or INT32, ``[batch, seq]``: JSON numbers or little-endian
  binary), what Triton's ONNX model takes;

and adds each prompt to the drift window of the model version the event came from (the
pod annotation ``gpuplatform.ae/model-version``, which the logger forwards). It exports
the same gauge the predictor exports and the ``ModelInputDrift`` alert and the "Model
serving" dashboard read, ``uae_predictor_drift_score{model, version, statistic}``,
computed from the window when Prometheus scrapes it (so an event costs a parse and a
count, not a distance), on ``--metrics-port``.

Nothing is kept but counts: a prompt becomes its token histogram and length bin in the
window (memory only, the latest ``--window`` prompts per version) and the payload is
discarded; nothing is written to disk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import struct
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import uvicorn
from cloudevents.exceptions import GenericException
from cloudevents.http import from_http
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from workloads.inference.drift import (
    REFERENCE_FILE,
    DriftReference,
    DriftReferenceError,
    DriftWindow,
)
from workloads.inference.tokenizer import ByteTokenizer
from workloads.serving.metrics import DRIFT_HELP, DRIFT_LABELS, DRIFT_NAME
from workloads.serving.net import bind_socket

log = logging.getLogger("workloads.serving.drift_service")

REQUEST_EVENT = "org.kubeflow.serving.inference.request"
RESPONSE_EVENT = "org.kubeflow.serving.inference.response"
#: The pod annotation naming the registered model version (set on each predictor by
#: modules/k8s/serving/inference_service/manifests.py; the logger forwards it).
VERSION_ANNOTATION = "gpuplatform.ae/model-version"
#: The request header that splits a binary-extension body (logged as metadata).
BINARY_HEADER = "Inference-Header-Content-Length"
CARD_FILE = "model_card.json"
TEXT, TOKEN_IDS = "text", "token_ids"
_INTS = {"INT64": "<i8", "INT32": "<i4"}


class EventError(ValueError):
    """An event this service cannot use: answered 400 with the message, logged once."""


@dataclass
class VersionWindow:
    """The drift window of one model version and the label its metrics carry."""

    label: str
    window: DriftWindow
    prompts: int = 0


@dataclass
class DriftState:
    """Every version's window of one InferenceService.

    Args:
        model: the InferenceService name (the ``model`` label, as the predictor's).
        versions: registered version (the annotation's value) -> its window.
    """

    model: str
    versions: dict[str, VersionWindow]
    events: Counter = field(init=False)
    registry: CollectorRegistry = field(init=False)

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry()
        self.events = Counter(
            "uae_drift_events",
            "Logged inference events by type and outcome (used, ignored, refused).",
            ["type", "outcome"],
            registry=self.registry,
        )
        self.registry.register(_ScoreCollector(self))

    def version_for(self, annotations: dict[str, str]) -> VersionWindow:
        version = annotations.get(VERSION_ANNOTATION)
        if version is None:
            if len(self.versions) == 1:
                return next(iter(self.versions.values()))
            raise EventError(
                f"the event names no model version (pod annotation {VERSION_ANNOTATION!r} "
                "in the logger's metadataAnnotations)"
            )
        found = self.versions.get(version)
        if found is None:
            known = ", ".join(sorted(self.versions))
            raise EventError(f"model version {version!r} has no drift reference here ({known})")
        return found


class _ScoreCollector(Collector):
    """``uae_predictor_drift_score`` computed from the windows at scrape time."""

    def __init__(self, state: DriftState) -> None:
        self.state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # The predictor's own gauge: one name, one meaning, whichever computes it.
        family = GaugeMetricFamily(DRIFT_NAME, DRIFT_HELP, labels=list(DRIFT_LABELS))
        for entry in self.state.versions.values():
            if not len(entry.window):
                continue
            for statistic, score in entry.window.scores().items():
                family.add_metric([self.state.model, entry.label, statistic], score)
        yield family


# --- reading a logged V2 request ---------------------------------------------------------


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError as err:
        raise EventError(f"the event's {what} extension is not JSON ({err})") from None
    if not isinstance(value, dict):
        raise EventError(f"the event's {what} extension is not a JSON object")
    return value


def _header_length(metadata: dict[str, Any]) -> int | None:
    """The binary header's value from the logged request headers, if it was logged."""
    for name, values in metadata.items():
        if name.lower() == BINARY_HEADER.lower():
            value = values[0] if isinstance(values, list) and values else values
            try:
                return int(value)
            except (TypeError, ValueError):
                raise EventError(f"logged {BINARY_HEADER} is not an integer: {value!r}") from None
    return None


def split_body(body: bytes, header_length: int | None) -> tuple[dict[str, Any], bytes]:
    """A V2 request body as (its JSON, the binary tensor bytes after it)."""
    if header_length is None:
        try:
            return _as_request(json.loads(body)), b""
        except (json.JSONDecodeError, UnicodeDecodeError):
            # A binary-extension body whose header was not logged: the JSON ends where
            # the decoder stops (latin-1 maps each byte to one character, so the index
            # is the byte offset).
            try:
                parsed, end = json.JSONDecoder().raw_decode(body.decode("latin-1"))
            except json.JSONDecodeError as err:
                raise EventError(f"the logged request is not a V2 request ({err})") from None
            return _as_request(parsed), body[end:]
    if not 0 < header_length <= len(body):
        raise EventError(f"{BINARY_HEADER} {header_length} does not fit a {len(body)}-byte body")
    try:
        return _as_request(json.loads(body[:header_length])), body[header_length:]
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise EventError(f"the logged request's JSON header is not JSON ({err})") from None


def _as_request(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("inputs"), list):
        raise EventError("the logged request is not a V2 request (no 'inputs' list)")
    return value


def _flat(values: Any) -> Iterator[Any]:
    if isinstance(values, list):
        for value in values:
            yield from _flat(value)
    else:
        yield values


def _bytes_elements(raw: bytes) -> list[bytes]:
    """The binary extension's BYTES encoding: each element a 4-byte little-endian length
    and its bytes."""
    out, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise EventError("a BYTES tensor is truncated")
        (length,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise EventError("a BYTES tensor is truncated")
        out.append(raw[offset : offset + length])
        offset += length
    return out


def prompts_of(request: dict[str, Any], binary: bytes, tokenizer: ByteTokenizer) -> list[list[int]]:
    """The token-id prompts of a V2 request's ``text`` or ``token_ids`` input (other
    inputs carry no prompt: an `EventError`)."""
    offset = 0
    prompts: list[list[int]] = []
    used = False
    for tensor in request["inputs"]:
        if not isinstance(tensor, dict):
            raise EventError("a logged input is not an object")
        name, datatype = tensor.get("name"), tensor.get("datatype")
        shape = tensor.get("shape") or []
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        raw: bytes | None = None
        if "data" not in tensor:
            if not isinstance(size, int) or offset + size > len(binary):
                raise EventError(f"input {name!r} has neither data nor its binary bytes")
            raw, offset = binary[offset : offset + size], offset + size
        if name == TEXT and datatype == "BYTES":
            texts = _bytes_elements(raw) if raw is not None else list(_flat(tensor["data"]))
            for text in texts:
                string = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
                prompts.append(list(string.encode("utf-8")))
            used = True
        elif name == TOKEN_IDS and datatype in _INTS:
            if raw is not None:
                ids = np.frombuffer(raw, dtype=_INTS[datatype]).astype(np.int64)
            else:
                ids = np.asarray(list(_flat(tensor["data"])), dtype=np.int64)
            if len(shape) != 2 or int(np.prod(shape)) != ids.size:
                raise EventError(f"token_ids shape {shape} does not match its data")
            prompts.extend(ids.reshape(shape).tolist())
            used = True
    if not used:
        raise EventError("the request has no 'text' (BYTES) or 'token_ids' (INT64/INT32) input")
    return prompts


def handle_event(state: DriftState, headers: dict[str, str], body: bytes) -> str:
    """Count one logged event; returns its outcome. Raises `EventError`."""
    try:
        event = from_http(headers, body, data_unmarshaller=lambda data: data)
    except GenericException as err:
        raise EventError(f"not a CloudEvent ({err})") from None
    kind = event["type"]
    if kind == RESPONSE_EVENT:
        return "ignored"  # drift is of the inputs; answers are counted only
    if kind != REQUEST_EVENT:
        raise EventError(f"unexpected event type {kind!r}; expected {REQUEST_EVENT}")
    service = event.get("inferenceservicename")
    if service is not None and service != state.model:
        raise EventError(f"event of InferenceService {service!r}; this service is {state.model!r}")
    entry = state.version_for(_json_object(str(event.get("annotations") or ""), "annotations"))
    metadata = _json_object(str(event.get("metadata") or ""), "metadata")
    data = event.get_data()
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, bytes) or not data:
        raise EventError("the event carries no request body")
    request, binary = split_body(data, _header_length(metadata))
    tokenizer = ByteTokenizer()
    vocab = entry.window.reference.vocab_size
    for prompt in prompts_of(request, binary, tokenizer):
        if any(not 0 <= t < vocab for t in prompt):
            raise EventError(f"a prompt has token ids outside the vocabulary [0, {vocab})")
        entry.window.add(prompt)
        entry.prompts += 1
    return "used"


def build_app(state: DriftState) -> Starlette:
    """The events endpoint (``POST /``) and readiness (``GET /healthz``)."""

    async def events(request: Request) -> Response:
        body = await request.body()
        headers = dict(request.headers)
        kind = headers.get("ce-type", "unknown")
        try:
            outcome = handle_event(state, headers, body)
        except EventError as err:
            state.events.labels(kind, "refused").inc()
            log.warning("event refused: %s", err)
            return JSONResponse({"error": str(err)}, status_code=400)
        state.events.labels(kind, outcome).inc()
        return Response(status_code=200)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ready": True})

    return Starlette(
        routes=[Route("/", events, methods=["POST"]), Route("/healthz", healthz, methods=["GET"])]
    )


def build_metrics_app(state: DriftState) -> Starlette:
    async def metrics(request: Request) -> Response:
        return Response(generate_latest(state.registry), media_type="text/plain; version=0.0.4")

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])


# --- configuration ----------------------------------------------------------------------


def version_label(directory: Path, version: str) -> str:
    """The label the predictor gives the same model version (its tracking run, else its
    checkpoint step, from the model card), so both series line up; ``v<version>`` when
    the directory has no card."""
    card = directory / CARD_FILE
    if not card.is_file():
        return f"v{version}"
    try:
        source = json.loads(card.read_text(encoding="utf-8")).get("source", {})
    except (OSError, ValueError) as err:
        raise DriftReferenceError(f"{card}: not a model card ({err})") from err
    return str(source.get("run_id") or f"step-{source.get('step', '0')}")


def load_state(model: str, references: Iterable[str], window: int) -> DriftState:
    """Parse ``--reference VERSION=DIR`` entries; raises `DriftReferenceError`."""
    versions: dict[str, VersionWindow] = {}
    for entry in references:
        version, sep, path = entry.partition("=")
        if not sep or not version or not path:
            raise DriftReferenceError(
                f"--reference {entry!r}: give VERSION=DIR (e.g. 1=/mnt/drift/v1)"
            )
        if version in versions:
            raise DriftReferenceError(f"--reference: version {version!r} is given twice")
        directory = Path(path)
        reference = DriftReference.read(directory / REFERENCE_FILE)
        versions[version] = VersionWindow(
            version_label(directory, version), DriftWindow(reference, window)
        )
    if not versions:
        raise DriftReferenceError("give at least one --reference VERSION=DIR")
    labels = [v.label for v in versions.values()]
    if len(set(labels)) != len(labels):
        raise DriftReferenceError(
            f"two versions have the same model card label ({', '.join(labels)}): their "
            "drift series would be indistinguishable"
        )
    return DriftState(model, versions)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.serving.drift_service",
        description="Input drift of an InferenceService from KServe's request logger.",
    )
    parser.add_argument("--model", required=True, help="the InferenceService's name")
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="VERSION=DIR",
        help="a registered version and the directory with its drift_reference.json "
        "(and model_card.json); repeat for a canary",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="events port (8080)")
    parser.add_argument("--metrics-port", type=int, default=9090, help="metrics port (9090)")
    parser.add_argument("--window", type=int, default=500, help="prompts per window (500)")
    return parser


async def serve(state: DriftState, host: str, port: int, metrics_port: int) -> None:
    """Serve events and metrics until interrupted; raises `OSError` if a port is taken."""
    sockets = [bind_socket(host, port), bind_socket(host, metrics_port)]
    apps = (build_app(state), build_metrics_app(state))
    servers = [
        uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")) for app in apps
    ]
    await asyncio.gather(
        *(s.serve(sockets=[sock]) for s, sock in zip(servers, sockets, strict=True))
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for flag, port in (("--port", args.port), ("--metrics-port", args.metrics_port)):
        if not 0 < port < 65536:
            print(f"error: {flag} must be in 1-65535, got {port}", file=sys.stderr)
            return 2
    if args.port == args.metrics_port:
        print("error: --port and --metrics-port must differ", file=sys.stderr)
        return 2
    try:
        state = load_state(args.model, args.reference, args.window)
    except (DriftReferenceError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    labels = ", ".join(f"{k} ({v.label})" for k, v in state.versions.items())
    print(f"drift of {args.model} versions {labels}: events on http://{args.host}:{args.port}/, "
          f"metrics on http://{args.host}:{args.metrics_port}/metrics", flush=True)  # fmt: skip
    try:
        asyncio.run(serve(state, args.host, args.port, args.metrics_port))
    except OSError as err:
        print(f"error: cannot listen on {args.host} ({err.strerror or err})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
