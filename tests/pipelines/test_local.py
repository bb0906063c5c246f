"""`make pipeline`'s local side without running the whole pipeline: each local step runs
its stage's interpreter on the same command line as the step's container in the IR, a
failing step ends its KFP task with the step's status, and what a user gets wrong is one
message, exit status 2, before anything runs or is written.

Run in the pipelines environment (the Makefile's TESTS_pipelines).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from workloads.pipelines import steps
from workloads.pipelines.local import EXIT_USER_ERROR
from workloads.pipelines.pipeline import IR_FILE
from workloads.pipelines.runner import STATUS_DIR_ENV, run_step, stage_python, step_argv

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text()
PLACEHOLDER = re.compile(r"^\{\{\$\.(inputs|outputs)\.(parameters|artifacts)\['(\w+)'\]")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_driver(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workloads.pipelines.local", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "raw"
    folder.mkdir()
    (folder / "a.txt").write_text("one document\nanother document\n")
    return folder


@pytest.mark.parametrize("step", steps.STEPS, ids=lambda s: s.name)
def test_the_local_command_is_the_containers_with_the_runs_values(step: steps.Step) -> None:
    """Fill the IR's placeholders with values as KFP's launcher would, and the result is
    what the local step starts, but for the interpreter (its stage's venv python)."""
    body = next(yaml.safe_load_all(IR_FILE.read_text()))
    container = body["deploymentSpec"]["executors"][f"exec-{step.name}"]["container"]
    values: dict[str, object] = {name: f"/runs/{step.name}/{name}" for name in step.refs}
    filled = []
    for arg in container["args"]:
        found = PLACEHOLDER.match(arg)
        filled.append(str(values[found[3]]) if found else arg)
    local = step_argv(step.name, values)
    assert local[0] == str(stage_python(step.stage))
    assert local[0].endswith(f"{steps.STAGE_VENVS[step.stage]}/bin/python")
    assert local[1:] == [*container["command"][1:], *filled]


def test_a_failing_step_ends_its_task_with_the_steps_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # A real step in its real environment (the data one): ingest of a missing folder.
    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path / "status"))
    with pytest.raises(SystemExit) as stopped:
        run_step("ingest", raw=str(tmp_path / "missing"), snapshot=str(tmp_path / "out"))
    assert stopped.value.code == 2
    record = json.loads((tmp_path / "status" / "ingest.json").read_text())
    assert record["returncode"] == 2
    assert record["argv"][:3] == [str(stage_python("data")), "-m", "workloads.data.ingest"]
    err = capfd.readouterr().err
    assert "ingest: SOURCE" in err and "does not exist" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_step_that_succeeds_records_it(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path / "status"))
    run_step("ingest", raw=str(source), snapshot=str(tmp_path / "snap"))
    assert json.loads((tmp_path / "status" / "ingest.json").read_text())["returncode"] == 0
    assert (tmp_path / "snap" / "a.txt").read_text() == (source / "a.txt").read_text()


def _refused(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == EXIT_USER_ERROR, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeline: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("case", "needles"),
    [
        ("missing", ("does not exist",)),
        ("empty", ("holds no .txt or .jsonl file",)),
        ("no-server", ("cannot reach the tracking server", "make track", "TRACKING_URI=")),
        ("not-http", ("is not an HTTP(S) server", "make track")),
        ("bad-numbers", ("--steps must be at least 1", "--canary-percent must be in 1-99")),
        # Found by the evaluate step after ingest, prepare and train, before.
        ("bad-name", ("NAME='a b/c' (--name) cannot name a registered model",)),
        ("bad-preset", ("PRESET='huge' (--preset) is not one of the trainer's presets: tiny",)),
        ("root-is-a-file", ("is a file; give a folder for the run's files",)),
    ],
)
def test_user_errors_are_one_message_and_nothing_runs(
    tmp_path: Path, source: Path, case: str, needles: tuple[str, ...]
) -> None:
    root = tmp_path / "runs"
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    args: dict[str, list[str]] = {
        "missing": [str(tmp_path / "nope"), "--tracking-uri", uri],
        "empty": [str(tmp_path / "empty"), "--tracking-uri", uri],
        "no-server": [str(source), "--tracking-uri", uri],
        "not-http": [str(source), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"],
        "bad-numbers": [
            str(source),
            "--tracking-uri",
            uri,
            "--steps",
            "0",
            "--canary-percent",
            "0",
        ],
        "bad-name": [str(source), "--tracking-uri", uri, "--name", "a b/c"],
        "bad-preset": [str(source), "--tracking-uri", uri, "--preset", "huge"],
        "root-is-a-file": [str(source), "--tracking-uri", uri],
    }
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.md").write_text("not a source file\n")
    if case == "root-is-a-file":
        root = tmp_path / "file" / "runs"
        (tmp_path / "file").write_text("mine\n")
    _refused(run_driver(*args[case], "--root", str(root)), *needles)
    assert not root.exists(), "nothing may be written before the checks pass"
    if case == "root-is-a-file":
        assert (tmp_path / "file").read_text() == "mine\n"


def test_a_server_that_is_not_mlflow_is_refused(tmp_path: Path, source: Path) -> None:
    # Something answers on the port, but not MLflow's /health: a plain HTTP server.
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        result = run_driver(str(source), "--tracking-uri", f"http://127.0.0.1:{port}")
    finally:
        server.terminate()
        server.wait(timeout=10)
    _refused(result, "answered /health with 404")


def rule(verb: str) -> tuple[list[str], str]:
    match = re.search(
        rf"^{re.escape(verb)}:([^\n#]*)(?:##[^\n]*)?\n((?:\t[^\n]*\n)*)", MAKEFILE, re.MULTILINE
    )
    assert match, f"no rule for {verb!r} in the Makefile"
    return match[1].split(), match[2]


def test_make_pipeline_installs_every_stage_and_runs_the_pipelines_environment() -> None:
    prerequisites, recipe = rule("pipeline")
    assert set(prerequisites) == {
        "$(DEPS_pipelines)", "$(DEPS_data)", "$(DEPS_training)", "$(DEPS_lifecycle)",
    }  # fmt: skip
    assert set(re.findall(r"\$\((PY(?:_\w+)?)\)", recipe)) == {"PY_pipelines"}
    assert "--tracking-uri $(TRACKING_URI)" in recipe
    assert "workloads.pipelines.local" in recipe
    prerequisites, recipe = rule("pipeline-ir")
    assert prerequisites == ["$(DEPS_pipelines)"]
    assert "workloads.pipelines.pipeline" in recipe


def test_the_tracking_uri_of_make_follows_track_port() -> None:
    # As for `make register`: TRACK_PORT= is enough for a `make track TRACK_PORT=` server.
    result = subprocess.run(
        ["make", "-s", "--no-print-directory", "-f", "-", "show", "TRACK_PORT=5123"],
        input=MAKEFILE + "\nshow:\n\t@echo $(TRACKING_URI)\n",
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "http://127.0.0.1:5123"
