"""Every shell command the README shows is either run here, offline, exactly as written
(and must succeed, or fail with the exit code the README promises), or listed below with
the reason it cannot run offline. A command added to the README without a line here
fails `test_every_readme_command_is_classified`."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: Commands that need what this machine and CI do not have, by the command's start.
NOT_OFFLINE: dict[str, str] = {
    "make test": "is the suite this test runs in",
    "pulumi ": "needs the Pulumi CLI and a UAE state backend",
    "aws ": "needs an AWS account",
    "make bootstrap": "changes an AWS account (its dry run is run below)",
    "make audit": "reads a live AWS account (tested against moto in tests/policies)",
    ".venv/bin/python -m policies.audit": "reads a live AWS account (tested against moto)",
    "make review PLAN=file.json": "file.json stands for the user's own plan",
    # The walkthrough "From a checkpoint to a served model" runs in its own test below.
    "make train ARGS=": "the walkthrough (test_the_walkthrough_serves_a_model)",
    "make export CHECKPOINT=build/demo/": "the walkthrough",
    "make serve MODEL=build/export/demo": "the walkthrough",
    "curl -s -X POST http://127.0.0.1:8080/": "the walkthrough",
    "make train": "a 2-process training run, tested in tests/workloads",
    "make bench": "minutes of benchmarking; its figures are in BENCHMARKS.md",
    "make profile": "a profiled training run, tested in tests/workloads/test_profile.py",
    "make prices-refresh": "reads AWS's Pricing API (needs credentials)",
    ".venv/bin/python -m stacks.bootstrap": "changes an AWS account",
    ".venv-training/bin/python -m workloads.training.gpu_check": "needs an NVIDIA GPU (dry run)",
    "make track": "a long-running server, tested in tests/workloads",
    "make serve": "a long-running server, tested in tests/serving",
    "curl ": "talks to a running `make serve`, tested in tests/serving",
    "make register": "needs a tracked run, tested in tests/workloads",
    "make promote": "needs a registered model on a tracking server, tested in tests/workloads",
    "make rollback": "needs a registered model on a tracking server, tested in tests/workloads",
    "make export": "needs a checkpoint, tested in tests/workloads",
    "make lock": "needs PyPI and rewrites locks/",
    "make checkov": "installs checkov from PyPI; an independent scan, not part of make test",
    "make gpu-check": "needs an NVIDIA GPU (its dry run is tested in tests/workloads)",
    "make features": "installs .venv-features from PyPI; run by tests/features/test_serving.py",
    "make bench-features": "minutes of benchmarking after make features; figures in BENCHMARKS.md",
}

#: Run although a NOT_OFFLINE prefix matches them: they touch nothing outside.
RUN_ANYWAY = {"make bootstrap ARGS=--dry-run"}

#: Commands run as written, with the exit code the README promises (default 0).
EXPECTED_EXIT: dict[str, int] = {}

#: No credentials reach the commands: what needs an account must say so, not use one.
NO_CREDENTIALS = {
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def readme_commands() -> list[str]:
    """Commands of the README's ```sh blocks (continuation lines joined, comments and
    blank lines dropped) and its inline `make ...` / `.venv*/bin/python ...` commands
    that name no placeholder (`<stack>`), each once, in order."""
    text = README.read_text()
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            command = line.split(" #", 1)[0].strip() if not line.startswith("#") else ""
            if command:
                commands.append(command)
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    for span in re.findall(r"`((?:make|\.venv[\w-]*/bin/python) [^`]*)`", prose):
        if "<" not in span and "..." not in span:
            commands.append(span.strip())
    return list(dict.fromkeys(commands))


def offline(command: str) -> bool:
    if command in RUN_ANYWAY:
        return True
    return not any(command.startswith(prefix) for prefix in NOT_OFFLINE)


def test_every_readme_command_is_classified() -> None:
    for command in readme_commands():
        words = shlex.split(command)
        assert words, command
        if offline(command):
            assert words[0] == "make" or re.fullmatch(r"\.venv[\w-]*/bin/python", words[0]), (
                f"README command {command!r}: run it here (make or .venv*/bin/python) or "
                "add it to NOT_OFFLINE with the reason"
            )


OFFLINE_COMMANDS = [c for c in readme_commands() if offline(c)]


def make_dry_run(command: str) -> str:
    """What make would run for a `make` command (``make -n``), environment rules left
    out; "" for a command that is not make's."""
    words = shlex.split(command)
    if words[0] != "make":
        return ""
    result = subprocess.run(
        ["make", "-n", "--no-print-directory", *words[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def same_as_an_earlier_command(command: str) -> str:
    """The earlier README command that makes exactly the same commands run as `command`
    (`make review` and `make review STACK=uae-prod`: uae-prod is the default), or ""."""
    dry = make_dry_run(command)
    if not dry:
        return ""
    for earlier in OFFLINE_COMMANDS[: OFFLINE_COMMANDS.index(command)]:
        if EXPECTED_EXIT.get(earlier, 0) == EXPECTED_EXIT.get(command, 0) and (
            make_dry_run(earlier) == dry
        ):
            return earlier
    return ""


@pytest.mark.parametrize("command", OFFLINE_COMMANDS)
def test_readme_command_runs_as_documented(command: str) -> None:
    earlier = same_as_an_earlier_command(command)
    if earlier:
        # Runs exactly what `earlier` ran (make -n says so), which its own case runs.
        assert earlier in OFFLINE_COMMANDS
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | NO_CREDENTIALS
    result = subprocess.run(
        command,
        shell=True,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    expected = EXPECTED_EXIT.get(command, 0)
    assert result.returncode == expected, (
        f"{command!r} exited {result.returncode}, the README says {expected}:\n"
        f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    )
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


WALKTHROUGH = "## From a checkpoint to a served model"


def walkthrough_commands() -> list[str]:
    """The commands of the README's walkthrough section, in order."""
    text = README.read_text()
    section = text[text.index(WALKTHROUGH) :]
    section = section[: section.index("\n## ", 1)]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            command = line.split("  #", 1)[0].strip()
            if command:
                commands.append(command)
    return commands


@pytest.mark.slow
def test_the_walkthrough_serves_a_model() -> None:
    """Train, export, serve and the exact curl request, as the README shows them."""
    train, export, serve, curl = walkthrough_commands()
    assert serve.startswith("make serve") and curl.startswith("curl ")
    shutil.rmtree(ROOT / "build" / "demo", ignore_errors=True)
    for command in (train, export):
        result = subprocess.run(
            command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
        )
        assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    server = subprocess.Popen(
        ["timeout", "300", *shlex.split(serve)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        answer = None
        while time.monotonic() < deadline and server.poll() is None:
            result = subprocess.run(
                curl, shell=True, capture_output=True, text=True, timeout=60, check=False
            )
            if result.returncode == 0 and result.stdout.startswith("{"):
                answer = json.loads(result.stdout)
                break
            time.sleep(2)
        assert answer is not None, "make serve did not answer the README's request"
        assert answer["model_name"] == "demo-int8"
        (output,) = answer["outputs"]
        assert output["name"] == "text" and output["datatype"] == "BYTES"
        assert len(output["data"]) == 1 and output["data"][0]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
