"""The cluster's ``feature_store.yaml`` (`modules.k8s.features.spec`) is a configuration
Feast 0.67 accepts: its own loader expands the environment the Secret provides into a
SQL registry on PostgreSQL over TLS and a Redis online store over TLS with a password."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from feast.repo_config import load_repo_config
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from modules.k8s.features import spec as fs


@pytest.mark.parametrize("ca", [None, "/etc/feast/online-store-ca/ca.crt"])
def test_feast_loads_the_cluster_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: str | None
) -> None:
    monkeypatch.setenv(fs.ENV_REGISTRY_HOST, "db.example.rds.amazonaws.com")
    monkeypatch.setenv(fs.ENV_REGISTRY_PASSWORD, "s3cret")
    monkeypatch.setenv(fs.ENV_REDIS_HOST, "master.features.cache.amazonaws.com")
    monkeypatch.setenv(fs.ENV_REDIS_PASSWORD, "t0ken-of-sixteen-chars")
    path = tmp_path / "feature_store.yaml"
    path.write_text(fs.feature_store_yaml(ca))
    config = load_repo_config(tmp_path, path)
    assert config.project == "smb_churn"
    registry = config.registry
    assert registry.registry_type == "sql"
    assert registry.path == (
        "postgresql+psycopg://feast:s3cret@db.example.rds.amazonaws.com:5432/feast"
        f"?sslmode=verify-full&sslrootcert={fs.REGISTRY_CA_FILE}"
    )
    online = config.online_store
    assert type(online).__name__ == "RedisOnlineStoreConfig"
    verify = f",ssl_ca_certs={ca}" if ca else ""
    assert online.connection_string == (
        "master.features.cache.amazonaws.com:6379,ssl=true,password=t0ken-of-sixteen-chars" + verify
    )
    # Feast 0.67 implements `type: file` with its Dask offline store.
    assert type(config.offline_store).__name__ == "DaskOfflineStoreConfig"
    assert config.entity_key_serialization_version == 3


def test_a_misspelled_key_is_refused_by_feast(tmp_path: Path) -> None:
    path = tmp_path / "feature_store.yaml"
    text = fs.feature_store_yaml().replace("connection_string:", "connection_strng:")
    path.write_text(text)
    with pytest.raises(Exception, match="connection_strng"):
        load_repo_config(tmp_path, path).online_store  # noqa: B018


def test_psycopg_is_told_to_verify_the_registry_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What SQLAlchemy hands psycopg for the registry's URL (Feast's SQL registry makes its
    engine from it): libpq verifies the server's certificate and host name against the
    mounted CA. libpq itself parses the options, so a misspelled one is refused."""
    monkeypatch.setenv(fs.ENV_REGISTRY_HOST, "db.example.rds.amazonaws.com")
    monkeypatch.setenv(fs.ENV_REGISTRY_PASSWORD, "s3cret")
    monkeypatch.setenv(fs.ENV_REDIS_HOST, "master.features.cache.amazonaws.com")
    monkeypatch.setenv(fs.ENV_REDIS_PASSWORD, "t0ken-of-sixteen-chars")
    path = tmp_path / "feature_store.yaml"
    path.write_text(fs.feature_store_yaml())
    url = make_url(load_repo_config(tmp_path, path).registry.path)
    engine = create_engine(url)
    _, options = engine.dialect.create_connect_args(url)
    options.pop("context")  # psycopg.connect's own argument (its adapters), not libpq's
    libpq = conninfo_to_dict(make_conninfo(**options))
    assert libpq["sslmode"] == "verify-full"
    assert libpq["sslrootcert"] == fs.REGISTRY_CA_FILE
    assert libpq["host"] == "db.example.rds.amazonaws.com"
    with pytest.raises(psycopg.ProgrammingError, match="sslrootcrt"):
        make_conninfo(**{**options, "sslrootcrt": fs.REGISTRY_CA_FILE})
