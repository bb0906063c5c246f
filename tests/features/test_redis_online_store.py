"""The cluster's online-store settings against a real Redis: TLS with the server's
certificate verified against a CA, a password, and Feast materialising into it and
reading back what the predictor reads. The connection string is the one the cluster's
``feature_store.yaml`` carries (`modules.k8s.features.spec`), with its ``${...}``
references expanded by Feast's own loader; the registry is the SQL registry on SQLite
(the cluster's is PostgreSQL, which this machine does not run).

Needs ``redis-server`` with TLS (Debian's package: ``apt-get install redis-server``);
skipped, with that reason, where there is none.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from feast import FeatureStore

from modules.aws.online_store.spec import REDIS_PORT
from modules.k8s.features import spec as fs
from workloads.features import data, repo

REDIS = shutil.which("redis-server")
PASSWORD = "t0ken-of-sixteen-chars"
pytestmark = pytest.mark.skipif(
    REDIS is None, reason="no redis-server (apt-get install redis-server)"
)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_certificates(directory: Path) -> dict[str, Path]:
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("test CA"))
        .issuer_name(_name("test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = {
        "ca": directory / "ca.crt",
        "cert": directory / "tls.crt",
        "key": directory / "tls.key",
    }
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def redis_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    directory = tmp_path_factory.mktemp("redis")
    certs = make_certificates(directory)
    port = free_port()
    assert REDIS is not None
    command = [
        REDIS, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
        "--tls-cert-file", str(certs["cert"]), "--tls-key-file", str(certs["key"]),
        "--tls-ca-cert-file", str(certs["ca"]), "--tls-auth-clients", "no",
        "--requirepass", PASSWORD, "--save", "", "--appendonly", "no",
        "--dir", str(directory),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail("redis-server with TLS did not start")
            time.sleep(0.2)
        yield port, certs["ca"]
    finally:
        process.terminate()
        process.wait(timeout=20)


def cluster_store(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, port: int, ca: Path, password: str
) -> Any:
    """A store with the cluster's feature_store.yaml, registry swapped for SQLite."""
    text = fs.feature_store_yaml(redis_ca=str(ca))
    # The cluster's string names Redis's port 6379; this server listens on a free one.
    text = text.replace(f":{REDIS_PORT},", f":{port},")
    lines = [
        f"  path: sqlite:///{workdir / 'registry.db'}" if line.startswith("  path: ") else line
        for line in text.splitlines()
    ]
    (workdir / "feature_store.yaml").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv(fs.ENV_REDIS_HOST, "127.0.0.1")
    monkeypatch.setenv(fs.ENV_REDIS_PASSWORD, password)
    return FeatureStore(repo_path=str(workdir))


def test_feast_materialises_into_and_reads_from_redis_over_tls_with_a_password(
    redis_tls: tuple[int, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, ca = redis_tls
    dataset = data.generate(customers=50, weeks=8, seed=5)
    dataset.write(tmp_path / "data")
    store = cluster_store(tmp_path, monkeypatch, port, ca, PASSWORD)
    assert type(store.config.online_store).__name__ == "RedisOnlineStoreConfig"
    store.apply(repo.definitions(tmp_path / "data"))
    store.materialize(
        start_date=dataset.profiles["event_timestamp"].min().to_pydatetime(),
        end_date=dt.datetime.now(dt.UTC),
    )
    customer = int(dataset.activity["customer_id"].iloc[0])
    got = store.get_online_features(
        features=repo.feature_refs(), entity_rows=[{repo.JOIN_KEY: customer}]
    ).to_dict()
    latest = dataset.activity[dataset.activity["customer_id"] == customer].iloc[-1]
    assert got["logins_7d"] == [int(latest["logins_7d"])]
    assert got["transaction_value_30d_aed"] == [
        pytest.approx(float(latest["transaction_value_30d_aed"]))
    ]
    assert got["tickets_per_login"][0] == pytest.approx(
        latest["support_tickets_30d"] / (latest["logins_7d"] + 1)
    )


def test_a_wrong_password_is_refused(
    redis_tls: tuple[int, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, ca = redis_tls
    dataset = data.generate(customers=5, weeks=6, seed=5)
    dataset.write(tmp_path / "data")
    store = cluster_store(tmp_path, monkeypatch, port, ca, "not-the-password-at-all")
    store.apply(repo.definitions(tmp_path / "data"))
    with pytest.raises(Exception, match=r"(?i)auth|password|invalid"):
        store.get_online_features(
            features=repo.feature_refs(), entity_rows=[{repo.JOIN_KEY: 1000}]
        ).to_dict()


def test_an_untrusted_server_certificate_is_refused(
    redis_tls: tuple[int, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, _ = redis_tls
    other_ca = make_certificates(tmp_path)["ca"]  # a CA that did not sign the server's
    dataset = data.generate(customers=5, weeks=6, seed=5)
    dataset.write(tmp_path / "data")
    store = cluster_store(tmp_path, monkeypatch, port, other_ca, PASSWORD)
    store.apply(repo.definitions(tmp_path / "data"))
    with pytest.raises(Exception, match=r"(?i)certificate|ssl"):
        store.get_online_features(
            features=repo.feature_refs(), entity_rows=[{repo.JOIN_KEY: 1000}]
        ).to_dict()
