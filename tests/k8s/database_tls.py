"""What a PostgreSQL client of the platform must hold to verify the database server it
logs in to (libpq's ``sslmode=verify-full`` with the server's CA mounted), read the same
way for every client: the MLflow server and its migration, the Feast registry's clients
and the Jobs that make databases on the tracking RDS instance."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any


def cloudnative_pg_server_names(
    cluster: str, namespace: str, domain: str = "cluster.local"
) -> list[str]:
    """The names CloudNativePG puts in the server certificate it issues for a cluster
    (operator 1.30.0, ``api/v1/cluster_funcs.go`` ``GetClusterAltDNSNames``: its ``-rw``,
    ``-r`` and ``-ro`` Services, each bare, with the namespace, ``.svc`` and
    ``.svc.<KUBERNETES_CLUSTER_DOMAIN>``)."""
    return [
        name
        for service in (f"{cluster}-rw", f"{cluster}-r", f"{cluster}-ro")
        for name in (
            service,
            f"{service}.{namespace}",
            f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.{domain}",
        )
    ]


def verifying_ca_source(
    env: Mapping[str, str],
    mounts: Iterable[Mapping[str, Any]],
    volumes: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, Any], str]:
    """The volume source (without its name) and key of the CA file a client verifies the
    server with: ``env`` must set ``PGSSLMODE=verify-full`` and ``PGSSLROOTCERT`` to a
    file under a read-only mount of one of ``volumes``. Fails an assertion otherwise."""
    assert env.get("PGSSLMODE") == "verify-full", env.get("PGSSLMODE")
    return ca_source_of(env["PGSSLROOTCERT"], mounts, volumes)


def ca_source_of(
    path: str, mounts: Iterable[Mapping[str, Any]], volumes: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, Any], str]:
    """The volume source and key behind the file ``path`` of a container."""
    file = PurePosixPath(path)
    (mount,) = [m for m in mounts if PurePosixPath(m["mountPath"]) == file.parent]
    assert mount.get("readOnly") is True
    (volume,) = [v for v in volumes if v["name"] == mount["name"]]
    source = {k: v for k, v in volume.items() if k != "name"}
    (kind,) = source
    items = source[kind].get("items")
    if items is None:  # the whole ConfigMap: the key is the file's name
        return source, file.name
    (item,) = [i for i in items if i["path"] == file.name]
    return source, str(item["key"])
