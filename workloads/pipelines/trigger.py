"""The retrain trigger: Alertmanager's webhook notifications in, Kubeflow Pipelines runs out.

Written for the platform because nothing maintained does this one translation:
Alertmanager posts its own JSON (``version: "4"``, a group of alerts), KFP's API wants a
run request naming a pipeline version and parameters (see
`modules.k8s.pipelines.loop`)::

    python -m workloads.pipelines.trigger --host https://ml-pipeline.kubeflow...:8888 \\
        --ca-cert /etc/gpuplatform-ca/ca.crt --port 8080 --path /alerts \\
        --pipeline data-to-model --parameters parameters.json \\
        --experiment data-to-model-drift --alert ModelInputDrift --cooldown-hours 24

It speaks plain HTTP on the pod's loopback only (``--bind`` 127.0.0.1 by default) and
keeps no TLS of its own: on the cluster the platform's TLS sidecar, ghostunnel (as in
front of KFP's UI and the tracking server), terminates TLS on the pod's port with the
certificate cert-manager issues from the cluster CA, re-reads it after a renewal, and
forwards each connection here; Alertmanager verifies it with the cluster CA and speaks
TLS 1.3 only, and only Alertmanager's pods may reach that port (the NetworkPolicy).

For a notification with at least one firing alert of a named kind, it starts a run of
the pipeline's newest version, unless a run of the experiment is still active or the
last one started within the cooldown (a drift persists for hours; one retraining at a
time is enough). Requests are served one at a time, so two notifications cannot both
pass those checks, and a connection that sends nothing is dropped after
`CONNECTION_TIMEOUT_S`. Answers: 200 with what it did or why it did not, 400 for a body
that is not an Alertmanager notification, 503 when KFP cannot be asked (Alertmanager
retries).
"""

from __future__ import annotations

import argparse
import json
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
#: How long a caller may take to send its request: requests are served one at a time,
#: so a connection that stalls must not hold the trigger.
CONNECTION_TIMEOUT_S = 30.0


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
        # Bounds every read of a request (socketserver sets it on the connection).
        timeout = CONNECTION_TIMEOUT_S

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


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workloads.pipelines.trigger")
    parser.add_argument("--host", required=True, help="KFP's API server URL")
    parser.add_argument(
        "--ca-cert", type=Path, help="the CA that signed the API server's certificate (PEM)"
    )
    parser.add_argument(
        "--bind", default="127.0.0.1", help="the address to listen on (the TLS proxy's target)"
    )
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
    except LoopError as err:
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
        server = HTTPServer((args.bind, args.port), handler(trigger, args.path))
    except OSError as err:
        print(f"trigger: cannot listen on {args.bind}:{args.port}: {err.strerror}", file=sys.stderr)
        return 2
    port = server.server_address[1]
    print(f"trigger: listening on http://{args.bind}:{port}{args.path}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
