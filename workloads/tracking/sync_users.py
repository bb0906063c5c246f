"""Keep the tracking server's users matching the teams' credentials (a sidecar).

Runs beside MLflow in the server's pod, in the MLflow image, with the standard library
only. For each user of ``USERS_FILE`` (JSON: user name -> password) it asks MLflow's
user API, as the admin (``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``),
whether the user exists: if so it sets the password, else it creates the user. Users
it was not given are left alone. The server is reached at ``MLFLOW_TRACKING_URI`` (the
pod's loopback; ``MLFLOW_TRACKING_SERVER_CERT_PATH`` verifies TLS where given). It
syncs once the server answers, then again whenever the file changes (Kubernetes
updates a mounted Secret in place), checking every ``SYNC_INTERVAL_S`` seconds.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

USERS_API = "/api/2.0/mlflow/users"
#: The server may still be starting when the Job does: retry the first call this long.
STARTUP_WAIT_S = 300


class SyncError(RuntimeError):
    """The server answered something other than what the user API documents."""


class Server:
    """MLflow's user API at ``base_url``, called as the admin."""

    def __init__(
        self, base_url: str, username: str, password: str, context: ssl.SSLContext | None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}
        self.context = context

    def call(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, query: str = ""
    ) -> tuple[int, dict[str, Any]]:
        url = f"{self.base_url}{USERS_API}{path}" + (f"?{query}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            try:
                return err.code, json.loads(text)
            except json.JSONDecodeError:
                return err.code, {"message": text}

    def sync_user(self, username: str, password: str) -> str:
        """Create ``username`` or set its password; returns what was done."""
        status, payload = self.call(
            "GET", "/get", query=urllib.parse.urlencode({"username": username})
        )
        if status == 200:
            status, payload = self.call(
                "PATCH", "/update-password", {"username": username, "password": password}
            )
            action = "password set"
        elif status == 404:
            status, payload = self.call(
                "POST", "/create", {"username": username, "password": password}
            )
            action = "created"
        else:
            raise SyncError(f"{username}: get answered {status}: {payload}")
        if status != 200:
            raise SyncError(f"{username}: {action} failed with {status}: {payload}")
        return action


def sync(server: Server, users: Mapping[str, str]) -> list[str]:
    """Every user of ``users`` made to exist with its password; one line per user."""
    return [f"{name}: {server.sync_user(name, users[name])}" for name in sorted(users)]


def wait_for(server: Server, timeout_s: float = STARTUP_WAIT_S) -> None:
    """Wait until the server answers (any HTTP status) or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            server.call("GET", "/get", query="username=")
            return
        except (urllib.error.URLError, OSError) as err:
            if time.monotonic() > deadline:
                raise SyncError(f"the server at {server.base_url} did not answer: {err}") from err
            time.sleep(5)


def sync_file(server: Server, path: str, last: str | None) -> str | None:
    """Sync the users of ``path`` unless its text is ``last``; returns the text synced
    (``last`` when nothing changed or the sync failed: it is tried again)."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if text == last:
        return last
    try:
        wait_for(server)
        for line in sync(server, json.loads(text)):
            print(f"sync-users: {line}", flush=True)
    except (SyncError, json.JSONDecodeError, urllib.error.URLError, OSError) as err:
        print(f"sync-users: {err}", file=sys.stderr, flush=True)
        return last
    return text


def main(environ: Mapping[str, str] | None = None, once: bool = False) -> int:
    """Sync, then keep syncing on every change; ``once``: sync once (status 1 if it
    failed)."""
    env = os.environ if environ is None else environ
    names = ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
    missing = [n for n in (*names, "USERS_FILE") if not env.get(n)]
    if missing:
        print(f"sync-users: set {', '.join(missing)}", file=sys.stderr)
        return 2
    ca = env.get("MLFLOW_TRACKING_SERVER_CERT_PATH")
    context = ssl.create_default_context(cafile=ca) if ca else None
    server = Server(env[names[0]], env[names[1]], env[names[2]], context)
    interval = float(env.get("SYNC_INTERVAL_S", "60"))
    last: str | None = None
    while True:
        last = sync_file(server, env["USERS_FILE"], last)
        if once:
            return 0 if last is not None else 1
        time.sleep(interval)


if __name__ == "__main__":
    sys.exit(main())
