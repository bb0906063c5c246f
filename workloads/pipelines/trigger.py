"""The retrain trigger: Alertmanager's webhook notifications in, Kubeflow Pipelines runs out.

Written for the platform because nothing maintained does this one translation:
Alertmanager posts its own JSON (``version: "4"``, a group of alerts), KFP's API wants a
run request naming a pipeline version and parameters (see
`modules.k8s.pipelines.loop`). The cluster runs it behind a ClusterIP Service that only
Alertmanager's pods may reach::

    python -m workloads.pipelines.trigger --host https://ml-pipeline.kubeflow...:8888 \\
        --ca-cert /etc/gpuplatform-ca/ca.crt --tls-cert /etc/retrain-trigger/tls/tls.crt \\
        --tls-key /etc/retrain-trigger/tls/tls.key --port 8080 --path /alerts \\
        --pipeline data-to-model --parameters parameters.json \\
        --experiment data-to-model-drift --alert ModelInputDrift --cooldown-hours 24

It serves HTTPS only, TLS 1.3 only (as the platform's other endpoints: Prometheus,
Alertmanager, kube-rbac-proxy), with the certificate cert-manager issues it from the
cluster CA (Alertmanager verifies it with that CA). cert-manager renews the certificate
by rewriting the mounted Secret's files; the trigger notices before each connection
(`ServingCertificate`) and serves the new one without a restart.

For a notification with at least one firing alert of a named kind, it starts a run of
the pipeline's newest version, unless a run of the experiment is still active or the
last one started within the cooldown (a drift persists for hours; one retraining at a
time is enough). Requests are served one at a time, so two notifications cannot both
pass those checks. Answers: 200 with what it did or why it did not, 400 for a body
that is not an Alertmanager notification, 503 when KFP cannot be asked (Alertmanager
retries).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import ssl
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import kfp
import kfp_server_api
import urllib3

from workloads.pipelines.kfp_api import (
    ACTIVE_STATES,
    LoopError,
    api_failure,
    check_ca_cert,
    client,
    read_parameters,
    versions,
)

#: The largest notification read (Alertmanager sends every alert of a group).
MAX_BODY_BYTES = 1024 * 1024
#: The oldest TLS accepted: 1.3, as every endpoint the platform serves itself
#: (``minVersion: TLS13`` in monitoring, ``--tls-min-version=VersionTLS13``).
MINIMUM_TLS = ssl.TLSVersion.TLSv1_3
#: How long a caller may take to finish its handshake and to send its request: requests
#: are served one at a time, so a connection that stalls must not hold the trigger.
CONNECTION_TIMEOUT_S = 30.0


class CertificateError(Exception):
    """The certificate or key cannot be served (a one-line message)."""


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A TLS 1.3 server context serving ``cert`` (PEM, the chain) with ``key`` (PEM);
    `CertificateError` when either is missing, unreadable, not PEM, or they do not
    match."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MINIMUM_TLS
    try:
        for path in (cert, key):
            if not path.is_file():
                raise CertificateError(f"{path}: no such file")
        context.load_cert_chain(cert, key)
    except ssl.SSLError as err:
        reason = err.reason or str(err)
        raise CertificateError(
            f"{cert} and {key} are not a PEM certificate and its private key ({reason})"
        ) from None
    except OSError as err:  # e.g. unreadable to the trigger's user
        raise CertificateError(f"cannot read {cert} or {key}: {err.strerror}") from None
    return context


class ServingCertificate:
    """The served certificate and key, and the context serving them; re-read when the
    files change (cert-manager's renewal: the kubelet swaps the Secret's files)."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = cert, key
        self._fingerprint = self._read_fingerprint()
        self.context = server_context(cert, key)

    def _read_fingerprint(self) -> bytes | None:
        digest = hashlib.sha256()
        try:
            for path in (self.cert, self.key):
                digest.update(path.read_bytes())
                digest.update(b"\0")
        except OSError:
            return None
        return digest.digest()

    def current(self) -> ssl.SSLContext:
        """The context to serve the next connection with: a fresh one when the files'
        content changed since the last one was made, else the same. A changed pair that
        does not load (e.g. read half-way through a swap) keeps the previous context
        and is tried again when the files change again."""
        fingerprint = self._read_fingerprint()
        if fingerprint == self._fingerprint:
            return self.context
        self._fingerprint = fingerprint
        try:
            self.context = server_context(self.cert, self.key)
        except CertificateError as err:
            _log({"certificate": "kept the previous one", "error": str(err)})
        else:
            _log({"certificate": f"reloaded {self.cert}"})
        return self.context


def _log(line: Mapping[str, Any]) -> None:
    print(json.dumps(line, sort_keys=True), flush=True)


@dataclass
class Trigger:
    """Decides, per notification, whether to start a run, and starts it.

    Args:
        api: builds the KFP SDK's client (per notification: the API server may restart).
        host: KFP's API server URL (for messages).
        pipeline: the pipeline's name in KFP.
        experiment: the experiment drift runs are filed under.
        parameters: the runs' parameters.
        alerts: the alert names that start a run.
        cooldown: the least time between two started runs.
        clock: the current time (UTC).
    """

    api: Callable[[], kfp.Client]
    host: str
    pipeline: str
    experiment: str
    parameters: dict[str, Any]
    alerts: frozenset[str]
    cooldown: timedelta
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def firing(self, notification: Any) -> list[Mapping[str, Any]]:
        """The firing alerts of the named kinds; ValueError when the body is not an
        Alertmanager notification."""
        if not isinstance(notification, Mapping) or not isinstance(
            notification.get("alerts"), list
        ):
            raise ValueError("not an Alertmanager webhook notification (no alerts list)")
        found = []
        for alert in notification["alerts"]:
            labels = alert.get("labels") if isinstance(alert, Mapping) else None
            if not isinstance(labels, Mapping):
                raise ValueError("an alert without labels")
            if alert.get("status") == "firing" and labels.get("alertname") in self.alerts:
                found.append(labels)
        return found

    def handle(self, notification: Any) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON answer) for one notification."""
        try:
            firing = self.firing(notification)
        except ValueError as err:
            return HTTPStatus.BAD_REQUEST, {"error": str(err)}
        if not firing:
            return HTTPStatus.OK, {
                "skipped": "no firing alert of " + ", ".join(sorted(self.alerts))
            }
        try:
            return HTTPStatus.OK, self._start(firing)
        except (kfp_server_api.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
            return HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(api_failure(err, self.host))}
        except LoopError as err:
            return HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(err)}

    def _start(self, firing: list[Mapping[str, Any]]) -> dict[str, Any]:
        api = self.api()
        pipeline_id = api.get_pipeline_id(self.pipeline)
        if pipeline_id is None:
            raise LoopError(f"pipeline {self.pipeline} is not uploaded yet")
        newest = versions(api, pipeline_id)
        if not newest:
            raise LoopError(f"pipeline {self.pipeline} has no version")
        experiment_id = api.create_experiment(self.experiment).experiment_id
        recent = (
            api.list_runs(experiment_id=experiment_id, sort_by="created_at desc", page_size=20).runs
            or []
        )
        for run in recent:
            if str(run.state) in ACTIVE_STATES:
                return {"skipped": f"run {run.run_id} is still {run.state}"}
        now = self.clock()
        if recent and recent[0].created_at and now - recent[0].created_at < self.cooldown:
            return {
                "skipped": f"run {recent[0].run_id} started at {recent[0].created_at.isoformat()}, "
                f"within the {self.cooldown} cooldown"
            }
        version = newest[0]
        run = api.run_pipeline(
            experiment_id=experiment_id,
            job_name=f"{self.pipeline}-drift-{now:%Y%m%d-%H%M%S}",
            params=self.parameters,
            pipeline_id=pipeline_id,
            version_id=version.pipeline_version_id,
        )
        causes = sorted(
            {f"{a.get('model', '?')} v{a.get('version', '?')} {a.get('statistic', '')}".strip()
             for a in firing}
        )  # fmt: skip
        return {"started": run.run_id, "version": version.display_name, "alerts": causes}


def handler(trigger: Trigger, path: str) -> type[BaseHTTPRequestHandler]:
    """The request handler: POST ``path`` takes notifications, GET /healthz answers."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body, sort_keys=True).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._answer(HTTPStatus.OK, {"ok": True})
            else:
                self._answer(HTTPStatus.NOT_FOUND, {"error": f"no {self.path}"})

        def do_POST(self) -> None:
            if self.path != path:
                self._answer(HTTPStatus.NOT_FOUND, {"error": f"no {self.path}; POST {path}"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
                return
            try:
                notification = json.loads(self.rfile.read(length) or b"null")
            except ValueError:
                self._answer(HTTPStatus.BAD_REQUEST, {"error": "the body is not JSON"})
                return
            status, body = trigger.handle(notification)
            _log({"status": status, **body})
            self._answer(status, body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # one JSON line per notification is printed instead

    return Handler


class TLSServer(HTTPServer):
    """`HTTPServer` (one request at a time) over TLS: each accepted connection is
    wrapped with the certificate's current context (`ServingCertificate.current`), so a
    renewed certificate is served from the next connection on. A failed or stalled
    handshake closes that connection only (`socketserver` drops a connection whose
    ``get_request`` raises `OSError`, which `ssl.SSLError` and timeouts are)."""

    def __init__(
        self,
        address: tuple[str, int],
        handler_class: type[BaseHTTPRequestHandler],
        certificate: ServingCertificate,
    ) -> None:
        self.certificate = certificate
        super().__init__(address, handler_class)

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = self.socket.accept()
        # Bounds the handshake and, kept by the handler, every read of the request.
        connection.settimeout(CONNECTION_TIMEOUT_S)
        try:
            return self.certificate.current().wrap_socket(connection, server_side=True), address
        except OSError as err:
            connection.close()
            _log({"handshake_failed": str(err), "client": address[0]})
            raise


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workloads.pipelines.trigger")
    parser.add_argument("--host", required=True, help="KFP's API server URL")
    parser.add_argument(
        "--ca-cert", type=Path, help="the CA that signed the API server's certificate (PEM)"
    )
    parser.add_argument(
        "--tls-cert", required=True, type=Path, help="the served certificate chain (PEM)"
    )
    parser.add_argument("--tls-key", required=True, type=Path, help="its private key (PEM)")
    parser.add_argument("--bind", default="0.0.0.0", help="the address to listen on")
    parser.add_argument("--port", type=int, default=8080, help="0: any free port")
    parser.add_argument("--path", default="/alerts", help="where Alertmanager posts")
    parser.add_argument("--pipeline", required=True, help="the pipeline's name in KFP")
    parser.add_argument("--parameters", required=True, type=Path, help="run parameters (JSON)")
    parser.add_argument("--experiment", required=True, help="the drift runs' experiment")
    parser.add_argument(
        "--alert", action="append", required=True, help="an alert name that starts a run"
    )
    parser.add_argument("--cooldown-hours", type=float, default=24.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        check_ca_cert(args.host, args.ca_cert)
        parameters = read_parameters(args.parameters)
        certificate = ServingCertificate(args.tls_cert, args.tls_key)
    except (LoopError, CertificateError) as err:
        print(f"trigger: {err}", file=sys.stderr)
        return 2
    trigger = Trigger(
        api=lambda: client(args.host, args.ca_cert),
        host=args.host,
        pipeline=args.pipeline,
        experiment=args.experiment,
        parameters=parameters,
        alerts=frozenset(args.alert),
        cooldown=timedelta(hours=args.cooldown_hours),
    )
    # One request at a time (HTTPServer, not ThreadingHTTPServer): see the docstring.
    try:
        server = TLSServer((args.bind, args.port), handler(trigger, args.path), certificate)
    except OSError as err:
        print(f"trigger: cannot listen on {args.bind}:{args.port}: {err.strerror}", file=sys.stderr)
        return 2
    port = server.server_address[1]
    print(f"trigger: listening on https://{args.bind}:{port}{args.path}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
