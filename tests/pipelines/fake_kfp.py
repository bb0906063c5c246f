"""A stand-in for Kubeflow Pipelines' v2beta1 REST API, in memory, for the KFP SDK's client.

It serves only what the publisher and the trigger call, and holds itself to KFP's own
API definition (``vendor/kfp_api_single_file.swagger.json``, KFP 2.17.0): a request
whose path, method, query parameter or body field the definition does not declare is
answered 400 (and recorded in `State.refused`), and the list answers name their
arrays as the definition does. The SDK builds every request and parses every answer,
so a call it makes differently, or an answer it cannot read, fails the tests. Every
request is recorded (`State.requests`) for the tests to inspect.
"""

from __future__ import annotations

import itertools
import json
import re
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import default as email_policy
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import yaml

PREFIX = "/apis/v2beta1"
SWAGGER_FILE = Path(__file__).resolve().parent / "vendor" / "kfp_api_single_file.swagger.json"


@cache
def swagger() -> dict[str, Any]:
    return json.loads(SWAGGER_FILE.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _strict(node: Any) -> Any:
    """The definition's schemas, refusing undeclared properties; grpc-gateway takes an
    int64 as a JSON number or string."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    # Annotations (strings) go; a property *named* description or title stays.
    out = {
        k: _strict(v)
        for k, v in node.items()
        if not (k in ("description", "title") and isinstance(v, str))
    }
    if node.get("format") == "int64":
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string", "pattern": "^-?[0-9]+$"}]
    if "properties" in node and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


@cache
def _operations() -> list[tuple[re.Pattern[str], str, dict[str, Any]]]:
    found = []
    for template, methods in swagger()["paths"].items():
        pattern = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$")
        for method, operation in methods.items():
            found.append((pattern, method.upper(), operation))
    return found


def operation(method: str, path: str) -> dict[str, Any] | None:
    """The definition's operation for a request (None: KFP serves no such request)."""
    for pattern, verb, op in _operations():
        if verb == method and pattern.match(path):
            return op
    return None


def request_problems(method: str, path: str, query: dict[str, str], body: Any) -> list[str]:
    """What in a request KFP's API definition does not declare."""
    op = operation(method, path)
    if op is None:
        return [f"{method} {path} is not in KFP's API"]
    problems = []
    params = {p["name"]: p for p in op.get("parameters", [])}
    for name in query:
        if params.get(name, {}).get("in") != "query":
            problems.append(f"{method} {path}: query parameter {name!r} is not declared")
    declared_body = [p for p in params.values() if p.get("in") == "body"]
    if declared_body and body is not None:
        schema = {
            **_strict(declared_body[0]["schema"]),
            "definitions": _strict(swagger()["definitions"]),
        }
        validator = jsonschema.Draft4Validator(schema)
        problems += [
            f"{method} {path}: body.{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(body)
        ]
    return problems


def list_key(path: str) -> str:
    """The array field of a list answer, as the definition names it."""
    op = operation("GET", path)
    assert op is not None
    ref = op["responses"]["200"]["schema"]["$ref"].rsplit("/", 1)[-1]
    properties = swagger()["definitions"][ref]["properties"]
    (key,) = (str(k) for k, v in properties.items() if v.get("type") == "array")
    return key


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any


@dataclass
class State:
    pipelines: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    experiments: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    recurring_runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    #: Requests KFP's API definition does not declare, with why (answered 400).
    refused: list[str] = field(default_factory=list)
    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    #: What the next created run's ``created_at`` is (tests move it).
    now: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))

    def new_id(self, kind: str) -> str:
        return f"{kind}-{next(self.ids)}"

    def stamp(self) -> str:
        return self.now.strftime("%Y-%m-%dT%H:%M:%SZ")


def _matches(item: dict[str, Any], raw_filter: str | None) -> bool:
    if not raw_filter:
        return True
    for predicate in json.loads(raw_filter).get("predicates", []):
        value = predicate.get("stringValue", predicate.get("string_value"))
        if predicate.get("operation") not in ("EQUALS", 1) or item.get(predicate["key"]) != value:
            return False
    return True


def _sorted(items: list[dict[str, Any]], sort_by: str | None) -> list[dict[str, Any]]:
    if not sort_by:
        return items
    key, _, order = sort_by.partition(" ")
    return sorted(items, key=lambda i: (i.get(key) or "", i["_order"]), reverse=order == "desc")


def _public(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if not k.startswith("_")}


class Handler(BaseHTTPRequestHandler):
    state: State

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _parts(self) -> tuple[str, dict[str, str]]:
        parts = urlsplit(self.path)
        return parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()}

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        kind = self.headers.get("Content-Type", "")
        if kind.startswith("multipart/form-data"):
            message = BytesParser(policy=email_policy).parsebytes(
                b"Content-Type: " + kind.encode("latin-1") + b"\r\n\r\n" + raw
            )
            for part in message.iter_parts():
                if part.get_param("name", header="content-disposition") == "uploadfile":
                    content = part.get_payload(decode=True)
                    assert isinstance(content, bytes)
                    return {"uploadfile": content.decode("utf-8")}
            return {}
        return json.loads(raw) if raw else None

    def _record(self, method: str) -> tuple[str, dict[str, str], Any] | None:
        path, query = self._parts()
        body = self._body() if method in ("POST", "PUT") else None
        self.state.requests.append(Recorded(method, path, query, body))
        multipart = isinstance(body, dict) and "uploadfile" in body
        problems = request_problems(method, path, query, None if multipart else body)
        if problems:
            self.state.refused += problems
            self._send(400, {"error": "; ".join(problems), "code": 3})
            return None
        return path, query, body

    def _list(self, path: str, items: list[dict[str, Any]], query: dict[str, str]) -> None:
        key = list_key(path)
        chosen = [i for i in items if _matches(i, query.get("filter"))]
        chosen = _sorted(chosen, query.get("sort_by"))
        size = int(query.get("page_size") or 10)
        start = int(query.get("page_token") or 0)
        page = chosen[start : start + size]
        body: dict[str, Any] = {"total_size": len(chosen)}
        if page:
            body[key] = [_public(i) for i in page]
        if start + size < len(chosen):
            body["next_page_token"] = str(start + size)
        self._send(200, body)

    def do_GET(self) -> None:
        recorded = self._record("GET")
        if recorded is None:
            return
        path, query, _ = recorded
        s = self.state
        if path == f"{PREFIX}/healthz":
            self._send(200, {"multi_user": False, "pipeline_store": "database"})
        elif path == f"{PREFIX}/pipelines":
            self._list(path, list(s.pipelines.values()), query)
        elif path.startswith(f"{PREFIX}/pipelines/") and path.endswith("/versions"):
            pipeline_id = path.split("/")[-2]
            items = [v for v in s.versions.values() if v["pipeline_id"] == pipeline_id]
            self._list(path, items, query)
        elif path == f"{PREFIX}/experiments":
            self._list(path, list(s.experiments.values()), query)
        elif path == f"{PREFIX}/runs":
            items = [
                r for r in s.runs.values()
                if r["experiment_id"] == query.get("experiment_id", r["experiment_id"])
            ]  # fmt: skip
            self._list(path, items, query)
        elif path == f"{PREFIX}/recurringruns":
            items = [
                r for r in s.recurring_runs.values()
                if r["experiment_id"] == query.get("experiment_id", r["experiment_id"])
            ]  # fmt: skip
            self._list(path, items, query)
        else:
            self._send(404, {"error": f"no {path}", "code": 5})

    def _pipeline_version(self, pipeline_id: str, name: str, spec: str) -> dict[str, Any]:
        # (see `_spec_struct` for the shape of ``pipeline_spec``)
        s = self.state
        version = {
            "pipeline_id": pipeline_id,
            "pipeline_version_id": s.new_id("version"),
            "display_name": name,
            "created_at": s.stamp(),
            "pipeline_spec": _spec_struct(spec),
            "_order": len(s.versions),
        }
        s.versions[version["pipeline_version_id"]] = version
        return version

    def do_POST(self) -> None:
        recorded = self._record("POST")
        if recorded is None:
            return
        path, query, body = recorded
        s = self.state
        if path == f"{PREFIX}/pipelines/upload":
            name = query["name"]
            if any(p["display_name"] == name for p in s.pipelines.values()):
                self._send(409, {"error": "already exists", "code": 6})
                return
            pipeline_id = s.new_id("pipeline")
            pipeline: dict[str, Any] = {
                "pipeline_id": pipeline_id,
                "display_name": name,
                "description": query.get("description", ""),
                "created_at": s.stamp(),
                "_order": len(s.pipelines),
            }
            s.pipelines[pipeline_id] = pipeline
            self._pipeline_version(pipeline_id, name, body["uploadfile"])
            self._send(200, _public(pipeline))
        elif path == f"{PREFIX}/pipelines/upload_version":
            pipeline_id = query["pipelineid"]
            if pipeline_id not in s.pipelines:
                self._send(404, {"error": "no pipeline", "code": 5})
                return
            version = self._pipeline_version(pipeline_id, query["name"], body["uploadfile"])
            self._send(200, _public(version))
        elif path == f"{PREFIX}/experiments":
            experiment = {
                "experiment_id": s.new_id("experiment"),
                "display_name": body["display_name"],
                "created_at": s.stamp(),
                "storage_state": "AVAILABLE",
                "_order": len(s.experiments),
            }
            s.experiments[experiment["experiment_id"]] = experiment
            self._send(200, _public(experiment))
        elif path == f"{PREFIX}/runs":
            run = {
                **body,
                "run_id": s.new_id("run"),
                "created_at": s.stamp(),
                "state": "PENDING",
                "_order": len(s.runs),
            }
            s.runs[run["run_id"]] = run
            self._send(200, _public(run))
        elif path == f"{PREFIX}/recurringruns":
            recurring = {
                **body,
                "recurring_run_id": s.new_id("recurring"),
                "created_at": s.stamp(),
                "status": "ENABLED" if body.get("mode", "ENABLE") == "ENABLE" else "DISABLED",
                "_order": len(s.recurring_runs),
            }
            s.recurring_runs[recurring["recurring_run_id"]] = recurring
            self._send(200, _public(recurring))
        else:
            self._send(404, {"error": f"no {path}", "code": 5})

    def do_DELETE(self) -> None:
        recorded = self._record("DELETE")
        if recorded is None:
            return
        path = recorded[0]
        if path.startswith(f"{PREFIX}/recurringruns/"):
            self.state.recurring_runs.pop(path.rsplit("/", 1)[-1], None)
            self._send(200, {})
        else:
            self._send(404, {"error": f"no {path}", "code": 5})


@contextmanager
def fake_kfp(tls: Path | None = None) -> Iterator[tuple[str, State]]:
    """(base URL, state) of a running stand-in; stopped on exit. With ``tls`` (a
    directory holding ``tls.crt`` and ``tls.key``, as a certificate's Secret) it serves
    HTTPS, as KFP's API server does on the cluster, at ``https://localhost:<port>``."""
    state = State()
    handler = type("BoundHandler", (Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls / "tls.crt", tls / "tls.key")
        server.socket = context.wrap_socket(server.socket, server_side=True)
        base = f"https://localhost:{server.server_address[1]}"
    # shutdown() waits for serve_forever's next poll: 0.05 s, not the default 0.5 s per test
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield base, state
    finally:
        server.shutdown()
        server.server_close()


def _spec_struct(text: str) -> Any:
    """A version's ``pipeline_spec`` as KFP 2.17.0's API server returns it
    (backend/src/apiserver/server/api_util.go ``YamlStringToPipelineSpecStruct``): the
    pipeline spec itself, or, where the upload carries platform settings (a second
    document, ``platforms:``), ``{"pipeline_spec": ..., "platform_spec": ...}``."""
    documents = [d for d in yaml.safe_load_all(text) if d is not None]
    platforms = [d for d in documents if isinstance(d, dict) and "platforms" in d]
    pipelines = [d for d in documents if d not in platforms]
    if len(pipelines) != 1:
        raise ValueError("No pipeline spec provided in yaml doc")
    if not platforms:
        return pipelines[0]
    return {"pipeline_spec": pipelines[0], "platform_spec": platforms[0]}
