"""The publisher and the retrain trigger over TLS, as on the cluster: KFP's API server
serves HTTPS with a certificate from the cluster CA, and both verify it with that CA
(``--ca-cert``). The stand-in KFP (`tests.pipelines.fake_kfp`) serves HTTPS with a
certificate from a throwaway CA; one from another CA, or no CA given, is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.pipelines.fake_kfp import State, fake_kfp
from tests.pipelines.test_loop_clients import IR, PARAMETERS, SCHEDULE, notification
from tests.support.certs import authority, server_secret
from workloads.pipelines import publish as publisher
from workloads.pipelines import trigger as retrain
from workloads.pipelines.kfp_api import client

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[tuple[str, State, Path]]:
    """(https URL, state, the CA file) of a stand-in serving a certificate for
    ``localhost`` from a throwaway cluster CA."""
    secret = server_secret(tmp_path / "kfp-api-tls", authority(), ["localhost"])
    with fake_kfp(tls=secret) as (url, state):
        yield url, state, secret / "ca.crt"


def publish_argv(url: str, parameters: Path, *ca: str) -> list[str]:
    return ["--host", url, *ca, "--package", str(IR), "--parameters", str(parameters),
            "--pipeline", "data-to-model", "--version", "data-to-model-tls",
            "--experiment", "data-to-model", "--recurring-run", "s",
            "--schedule", SCHEDULE]  # fmt: skip


@pytest.fixture
def parameters(tmp_path: Path) -> Path:
    path = tmp_path / "parameters.json"
    path.write_text(json.dumps(PARAMETERS))
    return path


def test_the_publisher_verifies_the_api_server_with_the_ca(
    tls: tuple[str, State, Path], parameters: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, ca = tls
    assert url.startswith("https://")
    assert publisher.main(publish_argv(url, parameters, "--ca-cert", str(ca))) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["version_uploaded"] is True and printed["recurring_run_id"]
    assert state.refused == [] and len(state.recurring_runs) == 1


def test_a_certificate_of_another_ca_is_refused(
    tls: tuple[str, State, Path],
    parameters: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, state, _ = tls
    other = server_secret(tmp_path / "other", authority("another CA"), ["localhost"])
    assert publisher.main(publish_argv(url, parameters, "--ca-cert", str(other / "ca.crt"))) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"publish: KFP API at {url} is not reachable") and "\n" not in err
    assert "CERTIFICATE_VERIFY_FAILED" in err
    assert state.requests == []  # nothing was sent to a server that was not verified


def test_without_the_ca_the_system_roots_refuse_the_cluster_ca(
    tls: tuple[str, State, Path], parameters: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, _ = tls
    assert publisher.main(publish_argv(url, parameters)) == 1
    assert "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err
    assert state.requests == []


def test_a_certificate_for_another_name_is_refused(
    tmp_path: Path, parameters: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = authority()
    secret = server_secret(tmp_path / "tls", ca, ["ml-pipeline.elsewhere.svc"])
    with fake_kfp(tls=secret) as (url, state):
        argv = publish_argv(url, parameters, "--ca-cert", str(secret / "ca.crt"))
        assert publisher.main(argv) == 1
        assert state.requests == []
    assert "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err


@pytest.mark.parametrize("main", [publisher.main, retrain.main], ids=["publish", "trigger"])
def test_a_ca_for_a_plain_http_host_or_a_missing_ca_is_exit_2(
    main: object, tmp_path: Path, parameters: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert callable(main)
    secret = server_secret(tmp_path / "tls", authority(), ["localhost"])
    ca = secret / "ca.crt"
    common = ["--parameters", str(parameters), "--pipeline", "p"]
    extra = (
        ["--package", str(IR), "--version", "v", "--experiment", "e", "--recurring-run", "r"]
        if main is publisher.main
        else ["--experiment", "e", "--alert", "ModelInputDrift"]
    )
    assert main(["--host", "http://127.0.0.1:9", "--ca-cert", str(ca), *common, *extra]) == 2
    assert "the host must be https://" in capsys.readouterr().err
    missing = str(tmp_path / "none.crt")
    assert main(["--host", "https://127.0.0.1:9", "--ca-cert", missing, *common, *extra]) == 2
    assert "no CA certificate there" in capsys.readouterr().err


def test_the_trigger_starts_a_run_over_tls_and_answers_503_on_a_foreign_ca(
    tls: tuple[str, State, Path], tmp_path: Path
) -> None:
    url, state, ca = tls
    assert publisher.publish(
        client(url, ca),
        package=IR,
        pipeline="data-to-model",
        version="data-to-model-tls",
        experiment="data-to-model",
        recurring_run="s",
        schedule="",
        parameters=PARAMETERS,
    ).version_uploaded
    other = server_secret(tmp_path / "other", authority("another CA"), ["localhost"])

    def trigger(ca_file: Path) -> retrain.Trigger:
        return retrain.Trigger(
            api=lambda: client(url, ca_file),
            host=url,
            pipeline="data-to-model",
            experiment="data-to-model-drift",
            parameters=PARAMETERS,
            alerts=frozenset({"ModelInputDrift"}),
            cooldown=timedelta(hours=24),
        )

    status, body = trigger(other / "ca.crt").handle(notification())
    assert status == 503 and "CERTIFICATE_VERIFY_FAILED" in body["error"]
    assert state.runs == {}
    status, body = trigger(ca).handle(notification())
    assert status == 200 and body["started"] in state.runs
