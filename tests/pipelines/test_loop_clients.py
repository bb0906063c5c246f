"""The publisher and the retrain trigger, run with the KFP SDK's own client against a
stand-in KFP API that holds every request to KFP 2.17.0's API definition
(`tests.pipelines.fake_kfp`), and the trigger fed Alertmanager's webhook notifications
over HTTP."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import HTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.pipelines.fake_kfp import State, fake_kfp
from workloads.pipelines import publish as publisher
from workloads.pipelines.kfp_api import client
from workloads.pipelines.trigger import Trigger, handler

VENDOR = Path(__file__).resolve().parents[1] / "k8s" / "vendor" / "kubeflow-pipelines"
IR = VENDOR / "ir-lightweight_python_functions_with_outputs.yaml"
PARAMETERS = {"first_message": "a", "first_number": 1, "second_message": "b", "second_number": 2}
SCHEDULE = "0 0 2 * * 0"

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture
def kfp() -> Iterator[tuple[str, State]]:
    with fake_kfp() as (url, state):
        yield url, state
        assert state.refused == []


def publish(url: str, version: str = "data-to-model-aaaa", schedule: str = SCHEDULE,
            parameters: dict[str, Any] | None = None,
            ca: Path | None = None) -> publisher.Published:  # fmt: skip
    return publisher.publish(
        client(url, ca),
        package=IR,
        pipeline="data-to-model",
        version=version,
        experiment="data-to-model",
        recurring_run="data-to-model-schedule",
        schedule=schedule,
        parameters=PARAMETERS if parameters is None else parameters,
    )


def test_a_first_publish_uploads_the_version_and_schedules_it(kfp: tuple[str, State]) -> None:
    url, state = kfp
    result = publish(url)
    assert result.version_uploaded
    version = state.versions[result.version_id]
    assert version["display_name"] == "data-to-model-aaaa"
    assert version["pipeline_spec"]["pipelineInfo"]["name"] == "functions-with-outputs"
    (recurring,) = state.recurring_runs.values()
    assert recurring["recurring_run_id"] == result.recurring_run_id
    assert recurring["trigger"] == {"cron_schedule": {"cron": SCHEDULE}}
    assert recurring["pipeline_version_reference"] == {
        "pipeline_id": result.pipeline_id,
        "pipeline_version_id": result.version_id,
    }
    assert recurring["runtime_config"]["parameters"] == PARAMETERS
    assert recurring["max_concurrency"] in (1, "1")
    assert recurring["no_catchup"] is True
    assert recurring["mode"] == "ENABLE"


def test_publishing_again_changes_nothing(kfp: tuple[str, State]) -> None:
    url, state = kfp
    first = publish(url)
    posts = sum(r.method == "POST" for r in state.requests)
    again = publish(url)
    assert again.version_id == first.version_id and not again.version_uploaded
    assert again.recurring_run_id == first.recurring_run_id and again.recurring_runs_deleted == []
    # Only reads the second time (the experiment exists already).
    assert sum(r.method == "POST" for r in state.requests) == posts


def test_a_new_version_replaces_the_recurring_run(kfp: tuple[str, State]) -> None:
    url, state = kfp
    first = publish(url)
    second = publish(url, version="data-to-model-bbbb")
    assert second.version_uploaded and second.version_id != first.version_id
    assert second.recurring_runs_deleted == [first.recurring_run_id]
    (recurring,) = state.recurring_runs.values()
    assert recurring["pipeline_version_reference"]["pipeline_version_id"] == second.version_id


def test_changed_parameters_or_schedule_replace_the_recurring_run(kfp: tuple[str, State]) -> None:
    url, state = kfp
    first = publish(url)
    second = publish(url, parameters={**PARAMETERS, "first_number": 7})
    assert second.recurring_runs_deleted == [first.recurring_run_id]
    third = publish(url, parameters={**PARAMETERS, "first_number": 7}, schedule="0 0 3 * * *")
    assert third.recurring_runs_deleted == [second.recurring_run_id]
    (recurring,) = state.recurring_runs.values()
    assert recurring["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *"


def test_an_empty_schedule_removes_the_recurring_run(kfp: tuple[str, State]) -> None:
    url, state = kfp
    first = publish(url)
    off = publish(url, schedule="")
    assert off.recurring_run_id is None and off.recurring_runs_deleted == [first.recurring_run_id]
    assert state.recurring_runs == {}


def test_the_command_line_prints_what_it_did(
    kfp: tuple[str, State], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = kfp
    parameters = tmp_path / "parameters.json"
    parameters.write_text(json.dumps(PARAMETERS))
    argv = ["--host", url, "--package", str(IR), "--parameters", str(parameters),
            "--pipeline", "data-to-model", "--version", "data-to-model-cccc",
            "--experiment", "data-to-model", "--recurring-run", "s",
            "--schedule", SCHEDULE]  # fmt: skip
    assert publisher.main(argv) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["version_uploaded"] is True and printed["recurring_run_id"]


def test_an_unreachable_api_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parameters = tmp_path / "parameters.json"
    parameters.write_text("{}")
    argv = ["--host", "http://127.0.0.1:9", "--package", str(IR),
            "--parameters", str(parameters), "--pipeline", "p", "--version", "v",
            "--experiment", "e", "--recurring-run", "r"]  # fmt: skip
    assert publisher.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("publish: KFP API at http://127.0.0.1:9") and "\n" not in err


def test_missing_files_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--host", "http://127.0.0.1:9", "--package", str(tmp_path / "none.yaml"),
            "--parameters", str(tmp_path / "none.json"), "--pipeline", "p", "--version", "v",
            "--experiment", "e", "--recurring-run", "r"]  # fmt: skip
    assert publisher.main(argv) == 2
    assert "no compiled pipeline there" in capsys.readouterr().err


# -- the trigger ----------------------------------------------------------------------


def notification(status: str = "firing", alertname: str = "ModelInputDrift") -> dict[str, Any]:
    """An Alertmanager webhook notification (prometheus/alertmanager notify/webhook:
    version 4, a group of alerts with their labels, as documented in its configuration
    reference's <webhook_config>)."""
    labels = {
        "alertname": alertname,
        "model": "uae-gpt",
        "version": "3",
        "statistic": "token_js",
        "namespace": "team-nlp",
        "severity": "warning",
    }
    return {
        "version": "4",
        "groupKey": '{}/{alertname="ModelInputDrift"}:{alertname="ModelInputDrift"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "kubeflow/retrain-on-drift/retrain-trigger",
        "groupLabels": {"alertname": alertname},
        "commonLabels": labels,
        "commonAnnotations": {"summary": "Inputs of uae-gpt version 3 drift"},
        "externalURL": "http://alertmanager.monitoring:9093",
        "alerts": [
            {
                "status": status,
                "labels": labels,
                "annotations": {"summary": "Inputs of uae-gpt version 3 drift"},
                "startsAt": "2026-01-01T00:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus.monitoring:9090/graph",
                "fingerprint": "0123456789abcdef",
            }
        ],
    }


class Clock:
    def __init__(self, state: State) -> None:
        self.state = state

    def __call__(self) -> datetime:
        return self.state.now


@pytest.fixture
def trigger(kfp: tuple[str, State]) -> Iterator[tuple[str, State]]:
    """The trigger serving HTTP on a free port, in front of the stand-in KFP with the
    pipeline published."""
    url, state = kfp
    publish(url)
    app = Trigger(
        api=lambda: client(url),
        host=url,
        pipeline="data-to-model",
        experiment="data-to-model-drift",
        parameters=PARAMETERS,
        alerts=frozenset({"ModelInputDrift"}),
        cooldown=timedelta(hours=24),
        clock=Clock(state),
    )
    server = HTTPServer(("127.0.0.1", 0), handler(app, "/alerts"))
    # shutdown() waits for serve_forever's next poll: 0.05 s, not the default 0.5 s per test
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


def post(
    base: str, body: Any, path: str = "/alerts", context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, Any]]:
    """POST ``body`` as Alertmanager does (JSON); with ``context``, over HTTPS."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path, data=data, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def drift_runs(state: State) -> list[dict[str, Any]]:
    experiments = {e["experiment_id"] for e in state.experiments.values()
                   if e["display_name"] == "data-to-model-drift"}  # fmt: skip
    return [r for r in state.runs.values() if r["experiment_id"] in experiments]


def test_a_drift_alert_starts_a_run_of_the_newest_version(trigger: tuple[str, State]) -> None:
    base, state = trigger
    newest = max(state.versions.values(), key=lambda v: v["_order"])
    status, body = post(base, notification())
    assert status == 200, body
    (run,) = drift_runs(state)
    assert body["started"] == run["run_id"] and body["alerts"] == ["uae-gpt v3 token_js"]
    assert run["pipeline_version_reference"]["pipeline_version_id"] == newest["pipeline_version_id"]
    assert run["runtime_config"]["parameters"] == PARAMETERS
    assert run["display_name"].startswith("data-to-model-drift-")


def test_no_second_run_while_one_is_active_or_within_the_cooldown(
    trigger: tuple[str, State],
) -> None:
    base, state = trigger
    post(base, notification())
    (run,) = drift_runs(state)
    for active in ("PENDING", "RUNNING"):
        run["state"] = active
        status, body = post(base, notification())
        assert status == 200 and "still" in body["skipped"]
    run["state"] = "SUCCEEDED"
    state.now += timedelta(hours=23)
    status, body = post(base, notification())
    assert "cooldown" in body["skipped"] and len(drift_runs(state)) == 1
    state.now += timedelta(hours=2)
    status, body = post(base, notification())
    assert "started" in body and len(drift_runs(state)) == 2


@pytest.mark.parametrize(
    "body",
    [notification(status="resolved"), notification(alertname="InferenceServiceSlow")],
    ids=["resolved", "another-alert"],
)
def test_other_notifications_start_nothing(trigger: tuple[str, State], body: Any) -> None:
    base, state = trigger
    status, answer = post(base, body)
    assert status == 200 and "skipped" in answer and drift_runs(state) == []


@pytest.mark.parametrize(
    "body", [b"not json", {"alerts": "nope"}, {"alerts": [{"status": "firing"}]}],
    ids=["not-json", "alerts-not-a-list", "alert-without-labels"],
)  # fmt: skip
def test_malformed_notifications_are_400(trigger: tuple[str, State], body: Any) -> None:
    base, state = trigger
    status, answer = post(base, body)
    assert status == 400 and answer["error"] and drift_runs(state) == []


def test_a_pipeline_not_yet_published_is_503() -> None:
    with fake_kfp() as (url, state):
        app = Trigger(
            api=lambda: client(url), host=url, pipeline="data-to-model",
            experiment="e", parameters={}, alerts=frozenset({"ModelInputDrift"}),
            cooldown=timedelta(hours=1),
        )  # fmt: skip
        status, body = app.handle(notification())
        assert status == 503 and "not uploaded yet" in body["error"]
        assert state.refused == []


def test_an_unreachable_api_is_503() -> None:
    app = Trigger(
        api=lambda: client("http://127.0.0.1:9"), host="http://127.0.0.1:9",
        pipeline="data-to-model", experiment="e", parameters={},
        alerts=frozenset({"ModelInputDrift"}), cooldown=timedelta(hours=1),
        clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    status, body = app.handle(notification())
    assert status == 503 and body["error"].startswith("KFP API at http://127.0.0.1:9")


def test_health_and_unknown_paths(trigger: tuple[str, State]) -> None:
    base, _ = trigger
    with urllib.request.urlopen(base + "/healthz", timeout=10) as answer:
        assert answer.status == 200
    status, _ = post(base, notification(), path="/elsewhere")
    assert status == 404
