"""The MLflow client as the registry commands use it: one error type with a message a
user can act on, whatever went wrong (no server, an unknown model, a refusal).

Shared by `workloads.tracking.register` and `workloads.tracking.promote`; light to
import (MLflow itself is imported when a client is made).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")

#: MLflow's HTTP client retries 7 times with back-off (minutes) by default; a command
#: only needs to find out that the server is down.
CLIENT_ENV_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
#: The aliases serving reads: the stable version, the one tried beside it (the canary)
#: and the champion a promotion replaced (what a rollback returns to).
CHAMPION = "champion"
CHALLENGER = "challenger"
PREVIOUS = "previous"


#: The tracking URIs the registry commands take: a tracking server (``make track``'s,
#: the cluster's) or a local SQLite store. MLflow reads anything else without a scheme
#: as a folder to create a file store in, and its other stores (databases, Databricks)
#: are not the platform's.
TRACKING_SCHEMES = ("http", "https", "sqlite")


class RegistryError(RuntimeError):
    """A registry command that cannot go on, with what to do about it."""


def tracking_uri_problem(uri: str) -> str:
    """Why ``uri`` is not a tracking URI these commands take (`TRACKING_SCHEMES`), or
    "" when it is; checked before MLflow is imported, so a typo costs nothing."""
    hint = (
        "give the server's URL, e.g. TRACKING_URI=http://127.0.0.1:5000 (`make track`'s; "
        "TRACK_PORT= for another port), or sqlite:///<path>.db"
    )
    try:
        parts = urlsplit(uri)
        port = parts.port  # one that is not a number, or out of range, raises here
    except ValueError as err:
        return f"the tracking URI {uri!r} is not a URL ({err}); {hint}"
    if parts.scheme not in TRACKING_SCHEMES:
        return f"the tracking URI {uri!r} is not an http(s):// or sqlite:/// URI; {hint}"
    if parts.scheme != "sqlite" and (not parts.hostname or port == 0):
        return f"the tracking URI {uri!r} names no server (host and port); {hint}"
    if parts.scheme == "sqlite" and parts.path in ("", "/"):
        return f"the tracking URI {uri!r} names no database file; {hint}"
    return ""


def make_client(uri: str) -> Any:
    """An `MlflowClient` for ``uri`` that gives up on a dead server in seconds.

    Raises:
        RegistryError: ``uri`` is not a tracking URI these commands take
            (`tracking_uri_problem`), found before MLflow is imported.
    """
    problem = tracking_uri_problem(uri)
    if problem:
        raise RegistryError(problem)
    for key, value in CLIENT_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    from mlflow.tracking import MlflowClient  # noqa: PLC0415 - slow import, CLI only

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def unreachable(uri: str) -> RegistryError:
    return RegistryError(
        f"cannot reach the tracking server at {uri}; start it with `make track` (port "
        "TRACK_PORT=, default 5000) or name the server with TRACKING_URI= (make) / "
        "--tracking-uri"
    )


def call(uri: str, what: Callable[[], T], *, missing: str = "") -> T:
    """Run one client call; map MLflow's and the network's errors to `RegistryError`.

    Args:
        uri: the tracking server (for the messages).
        what: the call.
        missing: the message for "does not exist" (an unknown run, model or alias);
            empty to let MLflow's own message through.
    """
    from mlflow.exceptions import MlflowException  # noqa: PLC0415

    try:
        return what()
    except MlflowException as err:
        if missing and err.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise RegistryError(missing) from err
        if "failed with exception" in err.message or "Max retries" in err.message:
            raise unreachable(uri) from err  # the client's wrapper of a dead socket
        first = (err.message.strip().splitlines() or [err.error_code])[0]
        raise RegistryError(f"{uri} refused the request: {first[:300]}") from err
    except OSError as err:  # connection refused, timeouts (requests' errors are OSErrors)
        raise unreachable(uri) from err
