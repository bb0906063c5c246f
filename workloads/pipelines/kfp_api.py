"""What the publisher and the retrain trigger share: the KFP SDK's client, the run
parameters file the platform writes, and the pipeline's versions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kfp
import kfp_server_api

#: KFP run states that still hold (or will hold) resources.
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "CANCELING", "PAUSED"})


class LoopError(Exception):
    """A failure to report in one line (the Job retries; the trigger answers 5xx)."""


def client(host: str, ca_cert: Path | None = None) -> kfp.Client:
    """The KFP SDK's client for KFP's API server (single-user mode: no credentials).

    ``ca_cert``: the CA that signed the server's certificate (on the cluster the cluster
    CA: KFP's API server serves HTTPS inside it); without it an ``https`` host is
    verified against the system's roots. The SDK hands it to urllib3 as ``ca_certs``
    (kfp_server_api's ``Configuration.ssl_ca_cert``), which verifies the certificate
    and the host name."""
    if ca_cert is None:
        return kfp.Client(host=host)
    return kfp.Client(host=host, ssl_ca_cert=str(ca_cert), verify_ssl=True)


def check_ca_cert(host: str, ca_cert: Path | None) -> None:
    """`LoopError` when the CA file is given but unreadable, or given for a plain-HTTP
    host (it would verify nothing: a configuration mistake, not a choice)."""
    if ca_cert is None:
        return
    if not host.startswith("https://"):
        raise LoopError(f"--ca-cert {ca_cert} given for {host}: the host must be https://")
    if not ca_cert.is_file():
        raise LoopError(f"{ca_cert}: no CA certificate there")


def read_parameters(path: Path) -> dict[str, Any]:
    """The typed run parameters (a JSON object the platform writes from the stack file)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise LoopError(f"{path}: cannot read the run parameters ({err})") from None
    if not isinstance(value, dict):
        raise LoopError(f"{path}: the run parameters are not a JSON object")
    return value


def versions(api: kfp.Client, pipeline_id: str) -> list[Any]:
    """Every version of a pipeline, newest first."""
    found: list[Any] = []
    token = ""
    while True:
        page = api.list_pipeline_versions(
            pipeline_id, page_token=token, page_size=100, sort_by="created_at desc"
        )
        found += page.pipeline_versions or []
        token = page.next_page_token or ""
        if not token:
            return found


def api_failure(err: Exception, host: str) -> LoopError:
    """A one-line message for an API or connection failure."""
    if isinstance(err, kfp_server_api.ApiException):
        return LoopError(f"KFP API at {host} answered {err.status} {err.reason}".rstrip())
    return LoopError(f"KFP API at {host} is not reachable ({err.__class__.__name__}: {err})")
